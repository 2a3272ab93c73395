"""reco_mini.py: GRPO and ReCo (arXiv 2607.26862) end to end in one file.

The baseline is GRPO with verl's defaults: G samples per prompt, group-relative
advantages, a PPO-clipped token surrogate, several mini-batch updates per
rollout, `token-mean` loss aggregation and no KL. ReCo changes two terms:

  1. Response level: each response's loss is multiplied by w_i, the inverse of
     its expected number of copies in the group, m_i = 1 + (G-1) pi_old(y_i|x),
     normalised to mean 1 over the group (`occurrence_weights`).
  2. Token level: the importance ratio r_t = pi_theta/pi_old is replaced by the
     variance ratio rho_t = sg(min(V_theta(s_t) / mean V_old, c_max)), where
     V(s) = 1 - sum_v pi(v|s)^2, inside GRPO's trust region (`policy_loss`).

Deviations from the paper's text, each a flag here:
  1. `--occurrence {sequence,token-mean,count,none}` and `--occurrence-apply
     {all,positive}`: alternatives to the exact expected-occurrence weight.
  2. `--token-ratio variance-old`: the clipped surrogate scaled by
     sg(min(V_old/mean V_old, c_max)); equal to `variance` on policy.
  3. `--variance-cap 10` caps rho, and `--variance-norm none` drops the batch
     normalisation (both from DESIGN.md section 3.3).
  4. The default task is a small Countdown with a tiny transformer trained by
     SFT in this file, instead of math with a 1.5B-8B model (`--task math`
     runs a real Hugging Face model on a JSONL file of problems).

Run `python reco_mini.py` for base vs GRPO vs ReCo on CPU in a few minutes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

METHODS = {  # method -> (occurrence mode, token ratio)
    "grpo": ("none", "is"),
    "reco": ("sequence", "variance"),
    "reco-response": ("sequence", "is"),
    "reco-token": ("none", "variance"),
}


@dataclass
class Config:
    methods: str = "grpo,reco"  # comma-separated subset of METHODS
    seed: int = 0
    device: str = "auto"
    out: str = "runs/default"
    quick: bool = False  # tiny budget for smoke tests
    # task and model
    task: str = "countdown"  # countdown | math
    model: str = ""  # HF name or path (task=math); empty = tiny model built here
    data: str = ""  # JSONL with problem,answer (task=math)
    n_train: int = 1024  # countdown RL training problems
    n_test: int = 128  # held-out countdown problems
    sft_steps: int = 600
    sft_batch: int = 128
    sft_lr: float = 3e-3
    # RL
    steps: int = 60
    prompts_per_step: int = 32
    group_size: int = 8  # G
    epochs: int = 2  # passes over each rollout batch
    minibatches: int = 2  # updates per pass
    lr: float = 1e-3
    temperature: float = 1.0
    max_new_tokens: int = 12
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 0.0  # 0 = off; verl uses 3
    kl_coef: float = 0.0  # beta for the k3 KL to the base policy
    no_std: bool = False  # Dr.GRPO advantages (no division by std)
    aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean
    occurrence: str = ""  # override the method's: sequence|token-mean|count|none
    occurrence_apply: str = "all"  # all | positive
    token_ratio: str = ""  # override the method's: is|variance|variance-old
    variance_cap: float = 10.0
    variance_norm: str = "batch"  # batch | none
    grad_clip: float = 1.0
    # evaluation
    n_eval: int = 256  # samples per held-out problem
    eval_batch: int = 4096

    @property
    def method_list(self) -> list[str]:
        return [m for m in self.methods.split(",") if m]


# =============================================================================
# The math: every function below is pure and tested against an independent
# reference in tests/.
# =============================================================================

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@k from n samples with c correct (Chen et al. 2021).

    pass@k = 1 - C(n-c, k) / C(n, k) = 1 - prod_{i=n-c+1}^{n} (1 - k/i)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def group_advantages(rewards: Tensor, scale_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO advantage A_i = (R_i - mean_j R_j) / (std_j R_j + eps), unbiased std.

    rewards: [P, G] -> advantages [P, G]. Equal rewards give A = 0 exactly.
    """
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [P, G]
    if not scale_by_std:
        return centred  # Dr.GRPO
    return centred / (rewards.std(dim=1, keepdim=True, unbiased=True) + eps)


def occurrence_weights(
    seq_logprobs: Tensor,
    mode: str = "sequence",
    responses: list | None = None,
    lengths: Tensor | None = None,
    advantages: Tensor | None = None,
    apply: str = "all",
) -> Tensor:
    """ReCo response weights w_i (no gradient), mean 1 within each group.

    p_i = pi_old(y_i|x) = exp(sum_t log pi_old(y_it))       seq_logprobs: [P, G]
    m_i = 1 + (G - 1) p_i    expected copies of y_i in the group given y_i drawn
    w_i = G (1/m_i) / sum_j (1/m_j)

    mode "token-mean" uses p_i = exp(seq_logprob_i / len_i) (needs `lengths`
    [P, G] or `responses`); "count" uses 1/c_i with c_i the exact duplicates of
    response i in its group (`responses`: P*G token-id lists, row-major, or P
    lists of G); "none" gives ones. apply="positive" keeps weight 1 wherever
    advantages <= 0 (the others are still divided by the whole group's mean).
    """
    P, G = seq_logprobs.shape
    lp = seq_logprobs.detach().double()
    if mode == "none":
        return torch.ones_like(seq_logprobs)
    if mode in ("token-mean", "count") and responses is not None:
        flat = [tuple(r) for group in responses for r in group] if len(responses) == P != P * G else [tuple(r) for r in responses]
        if len(flat) != P * G:
            raise ValueError(f"responses has {len(flat)} entries, expected P*G = {P * G}")
    if mode == "sequence":
        inv_m = 1.0 / (1.0 + (G - 1) * lp.exp())
    elif mode == "token-mean":
        if lengths is None:
            lengths = torch.tensor([len(r) for r in flat], dtype=torch.float64).view(P, G)
        inv_m = 1.0 / (1.0 + (G - 1) * (lp / lengths.double().clamp(min=1)).exp())
    elif mode == "count":
        counts = [[sum(flat[p * G + i] == flat[p * G + j] for j in range(G)) for i in range(G)] for p in range(P)]
        inv_m = 1.0 / torch.tensor(counts, dtype=torch.float64)
    else:
        raise ValueError(f"unknown occurrence mode {mode!r}")
    w = inv_m / inv_m.mean(dim=1, keepdim=True)  # [P, G]
    if apply == "positive":
        w = torch.where(advantages > 0, w, torch.ones_like(w))
    elif apply != "all":
        raise ValueError(f"unknown occurrence apply {apply!r}")
    return w.to(seq_logprobs.dtype)


def variance_stat(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """V(s) = sum_v pi(v|s)(1 - pi(v|s)) = 1 - sum_v pi(v|s)^2, pi = softmax(z/tau).

    logits: [..., V] -> [...] in float32 (float64 stays float64).
    """
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    return 1.0 - F.softmax(z / temperature, dim=-1).square().sum(-1)


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log pi(y_t|s_t) of the temperature-scaled distribution. [B,T,V],[B,T] -> [B,T]"""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    token_ratio: str = "is",
    weights: Tensor | None = None,
    v: Tensor | None = None,
    v_old: Tensor | None = None,
    v_old_mean: float | Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 0.0,
    variance_cap: float = 10.0,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: str = "token-mean",
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO / ReCo surrogate, aggregated over the batch.

    Shapes: logp, old_logp, mask, v, v_old, ref_logp: [B, T]; advantages,
    weights: [B]. `v` is V_theta of the current policy (needed for "variance"),
    `v_old` is V_old (for "variance-old"), `v_old_mean` is mean V_old over all
    response tokens of the rollout batch (all ranks). `num_tokens`/`num_seqs`
    override the normaliser so micro-batches and ranks sum to the full batch.

      r_t      = exp(clamp(logp - old_logp, -20, 20))
      "is":           l_t = -min(r A, clip(r, 1-eps_low, 1+eps_high) A)
      "variance":     l_t = -rho_t A exp(logp - sg(logp)) keep_t,
                      rho_t = sg(min(V_theta / V_old_mean, c_max))
      "variance-old": l_t = sg(min(V_old / V_old_mean, c_max)) * l_t^is
      keep_t = 0 where the clipped surrogate has zero gradient:
               (r > 1+eps_high and A > 0) or (r < 1-eps_low and A < 0)
      l_t     *= w_i;   l_t += beta * k3,  k3 = exp(q) - q - 1, q = ref - logp
    """
    mask = mask.to(logp.dtype)
    A = advantages.detach().unsqueeze(-1).to(logp.dtype)  # [B, 1]
    ratio = torch.exp(torch.clamp(logp - old_logp, -20.0, 20.0))  # [B, T]
    clipped_high = (ratio > 1 + clip_high) & (A > 0)
    clipped_low = (ratio < 1 - clip_low) & (A < 0)
    stats: dict[str, float] = {}
    if token_ratio in ("is", "variance-old"):
        loss = -torch.min(ratio * A, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * A)
        if dual_clip > 0:  # cap the loss of negative advantages at -C A
            loss = torch.where(A < 0, torch.min(loss, -dual_clip * A), loss)
        if token_ratio == "variance-old":
            rho = torch.clamp(v_old / v_old_mean, max=variance_cap).detach()
            loss = rho * loss
    elif token_ratio == "variance":
        rho = torch.clamp(v / v_old_mean, max=variance_cap).detach()  # [B, T]
        keep = (~(clipped_high | clipped_low)).to(logp.dtype)
        loss = -rho * A * torch.exp(logp - logp.detach()) * keep
    else:
        raise ValueError(f"unknown token_ratio {token_ratio!r}")
    if weights is not None:
        loss = loss * weights.detach().unsqueeze(-1).to(logp.dtype)
    if kl_coef > 0:
        q = ref_logp.detach() - logp
        loss = loss + kl_coef * (torch.exp(q) - q - 1)
    if aggregation == "token-mean":
        loss_total = (loss * mask).sum() / (mask.sum() if num_tokens is None else num_tokens)
    elif aggregation == "seq-mean-token-mean":
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        loss_total = per_seq.sum() / (logp.shape[0] if num_seqs is None else num_seqs)
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats["ratio_mean"] = ((ratio * mask).sum() / n).item()
        stats["ratio_max"] = (ratio * mask).max().item()
        stats["clip_frac_high"] = ((clipped_high * mask).sum() / n).item()
        stats["clip_frac_low"] = ((clipped_low * mask).sum() / n).item()
        stats["approx_kl_old"] = (((old_logp - logp) * mask).sum() / n).item()
        if token_ratio != "is":
            stats["rho_mean"] = ((rho * mask).sum() / n).item()
            stats["rho_max"] = (rho * mask).max().item()
    return loss_total, stats


# -- math answer grading (task=math) --------------------------------------------

def grade_answer(response: str, gold: str) -> bool:
    """Placeholder, replaced by the grader section (issue 4)."""
    raise NotImplementedError

# -- end math answer grading ----------------------------------------------------
