"""experiments/fork_detect.py: label-free fork detectors and their precision and recall (issue 34, item 2).

A detector scores each response token of one rollout batch (a lab.Step) from what the batch holds: sampled
tokens, rewards and advantages, old log-probs, V_old and entropy; never the task's labels. It flags the
highest-scoring tokens (`top_share`). Candidates (DETECTORS), fixed before any table was seen (docs/fork_study.md):

  entropy            H_old(s_t): the policy is undecided (Wang et al. 2025's selector)
  variance           V_old(s_t) = 1 - sum_v pi_old(v|s_t)^2: the statistic ReCo's ratio reads
  clip-cov           (log pi_old(y_t) - mean log pi_old)(A_i - mean A), means over the batch's response tokens: the
                     covariance term of Clip-Cov (Cui et al. 2025)
  group-contrast     per group and position t, the Jensen-Shannon divergence (bits) between the tokens that the group's
                     correct responses and its incorrect ones sample at t (0 where either set is empty): how differently
                     they choose at comparable positions (after ICT, arXiv 2606.19771, on sampled tokens)
  entropy-contrast   derived here: entropy x (group contrast + 1e-3): undecided AND associated with the reward

`detector_table` measures precision, recall and F1 of each against the labels at the matched count (as many tokens
flagged as there are fork tokens), and `choose_detector` applies the pre-stated rule.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import lab  # noqa: E402

from reco.tasks.countdown import TOKEN_CLASSES  # noqa: E402

QUALIFY_F1 = 0.5
SELECTION_RULE = (
    "For each candidate and each of the two rollout sets (the base's and the GRPO checkpoint's, validation split), flag "
    "as many response tokens as there are fork tokens among the tokens of in-grammar responses (ties at the threshold "
    "all flagged) and measure F1 against the labels; the candidate with the highest F1 averaged over the two sets is "
    f"chosen (a tie goes to the earlier candidate in the listed order); it qualifies if that mean F1 is >= {QUALIFY_F1}. "
    "The detected arm flags that share of each batch's response tokens, the mean over the two sets of the fork share. "
    "If the chosen candidate does not qualify, the detected arm is dropped and the table is the finding.")


def token_classes(step: lab.Step) -> Tensor:
    """[B, T] long: each response token's index in TOKEN_CLASSES; "other" past a response's labels or without any."""
    labels = step.task.token_labels(step.problems, step.group_size, step.texts, step.resp, step.mask, step.tokenizer)
    cls = torch.full(step.mask.shape, TOKEN_CLASSES.index("other"), dtype=torch.long, device=step.mask.device)
    for i, row in enumerate(labels or []):
        cls[i, : len(row)] = torch.tensor([TOKEN_CLASSES.index(x) for x in row], dtype=torch.long, device=step.mask.device)
    return cls


def fork_tokens(step: lab.Step) -> Tensor:
    """[B, T] float 0/1: the fork tokens by the task's labels (none in a response outside the grammar)."""
    return ((token_classes(step) == TOKEN_CLASSES.index("fork")) & (step.mask > 0)).to(step.mask.dtype)


def top_share(score: Tensor, mask: Tensor, share: float) -> Tensor:
    """[B, T] float 0/1: the ceil(share * N) highest-scoring of the N tokens where mask > 0; a tie at the threshold
    takes every tied token (s_t = 1 where score_t >= the threshold, Wang et al.'s quantile rule)."""
    live = mask > 0
    n = int(live.sum())
    k = min(n, math.ceil(share * n))
    if k == 0:
        return torch.zeros_like(mask)
    threshold = score[live].float().topk(k).values[-1]
    return (live & (score.float() >= threshold)).to(mask.dtype)


def _entropy(step: lab.Step) -> Tensor:
    return step.entropy


def _variance(step: lab.Step) -> Tensor:
    return step.v_old


def clip_cov(step: lab.Step) -> Tensor:
    live = step.mask > 0
    adv = step.advantages.view(-1, 1).expand_as(step.old_logp).to(step.old_logp.dtype)
    return (step.old_logp - step.old_logp[live].mean()) * (adv - adv[live].mean())


def js_bits(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence in bits between distributions along the last axis."""
    m = (p + q) / 2

    def kl(a: Tensor, b: Tensor) -> Tensor:
        return torch.where(a > 0, a * (a.clamp(min=1e-30) / b.clamp(min=1e-30)).log2(), torch.zeros_like(a)).sum(-1)
    return (kl(p, m) + kl(q, m)) / 2


def group_contrast(step: lab.Step) -> Tensor:
    """[B, T]: per group and position, JS(tokens of the correct responses at t, tokens of the incorrect ones at t)."""
    G = step.group_size
    B, T = step.resp.shape
    vocab = int(step.resp.max()) + 1
    onehot = torch.nn.functional.one_hot(step.resp.long(), vocab).to(torch.float64) * step.mask.view(B, T, 1).double()
    correct = (step.rewards.reshape(-1) > 0).to(torch.float64).to(step.resp.device).view(B, 1, 1)
    out = torch.zeros(B, T, dtype=torch.float64, device=step.resp.device)
    for p in range(B // G):
        rows = slice(p * G, (p + 1) * G)
        good, bad = (onehot[rows] * correct[rows]).sum(0), (onehot[rows] * (1 - correct[rows])).sum(0)  # [T, V]
        n_good, n_bad = good.sum(-1, keepdim=True), bad.sum(-1, keepdim=True)
        js = js_bits(good / n_good.clamp(min=1), bad / n_bad.clamp(min=1))
        out[rows] = torch.where((n_good[:, 0] > 0) & (n_bad[:, 0] > 0), js, torch.zeros_like(js)).view(1, T)
    return out.to(step.old_logp.dtype) * step.mask


def entropy_contrast(step: lab.Step) -> Tensor:
    return step.entropy * (group_contrast(step) + 1e-3)


DETECTORS: dict[str, Callable[[lab.Step], Tensor]] = {  # name -> [B, T] score, higher = more fork-like
    "entropy": _entropy, "variance": _variance, "clip-cov": clip_cov, "group-contrast": group_contrast,
    "entropy-contrast": entropy_contrast}


def precision_recall(flagged: Tensor, truth: Tensor) -> dict:
    """Precision, recall and F1 of 0/1 `flagged` for 0/1 `truth` (None where a denominator is 0)."""
    tp, n_flag, n_true = float((flagged * truth).sum()), float(flagged.sum()), float(truth.sum())
    precision = tp / n_flag if n_flag else None
    recall = tp / n_true if n_true else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else (0.0 if n_flag and n_true else None)
    return {"precision": precision, "recall": recall, "f1": f1, "flagged": int(n_flag), "forks": int(n_true), "hits": int(tp)}


def detector_table(steps: dict[str, lab.Step]) -> dict:
    """Per rollout set (name -> Step) and detector: precision, recall and F1 at the matched count, over the tokens of
    in-grammar responses; and each set's fork share of those tokens."""
    sets = {}
    for name, step in steps.items():
        cls = token_classes(step)
        in_grammar = ((cls != TOKEN_CLASSES.index("other")).any(-1, keepdim=True) & (step.mask > 0)).to(step.mask.dtype)
        forks = fork_tokens(step) * in_grammar
        share = float(forks.sum() / in_grammar.sum()) if in_grammar.sum() > 0 else 0.0
        rows = {d: precision_recall(top_share(fn(step), in_grammar, share), forks) for d, fn in DETECTORS.items()}
        sets[name] = {"fork_share": share, "tokens": int(in_grammar.sum()), "responses": int(in_grammar.any(-1).sum()),
                      "responses_all": len(step.texts), "detectors": rows}
    return sets


def choose_detector(table: dict) -> dict:
    """SELECTION_RULE applied to a detector_table."""
    mean_f1 = {d: sum((s["detectors"][d]["f1"] or 0.0) for s in table.values()) / len(table) for d in DETECTORS}
    best = max(DETECTORS, key=lambda d: (mean_f1[d], -list(DETECTORS).index(d)))
    share = sum(s["fork_share"] for s in table.values()) / len(table)
    return {"rule": SELECTION_RULE, "mean_f1": mean_f1, "chosen": best, "f1": mean_f1[best],
            "qualifies": mean_f1[best] >= QUALIFY_F1, "share": share}
