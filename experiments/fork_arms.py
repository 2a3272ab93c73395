"""experiments/fork_arms.py: the fork study's arms (issue 34; pre-registration in docs/fork_study.md).

Each arm is a registered function and a flag value of reco_mini, never a copy of the loss. Importing this module
registers, before any parse_config:

  token ratio "variance-fork-oracle"    l_t = s_t l_t^variance + (1 - s_t) l_t^is, s_t = 1 on fork tokens (the task's
                                        labels; a response outside the grammar has none, so GRPO's ratio throughout)
  token ratio "variance-fork-detected"  the same with s_t = the tokens a label-free detector flags (fork_detect.py),
                                        set by `use_detector` before training
  token ratio "entropy-top20"           l_t = s_t l_t^is, s_t = 1 on the 20% highest-entropy response tokens of the
                                        rollout batch (Wang et al. 2025, arXiv 2506.01939): GRPO's clipped loss there,
                                        no gradient elsewhere; the normaliser stays every response token
  methods reco-token-fork-oracle, reco-token-fork-detected, entropy-top20, reco-response-canonical (the canonical
  occurrence weights with GRPO's ratio: ReCo's response term alone)

An arm's tokens s_t reach its loss from outside reco_mini: `on_step`, the study's hook, computes them once a step
(SELECTS) and returns them under "batch", which lab.train_rl adds to the update's batch; policy_loss hands the
batch to the token term as TokenTerms.batch, where the arm reads "select". `ROLLOUT_SCALES` gives each token ratio's
on-policy scale at rollout time (r = 1, keep = 1), from which `on_step` logs, next to the studies' own diagnostics
(diagnostics.on_step), every arm's own update share by token class and the selected tokens' precision and recall for
the fork labels.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import Tensor

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import diagnostics  # noqa: E402
import fork_detect  # noqa: E402
import lab  # noqa: E402
from fork_detect import fork_tokens, token_classes, top_share  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks.countdown import TOKEN_CLASSES  # noqa: E402

ENTROPY_TOP_SHARE = 0.2
DETECTOR: dict = {}  # the detected arm's detector: {"name": a fork_detect.DETECTORS key, "share": tokens flagged}


def entropy_top(step: lab.Step) -> Tensor:
    return top_share(step.entropy, step.mask, ENTROPY_TOP_SHARE)


def use_detector(name: str, share: float) -> None:
    if name not in fork_detect.DETECTORS:
        raise ValueError(f"unknown fork detector {name!r}; known: {', '.join(fork_detect.DETECTORS)}")
    DETECTOR.update(name=name, share=share)


def detected_forks(step: lab.Step) -> Tensor:
    if not DETECTOR:
        raise RuntimeError("variance-fork-detected: no detector chosen (fork_arms.use_detector, from the study's detect phase)")
    return top_share(fork_detect.DETECTORS[DETECTOR["name"]](step), step.mask, DETECTOR["share"])


SELECTS = {  # token ratio -> its tokens s_t, a [B, T] 0/1 mask from the step
    "variance-fork-oracle": fork_tokens, "variance-fork-detected": detected_forks, "entropy-top20": entropy_top}


def _selected(t: rm.TokenTerms, cfg: rm.LossConfig) -> Tensor:
    if t.batch.get("select") is None:
        raise ValueError(f"token ratio {cfg.token_ratio!r} needs the batch's 'select' mask (fork_arms.on_step returns "
                         "it under 'batch' and lab.train_rl adds it to the batch); this trainer does not provide it")
    return t.batch["select"]


@rm.register(rm.TOKEN_RATIOS, "variance-fork-oracle")
@rm.register(rm.TOKEN_RATIOS, "variance-fork-detected")
def variance_on_selected(t: rm.TokenTerms, cfg: rm.LossConfig) -> tuple[Tensor, Tensor]:
    """l_t = s_t l_t^variance + (1 - s_t) l_t^is: ReCo's variance ratio rho_t = sg(min(V_theta / V_old_mean, c_max)) on
    the selected tokens, GRPO's clipped ratio on the others. rho reported: rho_t where s_t = 1, else 1."""
    s = _selected(t, cfg)
    var_loss, rho = rm.variance_ratio(t, cfg)
    is_loss, _ = rm.importance_ratio(t, cfg)
    s = s.to(var_loss.dtype)
    return s * var_loss + (1 - s) * is_loss, torch.where(s > 0, rho, torch.ones_like(rho))


@rm.register(rm.TOKEN_RATIOS, "entropy-top20")
def importance_on_selected(t: rm.TokenTerms, cfg: rm.LossConfig) -> tuple[Tensor, None]:
    """l_t = s_t l_t^is: GRPO's clipped loss on the selected tokens only (the others give no gradient)."""
    return _selected(t, cfg).to(t.logp.dtype) * rm.importance_ratio(t, cfg)[0], None


rm.METHODS |= {
    "reco-token-fork-oracle": ("none", "variance-fork-oracle", 0.0),
    "reco-token-fork-detected": ("none", "variance-fork-detected", 0.0),
    "entropy-top20": ("none", "entropy-top20", 0.0),
    "reco-response-canonical": ("canonical", "is", 0.0),
}


def _variance_scale(step: lab.Step) -> Tensor:
    return torch.clamp(step.v_old / step.v_old_mean, max=step.loss_cfg.variance_cap)


ROLLOUT_SCALES = {  # token ratio -> its per-token scale of |w A| on policy (r = 1, keep = 1), [B, T]
    "is": lambda step: torch.ones_like(step.v_old),
    "variance": _variance_scale,
    "variance-old": _variance_scale,
    "variance-fork-oracle": lambda step: torch.where(fork_tokens(step) > 0, _variance_scale(step), 1.0),
    "variance-fork-detected": lambda step: torch.where(detected_forks(step) > 0, _variance_scale(step), 1.0),
    "entropy-top20": entropy_top,
}


def class_shares(size: Tensor, cls: Tensor, mask: Tensor) -> dict[str, float | None]:
    """Each TOKEN_CLASSES class's share of sum_t size_t over the response tokens (None when the sum is 0)."""
    live = mask > 0
    total = size[live].sum()
    return {c: (size[live & (cls == k)].sum() / total).item() if total > 0 else None for k, c in enumerate(TOKEN_CLASSES)}


def on_step(step: lab.Step) -> dict:
    """lab.train_rl's per-step hook for every arm of the study: the arm's tokens under "batch" (its "select"
    mask, for the arm's token term; arms that select none add nothing), and the fields to log:

      arm_share_<class>   the class's share of sum_t |w_i scale_t A_i|, scale = ROLLOUT_SCALES[the arm's token ratio]
      select_share        the share of response tokens the arm's SELECTS entry picks (None for other ratios)
      select_precision    fork tokens among them; select_recall: the fork tokens picked (None without selection)
    """
    ratio = step.loss_cfg.token_ratio
    select = SELECTS[ratio](step) if ratio in SELECTS else None
    out = diagnostics.on_step(step, select)  # the long study's fields, so that its rows and these read alike
    cls = token_classes(step)
    scale = ROLLOUT_SCALES[ratio](step)
    size = (step.weights.view(-1, 1) * scale * step.advantages.view(-1, 1)).abs() * step.mask
    out |= {f"arm_share_{c}": v for c, v in class_shares(size, cls, step.mask).items()}
    out |= {"select_share": None, "select_precision": None, "select_recall": None}
    if select is not None:
        chosen = select * step.mask
        forks = ((cls == TOKEN_CLASSES.index("fork")) & (step.mask > 0)).to(chosen.dtype)
        metrics = fork_detect.precision_recall(chosen, forks)
        out |= {"select_share": (chosen.sum() / step.mask.sum()).item(), "select_precision": metrics["precision"],
                "select_recall": metrics["recall"], "batch": {"select": select}}
    return out
