"""Chunked PyTorch implementation of the per-token statistics: the CPU path and the fallback.

The logits are streamed in tiles of [rows, block]. Each tile is upcast to fp32 on its own, so no
fp32 copy of the whole [T, V] logits ever exists. The running state per token (one row of an
[n, 5] fp32 tensor, shared with the Triton kernels) is

    m   running max of the raw logits x
    s1  sum_v e_v           with e_v = exp((x_v - m) / tau)
    s2  sum_v e_v^2
    sz  sum_v (x_v - m) / tau * e_v
    xt  raw logit of the target token

Shifting by the max of the raw logits before scaling by 1/tau keeps x - m exact for large
logits of similar magnitude (Sterbenz), so huge logits (|x| ~ 1e4) lose no precision.
When m grows to m', with shift d = (m - m') / tau and alpha = e^d: s1 <- alpha s1,
s2 <- alpha^2 s2, sz <- alpha (sz + d s1).
"""
from __future__ import annotations

import torch
from torch import Tensor

NEG_INIT = -1e30  # finite start for the running max, so that (m - m') * s1 is 0 and never inf * 0
TILE_ELEMS = 1 << 23  # elements per fp32 tile (32 MiB): few large ops (cheap on a busy CPU), still tiny next to [T, V]
DEFAULT_BLOCK = 8192  # vocabulary columns per tile


def new_state(n: int, device: torch.device | str) -> Tensor:
    """Empty running state [n, 5] = (m, s1, s2, sz, xt)."""
    state = torch.zeros(n, 5, dtype=torch.float32, device=device)
    state[:, 0] = NEG_INIT
    return state


def finish(state: Tensor, inv_temp: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """State -> (logp, V, H, m, log_s1), all fp32 [n]; (m, log_s1) are what the backward needs.

    logp = (xt - m)/tau - log s1,  V = 1 - s2/s1^2,  H = log s1 - sz/s1.
    """
    m, s1, s2, sz, xt = state.unbind(1)
    log_s1 = s1.log()
    logp = (xt - m) * inv_temp - log_s1
    var = (1.0 - s2 / s1.square()).clamp_(min=0.0)  # both >= 0; rounding could dip below by ~1e-7
    entropy = (log_s1 - sz / s1).clamp_(min=0.0)
    return logp, var, entropy, m.clone(), log_s1


def _tiles(n: int, cols: int, block: int):
    """(row slice, column slice) pairs covering [n, cols] with tiles of at most TILE_ELEMS."""
    rows = max(1, TILE_ELEMS // block)
    for r0 in range(0, n, rows):
        for c0 in range(0, cols, block):
            yield slice(r0, r0 + rows), slice(c0, c0 + block)


def _target_mask(targets: Tensor, col0: int, width: int) -> tuple[Tensor, Tensor]:
    """Local column of each target in a tile starting at col0, and whether it lies in the tile."""
    local = targets - col0
    hit = (local >= 0) & (local < width)
    return local.clamp(0, width - 1).unsqueeze(1), hit


def update_stats(state: Tensor, logits: Tensor, col0: int, targets: Tensor, inv_temp: float, block: int = DEFAULT_BLOCK) -> None:
    """Fold logits [n, w] (vocabulary columns col0 .. col0 + w) into state [n, 5], in place."""
    n, width = logits.shape
    for rows, cols in _tiles(n, width, block):
        _update_tile(state[rows], logits[rows, cols], col0 + cols.start, targets[rows], inv_temp)


def _update_tile(state: Tensor, logits: Tensor, col0: int, targets: Tensor, inv_temp: float) -> None:
    m, s1, s2, sz, xt = state.unbind(1)  # views: the updates below write into state
    x = logits.float()
    m_new = torch.maximum(m, x.amax(1))
    local, hit = _target_mask(targets, col0, x.shape[1])
    xt += torch.where(hit, x.gather(1, local).squeeze(1), 0.0)

    z = (x - m_new.unsqueeze(1)).mul_(inv_temp)  # fp32 temporaries: z and e (and x for bf16/fp16)
    e = z.exp()
    shift = (m - m_new) * inv_temp
    alpha = shift.exp()
    sz.copy_(alpha * (sz + shift * s1) + torch.linalg.vecdot(z, e))
    s1.mul_(alpha).add_(e.sum(1))
    s2.mul_(alpha.square()).add_(torch.linalg.vecdot(e, e))
    m.copy_(m_new)


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
    """d(sum_t g_logp_t logp_t + g_entropy_t H_t) / d logits for logits [n, w], in the logits' dtype.

    With log p_v = (x_v - m)/tau - log s1:  d logp_y/dz_v = 1[v=y] - p_v  and  dH/dz_v = -p_v (log p_v + H),
    where z = x/tau, so d/dx = (1/tau) d/dz. g_entropy=None means H gets no gradient (skips work).
    """
    n, width = logits.shape
    tiles = list(_tiles(n, width, block))
    if len(tiles) == 1:  # the linear path's tiles: no extra copy
        return _grad_tile(logits, col0, targets, m, log_s1, entropy, g_logp, g_entropy, inv_temp).to(logits.dtype)
    out = torch.empty_like(logits)
    for rows, cols in tiles:
        g_ent = None if g_entropy is None else g_entropy[rows]
        r = (m[rows], log_s1[rows], entropy[rows], g_logp[rows], g_ent)
        out[rows, cols] = _grad_tile(logits[rows, cols], col0 + cols.start, targets[rows], *r, inv_temp)
    return out


def _grad_tile(
    logits: Tensor,
    col0: int,
    targets: Tensor,
    m: Tensor,
    log_s1: Tensor,
    entropy: Tensor,
    g_logp: Tensor,
    g_entropy: Tensor | None,
    inv_temp: float,
) -> Tensor:
    # grad_v = (1/tau) (g_logp 1[v=y] - p_v (g_logp + g_H (log p_v + H))), in as few passes as possible
    logp = (logits.float() - m.unsqueeze(1)).mul_(inv_temp).sub_(log_s1.unsqueeze(1))
    if g_entropy is None:
        grad = logp.exp_().mul_((-inv_temp * g_logp).unsqueeze(1))
    else:
        p = logp.exp()
        coef = logp.mul_((-inv_temp * g_entropy).unsqueeze(1))
        coef.sub_((inv_temp * (g_logp + g_entropy * entropy)).unsqueeze(1))
        grad = p.mul_(coef)
    local, hit = _target_mask(targets, col0, grad.shape[1])
    return grad.scatter_add_(1, local, torch.where(hit, inv_temp * g_logp, 0.0).unsqueeze(1))
