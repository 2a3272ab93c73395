"""Fused variance-ratio statistics: log pi(y_t), V_t = 1 - sum_v pi_v^2 and entropy H_t per token.

docs/design.md sections 3.3 and 6. pi = softmax(logits / tau) over the whole vocabulary, streamed in
vocabulary blocks with an online softmax, so that no fp32 [T, V] tensor is ever materialised.

    token_stats(logits, targets, temperature)              logits [T, V] given
    token_stats_linear(hidden, weight, targets, temperature) logits = hidden @ weight.T, never
                                                           held whole; recomputed in backward

Both return fp32 (logp, V, H) of shape [T]. Gradients flow through logp and H; V is returned
detached (ReCo uses it under stop-gradient). Backends: "triton" (CUDA; on CPU only under
TRITON_INTERPRET=1, for tests), "chunked" (PyTorch), and "auto" (Triton for CUDA tensors when
Triton is installed, chunked otherwise).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sysconfig
import warnings
from types import ModuleType

import torch
from torch import Tensor

from reco_scaled.kernels import chunked
from reco_scaled.kernels.chunked import finish, new_state

__all__ = ["token_stats", "token_stats_linear", "resolve_backend"]

BACKENDS = ("chunked", "triton")
# Default (token_chunk, vocab_chunk) of the linear path: the largest logits tile held at once.
LINEAR_CHUNKS = {"chunked": (1024, 8192), "triton": (4096, 32768)}


def resolve_backend(backend: str, x: Tensor) -> str:
    """"auto" -> "triton" for CUDA tensors when Triton is installed, else "chunked". Triton on CUDA without the
    C toolchain it builds its launcher with falls back to "chunked", with a warning."""
    if backend == "auto":
        backend = "triton" if x.is_cuda and importlib.util.find_spec("triton") is not None else "chunked"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto' or one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and x.is_cuda and (problem := triton_toolchain_problem() or triton_launch_problem(str(x.device))):
        warnings.warn(f"reco_scaled.kernels: Triton cannot build or launch kernels here ({problem}); using the chunked "
                      "PyTorch kernel instead", stacklevel=2)
        return "chunked"
    return backend


@functools.cache
def triton_toolchain_problem() -> str | None:
    """What Triton lacks to build its launcher at the first kernel launch (triton/runtime/build.py: $CC, else gcc
    or clang, and Python.h), or None."""
    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")):
        return "no C compiler: set CC or install gcc"
    scheme = "posix_prefix" if sysconfig.get_default_scheme() == "posix_local" else sysconfig.get_default_scheme()
    include = sysconfig.get_paths(scheme=scheme)["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        return f"no Python headers: {include}/Python.h is missing (install python3-dev)"
    return None


@functools.cache
def triton_launch_problem(device: str) -> str | None:
    """Why the Triton statistics kernel cannot run on `device` (one tiny launch, once per device), or None.

    A missing libcuda or ptxas, or a cache directory that cannot be written, passes triton_toolchain_problem and
    raises only at a kernel's first launch (issue 32 item 6); found here, at the first resolve_backend, it makes
    every later call fall back to the chunked kernel instead of failing."""
    try:
        _launch_tiny_kernel(torch.device(device))
    except Exception as e:  # any failure of Triton's compile or launch
        return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
    return None


def _launch_tiny_kernel(device: torch.device) -> None:
    """Triton's statistics of uniform logits [2, 16]: log pi = -log 16, V = 15/16, H = log 16, or an error."""
    import math

    state = new_state(2, device)
    _impl("triton").update_stats(state, torch.zeros(2, 16, device=device), 0, torch.zeros(2, dtype=torch.long, device=device),
                                 1.0, 16)
    got = torch.stack(finish(state, 1.0)[:3]).cpu()
    want = torch.tensor([-math.log(16), 15 / 16, math.log(16)], device="cpu")[:, None].expand(3, 2)
    if not torch.allclose(got, want, atol=1e-5):
        raise RuntimeError(f"the kernel ran but computed {got.tolist()} for uniform logits, not {want[:, 0].tolist()}")


def _impl(backend: str) -> ModuleType:
    if backend == "triton":
        from reco_scaled.kernels import triton_stats  # lazy: importing triton is slow and optional

        return triton_stats
    return chunked


def _default_block(backend: str, width: int) -> int:
    """Vocabulary columns streamed per step: at most the backend's default, a power of two for Triton."""
    block = _impl(backend).DEFAULT_BLOCK
    return min(block, _next_pow2(width)) if backend == "triton" else min(block, width)


def _next_pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def _check_inputs(targets: Tensor, rows: int, temperature: float) -> None:
    if targets.shape != (rows,):
        raise ValueError(f"targets must have shape [{rows}], got {tuple(targets.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")


# ---------------------------------------------------------------------------------------------
# From logits: a custom op (so that torch.library.opcheck and torch.compile see one opaque op)
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op("reco::token_stats", mutates_args=())
def _token_stats_op(
    logits: Tensor, targets: Tensor, temperature: float, backend: str, block: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(logp, V, H, m, log_s1); the last two are saved for the backward pass."""
    state = new_state(logits.shape[0], logits.device)
    _impl(backend).update_stats(state, logits, 0, targets, 1.0 / temperature, block)
    return finish(state, 1.0 / temperature)


@_token_stats_op.register_fake
def _(logits: Tensor, targets: Tensor, temperature: float, backend: str, block: int):
    return tuple(logits.new_empty(logits.shape[0], dtype=torch.float32) for _ in range(5))


@torch.library.custom_op("reco::token_stats_backward", mutates_args=())
def _token_stats_backward_op(
    logits: Tensor,
    targets: Tensor,
    m: Tensor,
    log_s1: Tensor,
    entropy: Tensor,
    g_logp: Tensor,
    g_entropy: Tensor | None,
    temperature: float,
    backend: str,
    block: int,
) -> Tensor:
    return _impl(backend).grad_logits(logits, 0, targets, m, log_s1, entropy, g_logp, g_entropy, 1.0 / temperature, block)


@_token_stats_backward_op.register_fake
def _(logits: Tensor, targets: Tensor, m: Tensor, log_s1: Tensor, entropy: Tensor, g_logp: Tensor, g_entropy: Tensor | None,
      temperature: float, backend: str, block: int) -> Tensor:  # fmt: skip
    return torch.empty_like(logits)


def _setup_context(ctx, inputs, output) -> None:
    logits, targets, temperature, backend, block = inputs
    _, _, entropy, m, log_s1 = output
    ctx.save_for_backward(logits, targets, m, log_s1, entropy)
    ctx.args = (temperature, backend, block)
    ctx.set_materialize_grads(False)  # an unused H arrives as None, and its gradient work is skipped


def _backward(ctx, g_logp, g_var, g_entropy, g_m, g_log_s1):
    # V, m and log_s1 are statistics without a gradient: their incoming gradients are ignored.
    logits, targets, m, log_s1, entropy = ctx.saved_tensors
    if g_logp is None and g_entropy is None:
        return None, None, None, None, None
    g_logp = torch.zeros_like(m) if g_logp is None else g_logp
    grad = _token_stats_backward_op(logits, targets, m, log_s1, entropy, g_logp, g_entropy, *ctx.args)
    return grad, None, None, None, None


_token_stats_op.register_autograd(_backward, setup_context=_setup_context)


def token_stats(
    logits: Tensor, targets: Tensor, temperature: float = 1.0, *, backend: str = "auto", block: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token (log pi(y_t), V_t, H_t) of softmax(logits / temperature), each fp32 [T].

    logits: [T, V] in fp32, bf16 or fp16 (finite); targets: [T] int64 in [0, V).
    block: vocabulary columns per streaming step (default per backend; a power of two for Triton).
    Gradients reach `logits` through logp and H; V is detached.
    """
    _check_inputs(targets, logits.shape[0], temperature)
    backend = resolve_backend(backend, logits)
    block = block or _default_block(backend, logits.shape[1])
    logp, var, entropy, _, _ = _token_stats_op(logits, targets, float(temperature), backend, block)
    return logp, var.detach(), entropy


# ---------------------------------------------------------------------------------------------
# From hidden states and the LM head: logits tiles are recomputed in backward (cut-cross-entropy)
# ---------------------------------------------------------------------------------------------


def _chunks(n: int, size: int):
    return [slice(i, i + size) for i in range(0, n, size)]


_mm_out_dtype_works: bool | None = None  # whether torch.mm(..., out_dtype=torch.float32) runs on CUDA (tried once)


def matmul_fp32(a: Tensor, b: Tensor) -> Tensor:
    """a @ b accumulated and returned in fp32 (fp64 stays fp64), never rounded to bf16/fp16 on the way.

    Logits rounded to bf16 carry an error of up to 2^-9 |z| (0.06 at |z| = 25), and old and new
    log-probs come from micro-batches of different shapes, whose GEMMs sum in different orders: the
    on-policy ratio then drifts from 1 and clips spuriously (issue 18). On CUDA, torch.mm's out_dtype
    (torch >= 2.8) keeps the bf16 tensor-core GEMM and only skips the final rounding; elsewhere, or when
    it is missing, the tile's inputs are upcast (exact) and multiplied in fp32. Only the upcast path runs
    on CPU, so only it is tested here; benchmarks/gpu_acceptance.py is where the CUDA path can be seen.
    """
    if a.dtype in (torch.float32, torch.float64) and b.dtype == a.dtype:
        return a @ b
    global _mm_out_dtype_works
    if a.is_cuda and _mm_out_dtype_works is not False:
        try:
            out = torch.mm(a, b, out_dtype=torch.float32)
            _mm_out_dtype_works = True
            return out
        except torch.OutOfMemoryError:
            raise
        except (TypeError, RuntimeError, NotImplementedError):  # an older torch: no out_dtype, or not for this dtype
            _mm_out_dtype_works = False
    return a.float() @ b.float()


def _accumulate(acc: Tensor, a: Tensor, b: Tensor) -> None:
    """acc += a @ b, where acc may be wider than a and b (fp32 accumulation for bf16/fp16)."""
    if acc.dtype == a.dtype == b.dtype:
        acc.addmm_(a, b)
    else:
        acc += matmul_fp32(a, b)


class _TokenStatsLinear(torch.autograd.Function):
    """Loops over vocab chunks (outer) and token chunks (inner); one logits tile lives at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, backend, token_chunk, vocab_chunk):
        impl, inv_temp = _impl(backend), 1.0 / temperature
        block = _default_block(backend, vocab_chunk)
        state = new_state(hidden.shape[0], hidden.device)
        for vs in _chunks(weight.shape[0], vocab_chunk):
            w = weight[vs]
            for ts in _chunks(hidden.shape[0], token_chunk):  # fp32 tiles: see matmul_fp32
                impl.update_stats(state[ts], matmul_fp32(hidden[ts], w.T), vs.start, targets[ts], inv_temp, block)
        logp, var, entropy, m, log_s1 = finish(state, inv_temp)
        ctx.save_for_backward(hidden, weight, targets, m, log_s1, entropy)
        ctx.args = (inv_temp, backend, token_chunk, vocab_chunk, block)
        ctx.mark_non_differentiable(var)
        ctx.set_materialize_grads(False)  # an unused H arrives as None, and its gradient work is skipped
        return logp, var, entropy

    @staticmethod
    def backward(ctx, g_logp, g_var, g_entropy):
        hidden, weight, targets, m, log_s1, entropy = ctx.saved_tensors
        inv_temp, backend, token_chunk, vocab_chunk, block = ctx.args
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        if g_logp is None and g_entropy is None:
            return None, None, None, None, None, None, None
        g_logp = torch.zeros_like(m) if g_logp is None else g_logp
        impl = _impl(backend)
        acc_dtype = torch.promote_types(hidden.dtype, torch.float32)  # accumulate bf16/fp16 grads in fp32
        grad_hidden = torch.zeros(hidden.shape, dtype=acc_dtype, device=hidden.device) if need_hidden else None
        grad_weight = torch.empty_like(weight) if need_weight else None
        for vs in _chunks(weight.shape[0], vocab_chunk):
            w = weight[vs]
            acc_weight = torch.zeros(w.shape, dtype=acc_dtype, device=w.device) if need_weight else None
            for ts in _chunks(hidden.shape[0], token_chunk):
                g_ent = None if g_entropy is None else g_entropy[ts]
                stats = (m[ts], log_s1[ts], entropy[ts], g_logp[ts], g_ent)
                g = impl.grad_logits(matmul_fp32(hidden[ts], w.T), vs.start, targets[ts], *stats, inv_temp, block)
                g = g.to(hidden.dtype)  # the gradient GEMMs in the input dtype, accumulated in fp32
                if need_hidden:
                    _accumulate(grad_hidden[ts], g, w)
                if need_weight:
                    _accumulate(acc_weight, g.T, hidden[ts])
            if need_weight:
                grad_weight[vs] = acc_weight
        if need_hidden:
            grad_hidden = grad_hidden.to(hidden.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def token_stats_linear(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    *,
    backend: str = "auto",
    token_chunk: int | None = None,
    vocab_chunk: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token (log pi(y_t), V_t, H_t) of softmax(hidden @ weight.T / temperature), each fp32 [T].

    hidden: [T, d]; weight: [V, d] (the LM head, same dtype); targets: [T] int64 in [0, V).
    Logits are computed in tiles of at most [token_chunk, vocab_chunk], accumulated and kept in fp32
    (`matmul_fp32`: no bf16 rounding, so the statistics of a row do not depend on the rows it shares a
    micro-batch with) and recomputed in backward; gradients reach hidden and weight through logp and H
    (the logits' gradient is cast to the input dtype for its GEMMs), V is detached.
    """
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1] or hidden.dtype != weight.dtype:
        raise ValueError(f"need hidden [T, d] and weight [V, d] of one dtype, got {tuple(hidden.shape)} {hidden.dtype} "
                         f"and {tuple(weight.shape)} {weight.dtype}")
    _check_inputs(targets, hidden.shape[0], temperature)
    backend = resolve_backend(backend, hidden)
    default_t, default_v = LINEAR_CHUNKS[backend]
    logp, var, entropy = _TokenStatsLinear.apply(
        hidden, weight, targets, float(temperature), backend, token_chunk or default_t, vocab_chunk or default_v
    )
    return logp, var, entropy
