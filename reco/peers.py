"""reco/peers.py: the published peers' methods that the studies put beside GRPO and ReCo (issue 42): Pass@k
training's advantage, zero-success gating, UCPO's response weights and SimKO's token ratio.

Each peer is one function of the kind its registry takes (an advantage, a prompt gate, a response weight, a token
term), and PeerSettings their settings (PEER_NUMBERS and PEER_CHOICES their allowed values): experiments/lab.py, the
research trainer, files them in its registries and adds the settings to reco_mini's Config; reco_mini itself runs
none of them. Like all of reco/, this module imports nothing of reco_mini: run as a script, reco_mini.py is __main__,
and an `import reco_mini` here would load a second copy with its own registries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from reco.cli import POSITIVE, Allowed, opt


@dataclass
class PeerSettings:
    """The peers' settings: flags of experiments/lab.py (its LossConfig and Config add them to reco_mini's), which checks
    them (PEER_NUMBERS, PEER_CHOICES and its registries) and lists them in --help's "peers" group."""
    advantage: str = opt("grpo", "group advantage (pass-at-k: Pass@k training's)")
    pass_k: int = opt(4, "k of --advantage pass-at-k, at most the group size")
    prompt_gate: str = opt("none", "the prompts updated (zero-success: those never solved)")
    response_weight: str = opt("none", "a peer's response weight, times ReCo's")
    ucpo_tau: float = opt(0.2, "UCPO's tau: the uniform share of the correct responses' weight")
    ucpo_score: str = opt("mean", "UCPO's q from mean (authors' code) or sum (paper) log pi_old")
    simko_k: int = opt(3, "SimKO's K: the likeliest tokens a correct response's update spreads to")
    simko_alpha: float = opt(0.01, "SimKO's alpha: the share of the update spread over the top K")
    simko_lambda: float = opt(1.1, "SimKO's lambda: the penalty on an incorrect top-1 token")
    simko_quantile: float = opt(0.8, "SimKO acts above this quantile of a response's entropies")
    simko_scale: str = opt("advantage", "lambda scales advantage (authors' code) or ratio (Eq. 5)")


# The allowed values of the peers' numeric settings (a new one fails tests/test_validation.py until it gets its rule),
# and the settings with a fixed set of values that no registry holds.
PEER_NUMBERS = {
    "pass_k": Allowed(1),
    "ucpo_tau": Allowed(0, 1),
    "simko_k": Allowed(1),
    "simko_alpha": Allowed(0, 1),
    "simko_lambda": POSITIVE,
    "simko_quantile": Allowed(0, 1),
}
PEER_CHOICES = {"ucpo_score": ("mean", "sum"), "simko_scale": ("advantage", "ratio")}


# ==== Peer methods (issue 42): each one function, filed by experiments/lab.py in the registry of its kind; the positive control's
# arms (experiments/control_study.py). Binary rewards: a response is correct where R > 0.

def pass_at_k_advantages(rewards: Tensor, k: int) -> Tensor:
    """Pass@k training's analytic advantage (Chen et al. 2025, arXiv 2508.10751, Sec. 2.4, Eqs. 11-15): the group of N
    responses as its C(N, k) subsets of k, each rewarded max_i R_i (its pass@k), normalised by their mean and population
    std; a response's advantage is the mean over the subsets that hold it. With N_neg incorrect responses:

      R_bar = 1 - C(N_neg, k) / C(N, k)                                        (Eq. 11)
      sigma = sqrt(R_bar (1 - R_bar))                                           (Eq. 12)
      A_pos = (1 - R_bar) / sigma                                               (Eq. 14)
      A_neg = (1 - R_bar - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma       (Eq. 15)

    sigma = 0 (every subset passes, or none does) gives A = 0, as the authors' code does. [P, N] -> [P, N]"""
    P, N = rewards.shape
    if not 1 <= k <= N:
        raise ValueError(f"pass@k training needs 1 <= k <= group size, got k={k}, N={N}")
    correct = rewards > 0
    n_neg = (~correct).sum(dim=1).tolist()
    r_bar = torch.tensor([1 - math.comb(m, k) / math.comb(N, k) for m in n_neg], dtype=torch.float64)
    hit = torch.tensor([math.comb(m - 1, k - 1) / math.comb(N - 1, k - 1) if m >= 1 else 0.0 for m in n_neg],
                       dtype=torch.float64)
    sigma = (r_bar * (1 - r_bar)).sqrt()
    safe = torch.where(sigma > 0, sigma, torch.ones_like(sigma))
    a_pos, a_neg = (1 - r_bar) / safe, (1 - r_bar - hit) / safe
    adv = torch.where(correct.cpu(), a_pos[:, None], a_neg[:, None]) * (sigma > 0)[:, None]
    return adv.to(device=rewards.device, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32)


def problem_key(problem) -> object:
    """A hashable name of a problem: its "id" field for a dict (math rows), else the problem itself."""
    return problem.get("id", repr(sorted(problem.items()))) if isinstance(problem, dict) else problem


def zero_success_gate(problems: list, rewards: Tensor, solved: set) -> Tensor:
    """Zero-success gating, in the spirit of Yuan et al. 2026 (arXiv 2606.15455, Sec. 5: restrict the updates to
    problems with no observed success): 1 for a problem whose group had no success in any earlier step, 0 for one
    that had; then files this step's solved problems in `solved` (the run's memory). [P] float on rewards' device."""
    keys = [problem_key(p) for p in problems]
    gate = torch.tensor([float(key not in solved) for key in keys], device=rewards.device)
    solved.update(key for key, row in zip(keys, (rewards > 0).any(dim=1).tolist()) if row)
    return gate


def ucpo_weights(rewards: Tensor, seq_logprobs: Tensor, lengths: Tensor, tau: float, length_norm: bool = True) -> Tensor:
    """UCPO's conditional uniformity weights (Lochab, Li, Zhang 2026, arXiv 2605.00365; the authors' estimator `iq`,
    compute_dgrpo_advantage_outcome_invq_l): the gradient of E[log Z - tau KL(u || q)], q = pi / Z on the correct set,
    is sum_{y correct} [(1 - tau) q(y) + tau / |Y+|] grad log pi(y); estimated on a group's n_c >= 2 correct samples,
    each correct response's advantage is multiplied by

      w_i = n_c [(1 - tau) / n_c + tau (1 / q_i) / sum_j (1 / q_j)],   q = softmax over the correct set of l_i,

    l_i = log pi_old(y_i) / |y_i| (length_norm, the authors' code) or the summed log-prob (the paper's q). The weights
    have mean 1 over the correct set, so its total advantage is kept; incorrect responses, and groups with fewer than
    two correct ones, keep weight 1. seq_logprobs, lengths, rewards [P, G] -> w [P, G]"""
    correct = rewards.to(seq_logprobs.device) > 0
    score = seq_logprobs.double() / (lengths.double().clamp(min=1) if length_norm else 1.0)
    inverse_q = torch.where(correct, torch.softmax(torch.where(correct, -score, -math.inf), dim=1), 0.0)  # (1/q) / sum
    n_c = correct.sum(dim=1, keepdim=True).double()
    w = (1 - tau) + tau * n_c * inverse_q.nan_to_num(0.0)
    return torch.where(correct & (n_c >= 2), w, torch.ones_like(w)).to(seq_logprobs.dtype)


def ucpo_response_weights(rewards: Tensor, seq_logprobs: Tensor, lengths: Tensor, cfg) -> Tensor:
    """lab.RESPONSE_WEIGHTS["ucpo"]: ucpo_weights with the LossConfig's tau and score (--ucpo-tau, --ucpo-score)."""
    return ucpo_weights(rewards, seq_logprobs, lengths, cfg.ucpo_tau, cfg.ucpo_score == "mean")


def simko_ratio(t, cfg) -> tuple[Tensor, None]:
    """SimKO (Peng et al. 2025, arXiv 2510.14807; v3 Sec. 4, Eqs. 3-5 and the authors' compute_policy_loss_simko): GRPO's
    clipped token loss l_t = -min(g A, clip(g, 1 - eps_low, 1 + eps_high) A) with the ratio g changed at the tokens whose
    entropy H_theta(s_t) is above the simko_quantile of their response's token entropies:

      correct response (A > 0):  g = (1 - alpha) r + (alpha / K) sum_{v in top-K} sg(r) exp(log pi(v) - sg(log pi(v)))
                                 (Eq. 4: value r; the gradient spreads alpha of the update over the policy's K likeliest
                                 tokens, top-N label smoothing of the target)
      incorrect (A < 0), y_t the policy's top-1 token:  A *= lambda (the authors' code; Eq. 5 scales g instead:
                                 --simko-scale ratio)

    t: reco_mini.TokenTerms with the policy's logits, y and mask; cfg: lab.LossConfig (simko_* fields)."""
    if t.logits is None:
        raise ValueError("token ratio 'simko' needs the policy's logits (experiments/lab.py's default path, --head-chunk "
                         "0); this trainer does not provide them")
    z = t.logits.double() if t.logits.dtype == torch.float64 else t.logits.float()
    logp_all = torch.log_softmax(z / t.temperature, dim=-1)  # [B, T, V], with gradient
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # H_theta(s_t)
        live = t.mask > 0
        cut = torch.stack([row[m].quantile(cfg.simko_quantile) if m.any() else row.new_tensor(math.inf)
                           for row, m in zip(entropy, live)])  # per response: its tokens' entropy quantile
        hot = (entropy > cut[:, None]) & live
        top = logp_all.topk(cfg.simko_k, dim=-1).indices  # [B, T, K]
        top1 = t.y == top[..., 0]
    top_logp = logp_all.gather(-1, top)  # [B, T, K], with gradient
    spread = (t.r.detach().unsqueeze(-1) * torch.exp(top_logp - top_logp.detach())).mean(-1)  # value r, grad sg(r) log pi
    positive, negative = hot & (t.A > 0), hot & (t.A < 0) & top1
    g = torch.where(positive, (1 - cfg.simko_alpha) * t.r + cfg.simko_alpha * spread, t.r)
    A = t.A.expand_as(g)
    if cfg.simko_scale == "ratio":
        g = torch.where(negative, cfg.simko_lambda * g, g)
    else:
        A = torch.where(negative, cfg.simko_lambda * A, A)
    return -torch.min(g * A, torch.clamp(g, 1 - cfg.clip_low, 1 + cfg.clip_high) * A), None
