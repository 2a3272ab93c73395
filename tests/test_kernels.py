"""reco_scaled.kernels against an independent float64 reference (docs/design.md sections 3.6 and 6).

Every backend is compared with log_softmax / softmax in float64 on the same input values, never
with another backend. The Triton backend runs for real under TRITON_INTERPRET=1 (set by
conftest.py when CUDA is absent), on small shapes with blocks of 256 columns, so that V = 1000
and 1031 end in a partial block and every row is merged across several blocks.

Tolerances, and why:
- Statistics from given logits: the kernels upcast the exact input values and compute in fp32,
  so every input dtype gets the fp32 tolerance, atol = rtol = 1e-5 (fp32 eps is 1.2e-7; the
  online softmax adds a few dozen roundings).
- Gradient w.r.t. logits: returned in the logits' dtype, so one final rounding: rtol 2^-8 for
  bf16 (8 significant bits), 2^-10 for fp16 (11 bits), 1e-5 for fp32. Triton's interpreter
  (3.9) converts fp32 to bf16 by truncation where a GPU rounds to nearest, so interpreted bf16
  Triton gradients get one full bf16 ulp, 2^-7.
- Linear path: the logits tiles are accumulated and kept in fp32 for every input dtype
  (kernels.matmul_fp32), so the statistics get the fp32 tolerance, 2e-5 (a d = 64 fp32 dot
  product is exact to ~1e-6 here). The logits' gradient is cast to the input dtype for its GEMMs,
  so each entry carries a rounding of up to 2^-9 in bf16 (2^-12 in fp16). Gradients of hidden and W
  are compared normwise (max error relative to the largest entry). The entropy gradient
  -p (log p + H) amplifies the logit rounding: the plain path (bf16 logits, then log_softmax in
  float64) is itself 2.1-2.6% off float64 on these inputs, so bf16 gets 4e-2 (fp16 1e-2).
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from reco_mini import token_logprobs, variance_stat
from reco_scaled.kernels import resolve_backend, token_stats, token_stats_linear

BACKENDS = ["chunked", "triton"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BLOCK = 256  # small vocabulary blocks, so that the test vocabularies span several of them
T = 24  # rows: a few dozen keeps each interpreted Triton call around a second
LOGIT_RTOL = {torch.float32: 1e-5, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-10}
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
# Triton runs on the GPU when there is one (and no interpreter), else on CPU tensors, interpreted.
TRITON_DEVICE = "cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu"
LINEAR_TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-5, torch.float16: 2e-5}  # fp32 tiles for every dtype
LINEAR_GRAD_TOL = {torch.float32: 2e-5, torch.bfloat16: 4e-2, torch.float16: 1e-2}


def reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """(logp, V, H) in float64 straight from the definitions."""
    logp_all = F.log_softmax(logits.double() / temperature, dim=-1)
    probs = F.softmax(logits.double() / temperature, dim=-1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    return logp, 1.0 - probs.square().sum(-1), -(probs * logp_all).sum(-1)


def device(backend: str) -> str:
    return TRITON_DEVICE if backend == "triton" else "cpu"


def grad_rtol(backend: str, dtype: torch.dtype) -> float:
    """Relative tolerance of a gradient returned in `dtype` (see the module docstring)."""
    return 2.0**-7 if backend == "triton" and INTERPRETED and dtype == torch.bfloat16 else LOGIT_RTOL[dtype]


def make_logits(kind: str, rows: int, vocab: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g, dtype=torch.float64)
    if kind == "normal":
        x = 3.0 * x
    elif kind == "all-negative":  # a max that starts at 0 (verl's bug) underflows every exp here
        x = -30.0 - 5.0 * x.abs()
    elif kind == "huge-positive":
        x = 1e4 + 3.0 * x
    elif kind == "huge-negative":
        x = -1e4 + 3.0 * x
    elif kind == "huge-spread":  # +-1e4: each row saturates on one token
        x = 1e4 * x
    return x.to(dtype)


def upstream_grad(rows: int) -> torch.Tensor:
    """Random per-token weights of logp or H in the loss, float64."""
    return torch.randn(rows, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def make_targets(rows: int, vocab: int, seed: int = 1) -> torch.Tensor:
    targets = torch.randint(0, vocab, (rows,), generator=torch.Generator().manual_seed(seed))
    targets[:3] = torch.tensor([0, vocab - 1, vocab - 2])  # first and last columns, last block
    return targets


def assert_stats_close(actual, expected, atol: float, rtol: float) -> None:
    for name, a, e in zip(("logp", "V", "H"), actual, expected, strict=True):
        assert a.dtype == torch.float32 and a.shape == e.shape, name
        torch.testing.assert_close(a.cpu().double(), e, atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


def assert_normwise_close(actual: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    err = (actual.cpu().double() - expected).abs().max().item()
    scale = expected.abs().max().item()
    assert err <= rel * scale + 1e-12, f"max error {err:.3g} > {rel:g} * max |expected| {scale:.3g}"


# --- statistics from logits -------------------------------------------------------------------


@pytest.mark.parametrize("vocab", [1000, 1031])
@pytest.mark.parametrize("temperature", [0.6, 1.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_token_stats_matches_float64(backend, dtype, temperature, vocab):
    """Forward values, then the gradient w.r.t. the logits through logp only and through H only."""
    logits, targets = make_logits("normal", T, vocab, dtype), make_targets(T, vocab)
    x = logits.to(device(backend)).requires_grad_()
    out = token_stats(x, targets.to(x.device), temperature, backend=backend, block=BLOCK)
    ref_logits = logits.detach().double().requires_grad_()
    expected = reference(ref_logits, targets, temperature)
    assert_stats_close(out, tuple(e.detach() for e in expected), atol=1e-5, rtol=1e-5)

    coef = upstream_grad(T)
    for which in (0, 2):  # logp, H
        (grad,) = torch.autograd.grad((coef.float().to(x.device) * out[which]).sum(), x, retain_graph=True)
        (ref,) = torch.autograd.grad((coef * expected[which]).sum(), ref_logits, retain_graph=True)
        assert grad.dtype == dtype
        torch.testing.assert_close(grad.cpu().double(), ref, atol=1e-6, rtol=grad_rtol(backend, dtype))


@pytest.mark.parametrize("kind", ["all-negative", "huge-positive", "huge-negative", "huge-spread"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_token_stats_extreme_logits(backend, dtype, kind):
    logits, targets = make_logits(kind, T, 1031, dtype), make_targets(T, 1031)
    on = device(backend)
    out = token_stats(logits.to(on), targets.to(on), 0.6, backend=backend, block=BLOCK)
    expected = reference(logits, targets, 0.6)
    assert all(torch.isfinite(x).all() for x in out)
    # |logp| reaches 1e4 / 0.6 for "huge-spread": fp32 carries it to a relative 1e-5 there.
    assert_stats_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_stats_strided_logits(backend):
    """A column slice of wider logits (a padded vocabulary): rows are further apart than V."""
    padded, targets = make_logits("normal", T, 1031, torch.bfloat16), make_targets(T, 1000)
    logits = padded.to(device(backend))[:, :1000]
    out = token_stats(logits, targets.to(logits.device), 0.6, backend=backend, block=BLOCK)
    assert_stats_close(out, reference(padded[:, :1000], targets, 0.6), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "backend,vocab,block",
    [("chunked", 151936, None), ("chunked", 128256, None), ("chunked", 151936, 1000), ("triton", 151936, None)],
)
def test_token_stats_real_vocab(backend, vocab, block):
    """Qwen's and Llama's vocabularies (neither a multiple of the default blocks), T = 4."""
    logits, targets = make_logits("normal", 4, vocab, torch.bfloat16), make_targets(4, vocab)
    x = logits.to(device(backend)).requires_grad_()
    coef = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    logp, var, entropy = token_stats(x, targets.to(x.device), 0.6, backend=backend, block=block)
    c = coef.to(x.device)
    ((c[0] * logp).sum() + (c[1] * entropy).sum()).backward()

    ref_logits = logits.detach().double().requires_grad_()
    expected = reference(ref_logits, targets, 0.6)
    ((coef[0] * expected[0]).sum() + (coef[1] * expected[2]).sum()).backward()
    assert_stats_close((logp, var, entropy), tuple(e.detach() for e in expected), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x.grad.cpu().double(), ref_logits.grad, atol=1e-6, rtol=grad_rtol(backend, torch.bfloat16))


def test_variance_is_stop_gradient_and_matches_reco_mini():
    logits, targets = make_logits("normal", T, 1000, torch.float32).requires_grad_(), make_targets(T, 1000)
    logp, var, entropy = token_stats(logits, targets, 0.6, block=BLOCK)
    assert not var.requires_grad and logp.requires_grad and entropy.requires_grad
    # the same V and log-prob as the single-file reference implementation
    torch.testing.assert_close(var, variance_stat(logits.detach(), 0.6), atol=1e-6, rtol=0)
    torch.testing.assert_close(logp, token_logprobs(logits.detach(), targets, 0.6), atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck(backend):
    """Schema, fake-tensor and autograd registration of the custom op (torch.library.opcheck)."""
    logits = make_logits("normal", 8, 300, torch.float32).to(device(backend)).requires_grad_()
    targets = make_targets(8, 300).to(logits.device)
    torch.library.opcheck(torch.ops.reco.token_stats.default, (logits, targets, 0.6, backend, BLOCK))


# --- fused linear path ------------------------------------------------------------------------


def linear_inputs(vocab: int, dtype: torch.dtype, d: int = 64):
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(T, d, generator=g, dtype=torch.float64)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64) * (2.0 / d**0.5)  # logits std ~2
    return hidden.to(dtype), weight.to(dtype), make_targets(T, vocab)


# Tiles that divide neither T = 24 nor V; fewer of them for Triton, whose interpreted launches are slow.
LINEAR_CHUNKS = {"chunked": dict(token_chunk=10, vocab_chunk=BLOCK), "triton": dict(token_chunk=16, vocab_chunk=2 * BLOCK)}
# The Triton kernels already met every dtype, temperature and vocabulary above; on the linear path
# they run on V = 1031 only, the chunked backend on the full grid (time budget of the interpreter).
LINEAR_CASES = [
    (backend, dtype, temperature, vocab)
    for backend in BACKENDS
    for dtype in DTYPES
    for temperature in (0.6, 1.0)
    for vocab in (1000, 1031)
    if backend == "chunked" or vocab == 1031
]


@pytest.mark.parametrize("backend,dtype,temperature,vocab", LINEAR_CASES, ids=str)
def test_token_stats_linear_matches_float64(backend, dtype, temperature, vocab):
    """Forward values, then the gradients of hidden and W through logp only and through H only."""
    hidden, weight, targets = linear_inputs(vocab, dtype)
    on = device(backend)
    h, w = hidden.to(on).requires_grad_(), weight.to(on).requires_grad_()
    out = token_stats_linear(h, w, targets.to(on), temperature, backend=backend, **LINEAR_CHUNKS[backend])
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    expected = reference(h64 @ w64.T, targets, temperature)
    tol = LINEAR_TOL[dtype]
    assert_stats_close(out, tuple(e.detach() for e in expected), atol=tol, rtol=tol)

    coef = upstream_grad(T)
    for which in (0, 2):  # logp, H
        grads = torch.autograd.grad((coef.float().to(on) * out[which]).sum(), (h, w), retain_graph=True)
        refs = torch.autograd.grad((coef * expected[which]).sum(), (h64, w64), retain_graph=True)
        for grad, ref in zip(grads, refs, strict=True):
            assert grad.dtype == dtype
            assert_normwise_close(grad, ref, LINEAR_GRAD_TOL[dtype])


def test_token_stats_linear_frozen_head_and_default_chunks():
    """Only hidden needs a gradient (frozen LM head); default chunk sizes; Qwen's vocabulary."""
    hidden, weight, targets = linear_inputs(151936, torch.float32, d=16)
    hidden, targets = hidden[:4].clone().requires_grad_(), targets[:4]
    logp, var, entropy = token_stats_linear(hidden, weight, targets, 0.6)
    (logp.sum() + entropy.sum()).backward()

    h64 = hidden.detach().double().requires_grad_()
    expected = reference(h64 @ weight.double().T, targets, 0.6)
    (expected[0].sum() + expected[2].sum()).backward()
    assert weight.grad is None
    assert_stats_close((logp, var, entropy), tuple(e.detach() for e in expected), atol=2e-5, rtol=2e-5)
    assert_normwise_close(hidden.grad, h64.grad, 2e-5)


def test_token_stats_linear_holds_only_tiles():
    """No allocation during forward and backward is anywhere near the [T, V] fp32 logits."""
    g = torch.Generator().manual_seed(6)
    hidden = torch.randn(256, 16, generator=g).requires_grad_()
    weight = torch.randn(4096, 16, generator=g).mul_(0.5).requires_grad_()
    targets = torch.randint(0, 4096, (256,), generator=g)
    with torch.profiler.profile(profile_memory=True) as prof:
        logp, _, entropy = token_stats_linear(hidden, weight, targets, token_chunk=64, vocab_chunk=512)
        (logp.sum() + entropy.sum()).backward()
    largest = max(e.cpu_memory_usage for e in prof.events())
    full_logits = hidden.shape[0] * weight.shape[0] * 4
    assert 0 < largest <= full_logits / 8, f"largest allocation {largest} B vs [T, V] fp32 {full_logits} B"


# --- dispatch ---------------------------------------------------------------------------------


def test_backend_dispatch():
    cpu = torch.zeros(1)
    assert resolve_backend("auto", cpu) == "chunked"
    assert resolve_backend("triton", cpu) == "triton"
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("cuda", cpu)
    with pytest.raises(ValueError, match="targets"):
        token_stats(torch.zeros(3, 5), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        token_stats(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long), 0.0)
    with pytest.raises(ValueError, match="weight"):
        token_stats_linear(torch.zeros(3, 4), torch.zeros(5, 6), torch.zeros(3, dtype=torch.long))


# --- fp32 logits tiles: the statistics of a row do not depend on its micro-batch (issue 18) ------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_stats_linear_bf16_is_exact_to_fp32_whatever_the_micro_batches(backend):
    """bf16 weights and hidden states with logits of |z| ~ 25 (where one bf16 step is 0.125), the same rows
    in micro-batches cut two ways: log-probs, V and H agree to fp32 tolerance with each other and with
    float64 of the same bf16 values, so the on-policy ratio exp(logp_a - logp_b) is 1 within 1e-5.

    Before the fix (tiles rounded to bf16) the float64 comparison failed by ~1e-1 in log-probs. On CPU the
    two micro-batchings happened to round alike (the CPU GEMM sums each row in the same order whatever the
    row count); on a GPU they need not, which is how the ratio drifted there."""
    g = torch.Generator().manual_seed(11)
    rows, d, vocab, on = 40, 64, 1031, device(backend)
    weight = torch.randn(vocab, d, generator=g).div_(d ** 0.5).bfloat16()
    hidden = (8.0 * torch.randn(rows, d, generator=g)).bfloat16()  # |z| up to ~25
    targets = make_targets(rows, vocab)
    logits64 = hidden.double() @ weight.double().T
    assert logits64.abs().max() > 20

    def in_micro_batches(cuts):
        parts = [token_stats_linear(hidden[a:b].to(on), weight.to(on), targets[a:b].to(on), 1.0, backend=backend,
                                    **LINEAR_CHUNKS[backend]) for a, b in zip([0, *cuts], [*cuts, rows])]
        return [torch.cat(x).cpu() for x in zip(*parts)]

    one, other = in_micro_batches([7, 19]), in_micro_batches([16, 32])
    assert_stats_close(one, reference(logits64, targets, 1.0), atol=1e-5, rtol=1e-5)
    assert_stats_close(other, tuple(x.double() for x in one), atol=1e-5, rtol=1e-5)
    ratio = torch.exp(one[0].double() - other[0].double())
    assert (ratio - 1).abs().max() <= 1e-5


def test_triton_num_warps_rule():
    """Warps per program grow with BLOCK_V (the rule; its speed is measured on a GPU only)."""
    triton_stats = pytest.importorskip("reco_scaled.kernels.triton_stats")
    assert [triton_stats.num_warps(b) for b in (256, 1024, 2048, 4096, 8192, 32768)] == [4, 4, 8, 8, 16, 32]
    assert triton_stats.num_warps(triton_stats.DEFAULT_BLOCK) == 8
