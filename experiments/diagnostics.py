"""experiments/diagnostics.py: the studies' per-step diagnostics, behind experiments/lab.py's on_step hook.

`on_step(step)` is the hook the studies pass (`lab.train_rl(..., on_step=on_step)`): it reads the task's canonical keys
and token classes and returns the fields step_diagnostics computes, which train_rl merges into the step's log row.
reco_mini has no hook: `python reco_mini.py` computes none of this.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import lab  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks.countdown import TOKEN_CLASSES, duplicate_rate  # noqa: E402


def on_step(step: lab.Step, select: torch.Tensor | None = None) -> dict[str, float | None]:
    """The diagnostics of one RL step (lab.Step), every occurrence mode's weights included; `select`: the tokens
    [B, T] of a token term that acts on some tokens only (fork_arms.on_step passes its arm's)."""
    P, G = step.rewards.shape
    keys = step.task.canonical_keys(step.problems, G, step.texts)
    labels = step.task.token_labels(step.problems, G, step.texts, step.resp, step.mask, step.tokenizer)
    return step_diagnostics(step.old_logp, step.mask, step.responses, keys, labels, step.advantages.view(P, G),
                            step.weights, step.v_old, step.v_old_mean, step.loss_cfg, select)


def on_policy_rho(old_logp: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor, v_old: torch.Tensor,
                  v_old_mean: torch.Tensor, loss_cfg, select: torch.Tensor | None = None) -> torch.Tensor | None:
    """rho_t of the method's own token term (rm.TOKEN_RATIOS[loss_cfg.token_ratio]) at rollout time: pi_theta =
    pi_old, so r = 1, keep = 1 and V = V_old; 1 where the term reports none. None when the term's gradient there,
    dl_t/dlog pi(y_t), is not -rho_t A_i (autograd): its update is then not sized by |w rho A|. [B, T]"""
    logp = old_logp.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        terms = rm.TokenTerms(logp, torch.exp(logp - old_logp.detach()), advantages.reshape(-1, 1).to(logp.dtype),
                              torch.ones_like(logp), v_old, v_old, v_old_mean, batch={"select": select})
        loss, rho = rm.TOKEN_RATIOS[loss_cfg.token_ratio](terms, loss_cfg)
        grad = torch.autograd.grad((loss * mask).sum(), logp, allow_unused=True)[0]
    rho = torch.ones_like(v_old) if rho is None else rho.detach()
    grad = torch.zeros_like(logp) if grad is None else grad
    expected = -rho * advantages.reshape(-1, 1) * mask
    return rho if torch.allclose(grad, expected, rtol=1e-5, atol=1e-7) else None


@torch.no_grad()
def step_diagnostics(old_logp: torch.Tensor, mask: torch.Tensor, responses: list, keys: list,
                     labels: list[list[str]] | None, advantages: torch.Tensor, weights: torch.Tensor,
                     v_old: torch.Tensor, v_old_mean: torch.Tensor, loss_cfg,
                     select: torch.Tensor | None = None) -> dict[str, float | None]:
    """Cheap statistics of one rollout batch, whatever the method uses:

      w_dev_<mode>        max_i |w_i - 1| of every occurrence mode (apply = all; "-" written "_")
      dup_exact           share of responses repeating an earlier one of their group (token ids); dup_canonical: keys
      v_old_<class>       mean V_old over the response tokens of each TOKEN_CLASSES class
      share_<class>       the class's share of sum_t |w_i rho_t A_i| over response tokens
      tokens_other        share of response tokens that are other (a response outside the task's grammar, or no labels)

    The update share is computed from the on-policy quantities at rollout time (on_policy_rho: r = 1, keep = 1,
    rho_t of the method's own token term, 1 for "is"); w_i is the method's own response weight. A token term whose
    update is not -rho A on policy has no shares (None). old_logp, mask, v_old: [B, T]; advantages [P, G]; weights [B].
    """
    P, G = advantages.shape
    seq_logp, lengths = (old_logp * mask).sum(-1).view(P, G), mask.sum(-1).view(P, G)
    out: dict[str, float | None] = {}
    for mode in rm.OCCURRENCES:
        w = rm.occurrence_weights(seq_logp, mode, responses, lengths, advantages, "all", keys, norm="group")
        out[f"w_dev_{mode.replace('-', '_')}"] = (w.double() - 1).abs().max().item()
    out["dup_exact"] = duplicate_rate([[tuple(r) for r in responses[p * G: (p + 1) * G]] for p in range(P)])
    out["dup_canonical"] = duplicate_rate([keys[p * G: (p + 1) * G] for p in range(P)])
    cls = torch.full(mask.shape, TOKEN_CLASSES.index("other"), dtype=torch.long, device=mask.device)
    for i, row in enumerate(labels or []):
        cls[i, : len(row)] = torch.tensor([TOKEN_CLASSES.index(x) for x in row], dtype=torch.long, device=mask.device)
    rho = on_policy_rho(old_logp, mask, advantages, v_old, v_old_mean, loss_cfg, select)
    size = None if rho is None else (weights.view(-1, 1) * rho * advantages.reshape(-1, 1)).abs() * mask  # [B, T]
    total, live = (None if size is None else size.sum()), mask > 0
    for k, name in enumerate(TOKEN_CLASSES):
        sel = live & (cls == k)
        out[f"v_old_{name}"] = v_old[sel].mean().item() if sel.any() else None
        out[f"share_{name}"] = (size[sel].sum() / total).item() if total is not None and total > 0 else None
    out["tokens_other"] = ((live & (cls == TOKEN_CLASSES.index("other"))).sum() / live.sum().clamp(min=1)).item()
    return out
