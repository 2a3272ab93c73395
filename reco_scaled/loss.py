"""Batching, per-token statistics and loss aggregation around reco_mini's math.

`collate` pads a Rollout into tensors and `take` cuts a micro-batch out of them.

`token_stats` dispatches between the naive path (full logits, then reco_mini.token_logprobs,
reco_mini.variance_stat and reco_mini.token_entropy) and the fused kernel (reco_scaled.kernels.token_stats_linear, which never
holds [T, V] logits). `micro_loss` calls reco_mini.policy_loss with the mini-batch normaliser that
the trainer fixed, and all-reduced, before its micro-batch loop. `StatSums` turns per-micro-batch
statistics into exact global means and maxima.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from reco_mini import policy_loss, token_entropy, token_logprobs, variance_stat
from reco_scaled import distributed
from reco_scaled.config import RunConfig
from reco_scaled.rollout.base import Rollout


def token_stats(hidden: Tensor, head_weight: Tensor, targets: Tensor, mask: Tensor, temperature: float,
                fused: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(log pi(y_t), V_t, H_t), each fp32 [B, T], from the hidden states that predict `targets`.

    hidden: [B, T, d]; head_weight: the LM head [V, d]; targets, mask: [B, T]. Gradients flow
    through log pi only; V and H are detached. Masked positions hold 0 on the fused path.
    """
    if not fused:
        logits = F.linear(hidden, head_weight)  # [B, T, V]
        return (token_logprobs(logits, targets, temperature), variance_stat(logits.detach(), temperature),
                token_entropy(logits, temperature))
    from reco_scaled.kernels import token_stats_linear  # lazy: only with train.fused_kernel

    sel, device = mask.bool(), hidden.device.type
    # the LM head in the autocast dtype (bf16 on GPU), as the naive path's F.linear runs; stats are fp32
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
    h = hidden[sel].to(dtype)  # [N, d]: only real response tokens
    with torch.autocast(device, enabled=False):
        logp, v, ent = token_stats_linear(h, head_weight.to(dtype), targets[sel], temperature)
    out = [torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device) for _ in range(3)]
    out[0] = out[0].masked_scatter(sel, logp)
    out[1][sel], out[2][sel] = v, ent.detach()
    return out[0], out[1], out[2]


def micro_loss(cfg: RunConfig, logp: Tensor, v: Tensor, batch: dict[str, Tensor], num_tokens: Tensor,
               num_seqs: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """reco_mini.policy_loss on one micro-batch, normalised by the whole (global) mini-batch."""
    return policy_loss(logp, batch, cfg.loss, v, num_tokens=num_tokens, num_seqs=num_seqs)


class StatSums:
    """Accumulates per-micro-batch statistics as token-weighted sums; `reduce` gives global values.

    reco_mini.policy_loss reports means over the micro-batch's tokens and maxima, as 0-d tensors;
    weighting each mean by the micro-batch's token count makes the reduced value the mean over all
    tokens of all ranks, whatever the micro-batching. Keys ending in "_max" are reduced by max. The
    sums stay tensors on the device: nothing is read back to the host until `reduce`.
    """

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.maxes: dict[str, Tensor] = {}
        self.tokens: Tensor | None = None

    def add(self, stats: dict[str, Tensor], tokens: Tensor) -> None:
        tokens = tokens.detach().double()
        self.tokens = tokens if self.tokens is None else self.tokens + tokens
        for k, v in stats.items():
            v = torch.as_tensor(v, device=tokens.device).detach().double()
            if k.endswith("_max"):
                self.maxes[k] = v if k not in self.maxes else torch.maximum(self.maxes[k], v)
            else:
                self.sums[k] = v * tokens if k not in self.sums else self.sums[k] + v * tokens

    def reduce(self, device: torch.device) -> dict[str, float]:
        keys, mkeys = sorted(self.sums), sorted(self.maxes)
        zero = torch.zeros((), dtype=torch.float64, device=device)
        sums = distributed.all_sum(torch.stack([zero if self.tokens is None else self.tokens.to(device),
                                                *(self.sums[k].to(device) for k in keys)]))
        maxes = distributed.all_max(torch.stack([self.maxes[k].to(device) for k in mkeys]) if mkeys else zero[None][:0])
        sums, maxes = sums.tolist(), maxes.tolist()  # the one read-back
        n = max(sums[0], 1.0)
        return {**{k: s / n for k, s in zip(keys, sums[1:])}, **dict(zip(mkeys, maxes))}


def collate(ro: Rollout, pad_id: int, device: torch.device) -> tuple[dict[str, Tensor], Tensor]:
    """Rollout lists -> left-padded prompts [B, L], right-padded responses [B, T] and masks; and the
    sampler's log-probs [B, T] (a diagnostic)."""
    B, L, T = len(ro.prompt_ids), max(map(len, ro.prompt_ids)), max(map(len, ro.response_ids))
    cpu = torch.device("cpu")  # filled row by row on the host, then moved to `device` in one copy each
    prompt_ids, prompt_mask = torch.full((B, L), pad_id, device=cpu), torch.zeros(B, L, dtype=torch.long, device=cpu)
    resp, mask = torch.full((B, T), pad_id, device=cpu), torch.zeros(B, T, device=cpu)
    sampler_logp = torch.zeros(B, T, device=cpu)
    for b, (p, r, lp) in enumerate(zip(ro.prompt_ids, ro.response_ids, ro.sampler_logprobs)):
        prompt_ids[b, L - len(p):], prompt_mask[b, L - len(p):] = torch.tensor(p, device=cpu), 1
        resp[b, :len(r)], mask[b, :len(r)] = torch.tensor(r, device=cpu), 1
        sampler_logp[b, :len(r)] = torch.tensor(lp, device=cpu)
    batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "resp": resp, "mask": mask}
    return {k: v.to(device) for k, v in batch.items()}, sampler_logp.to(device)


def take(batch: dict[str, Tensor], rows: Tensor) -> tuple[dict[str, Tensor], int]:
    """Rows of the batch, with padding columns that every row has cut off; also the kept length T."""
    mb = {k: v[rows] if v.ndim else v for k, v in batch.items()}
    L = mb["prompt_mask"].shape[1]
    start = int((mb["prompt_mask"].sum(0) > 0).nonzero()[0]) if L else 0
    T = int(mb["mask"].sum(-1).max())
    for k, v in mb.items():
        if k in ("prompt_ids", "prompt_mask"):
            mb[k] = v[:, start:]
        elif v.ndim == 2:
            mb[k] = v[:, :T]
    return mb, T
