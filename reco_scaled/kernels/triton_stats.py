"""Triton kernels for the per-token statistics: the CUDA path (and CPU under TRITON_INTERPRET=1).

Same contract and running state as `chunked.py` (see its docstring for the math). One program
handles one row and streams its vocabulary in BLOCK_V columns with an online softmax, so the
logits are read once in the forward pass and once in the backward pass.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

DEFAULT_BLOCK = 4096  # BLOCK_V: vocabulary columns per step, a power of two


def num_warps(block: int) -> int:
    """Warps per program for BLOCK_V columns: 4 up to 1024, 8 from 2048 (the default 4096), 16 from 8192,
    32 from 32768; the rule of Liger-Kernel's calculate_settings. With Triton's default of 4 warps a
    4096-column block leaves each of the 128 threads 32 columns of each of the six per-lane fp32 arrays
    (x, z, e, s1, s2, sz), which spills registers. The speed-up can only be seen on a GPU (the interpreter
    ignores num_warps); benchmarks/gpu_acceptance.py times the kernels there."""
    return 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4


@triton.jit
def _update_stats_kernel(
    logits_ptr, logits_stride, targets_ptr, state_ptr, n_cols, col0, inv_temp, BLOCK_V: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride passes 2^31 at T = 16k, V = 152k
    row_ptr = logits_ptr + row * logits_stride
    st = state_ptr + row * 5
    m = tl.load(st)
    # The sums are kept per lane and reduced once at the end (the max is row-wide, so rescaling
    # stays a scalar); the stored state enters through lane 0.
    lane0 = tl.arange(0, BLOCK_V) == 0
    s1 = tl.where(lane0, tl.load(st + 1), 0.0)
    s2 = tl.where(lane0, tl.load(st + 2), 0.0)
    sz = tl.where(lane0, tl.load(st + 3), 0.0)
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < n_cols  # the last block is partial when n_cols % BLOCK_V != 0
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        # masked columns become a finite -1e30 (in fp32: fp16 would make it -inf): they never win
        # the max and give e = 0 and z * e = 0, where -inf would give inf * 0 = nan
        x = tl.where(mask, x, -1e30)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = (m - m_new) * inv_temp
        alpha = tl.exp(shift)
        z = (x - m_new) * inv_temp
        e = tl.exp(z)
        sz = alpha * (sz + shift * s1) + z * e
        s1 = alpha * s1 + e
        s2 = alpha * alpha * s2 + e * e
        m = m_new
    target = tl.load(targets_ptr + row) - col0
    hit = (target >= 0) & (target < n_cols)
    xt = tl.load(st + 4) + tl.load(row_ptr + target, mask=hit, other=0.0).to(tl.float32)
    tl.store(st, m)
    tl.store(st + 1, tl.sum(s1, axis=0))
    tl.store(st + 2, tl.sum(s2, axis=0))
    tl.store(st + 3, tl.sum(sz, axis=0))
    tl.store(st + 4, xt)


@triton.jit
def _grad_logits_kernel(
    logits_ptr,
    logits_stride,
    grad_ptr,
    grad_stride,
    targets_ptr,
    m_ptr,
    log_s1_ptr,
    entropy_ptr,
    g_logp_ptr,
    g_entropy_ptr,
    n_cols,
    col0,
    inv_temp,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * logits_stride
    grad_row = grad_ptr + row * grad_stride
    m = tl.load(m_ptr + row)
    log_s1 = tl.load(log_s1_ptr + row)
    entropy = tl.load(entropy_ptr + row)
    g_logp = tl.load(g_logp_ptr + row)
    g_entropy = tl.load(g_entropy_ptr + row)
    target = tl.load(targets_ptr + row) - col0
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = cols < n_cols
        x = tl.load(row_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        logp = (x - m) * inv_temp - log_s1
        p = tl.exp(logp)
        grad = -p * (g_logp + g_entropy * (logp + entropy))
        grad = tl.where(cols == target, grad + g_logp, grad) * inv_temp
        tl.store(grad_row + cols, grad.to(grad_ptr.dtype.element_ty), mask=mask)


def _check_block(block: int) -> None:
    if block < 16 or block & (block - 1):
        raise ValueError(f"Triton block must be a power of two >= 16, got {block}")


def update_stats(state: Tensor, logits: Tensor, col0: int, targets: Tensor, inv_temp: float, block: int = DEFAULT_BLOCK) -> None:
    """Fold logits [n, w] (vocabulary columns col0 .. col0 + w) into state [n, 5], in place."""
    _check_block(block)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    n, width = logits.shape
    assert state.is_contiguous()
    _update_stats_kernel[(n,)](logits, logits.stride(0), targets.contiguous(), state, width, col0, inv_temp, BLOCK_V=block,
                               num_warps=num_warps(block))


def grad_logits(
    logits: Tensor,
    col0: int,
    targets: Tensor,
    m: Tensor,
    log_s1: Tensor,
    entropy: Tensor,
    g_logp: Tensor,
    g_entropy: Tensor | None,
    inv_temp: float,
    block: int = DEFAULT_BLOCK,
) -> Tensor:
    """Gradient w.r.t. logits [n, w] in the logits' dtype; see `chunked.grad_logits`."""
    _check_block(block)
    if g_entropy is None:
        g_entropy = torch.zeros_like(g_logp)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    n, width = logits.shape
    grad = logits.new_empty(n, width)
    _grad_logits_kernel[(n,)](
        logits, logits.stride(0), grad, grad.stride(0), targets.contiguous(),
        m.contiguous(), log_s1.contiguous(), entropy.contiguous(), g_logp.contiguous(), g_entropy.contiguous(),
        width, col0, inv_temp, BLOCK_V=block, num_warps=num_warps(block),
    )  # fmt: skip
    return grad
