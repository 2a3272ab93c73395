"""Chapter 3's toy: with parameters shared across prompts, GRPO raises Pass@1 and lowers Pass@k at large k.

Ten prompts, five answer modes (countdown's solution forms), every prompt starting at the SFT prior over them.
Eight "common" prompts are solved only by mode 0, the likeliest; two "rare" prompts only by mode 3. The policy is
one softmax whose logits every prompt shares, or one softmax per prompt. Each update is the exact expected
gradient of one on-policy GRPO step, summed over every possible group of G samples with reco_mini's advantages
and response weights, and Pass@k is exact, 1 - (1 - p)^k per prompt: nothing is sampled, so a run is deterministic.
Under norm "batch" the weights are divided by the expected mean of 1/m_i over the whole rollout batch (the limit of
many prompts per step), so the toy stays exact.

  python tutorial/toys/shared_modes.py
"""
from __future__ import annotations

import functools
import itertools
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reco.log import update_sizes  # noqa: E402
from reco.tasks.countdown import SFT_FORM_PRIOR  # noqa: E402
from reco_mini import group_advantages, occurrence_weights  # noqa: E402

# prompt kind -> (which modes are correct, how many prompts of that kind)
PROMPTS = {"common": ([1.0, 0.0, 0.0, 0.0, 0.0], 8), "rare": ([0.0, 0.0, 0.0, 1.0, 0.0], 2)}
# the forms chapter 3 compares: name -> (occurrence, apply, norm), as reco_mini's flags take them
FORMS = {"GRPO": ("none", "all", "group"),
         "ReCo group/all": ("sequence", "all", "group"),            # the default before issue 52
         "ReCo batch/positive": ("sequence", "positive", "batch")}  # the default now (LossConfig)


def exact_pass_at_k(success: dict[str, float], k: int) -> float:
    """Mean over the ten prompts of 1 - (1 - p)^k, p a prompt's probability of a correct answer."""
    total = sum(count for _, count in PROMPTS.values())
    return sum(count * (1 - (1 - success[kind]) ** k) for kind, (_, count) in PROMPTS.items()) / total


@functools.cache
def _multisets(M: int, G: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    groups = torch.tensor(list(itertools.combinations_with_replacement(range(M), G)))  # [C, G], each sorted
    counts = torch.nn.functional.one_hot(groups, M).sum(1).double()  # [C, M]
    return groups, counts, math.lgamma(G + 1) - torch.lgamma(counts + 1.0).sum(1)  # log(G! / prod n_y!)


def multisets(pi: list[float], G: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every group of G draws from pi up to order, [C, G] sorted, and its multinomial probability [C]."""
    groups, counts, orderings = _multisets(len(pi), G)
    return groups, (orderings + (counts * torch.tensor(pi, dtype=torch.float64).log()).sum(1)).exp()


def expected_inv_m(pi: list[float], G: int, occurrence: str) -> float:
    """E[1/m_i] of one response of a group drawn from pi: what norm "batch" divides by, given many prompts."""
    groups, prob = multisets(pi, G)
    inv_m = occurrence_weights(torch.tensor(pi, dtype=torch.float64).log()[groups], occurrence, apply="all", norm="none")
    return float((prob[:, None] * inv_m).sum() / G)


def group_terms(pi: list[float], correct: list[float], G: int, occurrence: str = "none", apply: str = "all",
                norm: str = "group", batch_mean: float | None = None) -> tuple[list[float], list[float]]:
    """push[y] = E[sum_i w_i A_i 1(y_i = y)] over groups of G draws from pi (the coefficient of grad log pi(y) in a
    group's expected on-policy gradient), and the expected reco.log.update_sizes of one group, [hard, mid, easy].
    The order of a group's draws changes neither A nor w, so it sums over the C(M + G - 1, G) multisets of draws,
    each with its multinomial probability, instead of the M**G ordered groups of make_figures.expected_weights."""
    groups, prob = multisets(pi, G)
    rewards = torch.tensor(correct, dtype=torch.float64)[groups]  # [C, G]
    A = group_advantages(rewards)  # [C, G]
    w = occurrence_weights(torch.tensor(pi, dtype=torch.float64).log()[groups], occurrence, advantages=A, apply=apply,
                           norm=norm, batch_mean=batch_mean)  # [C, G]; a one-token response: log p_i = log pi(y_i)
    push = torch.zeros(len(pi), dtype=torch.float64).index_add_(0, groups.flatten(), (prob[:, None] * w * A).flatten())
    sizes = update_sizes(rewards, A.flatten(), (prob[:, None] * w).flatten())  # prob >= 0: E[sum |w A|] by band
    return push.tolist(), sizes.tolist()


def expected_push(pi: list[float], correct: list[float], G: int, occurrence: str = "none", apply: str = "all",
                  norm: str = "group") -> list[float]:
    """group_terms' push alone (norm "group" or "none": a single group needs no batch mean)."""
    return group_terms(pi, correct, G, occurrence, apply, norm)[0]


def train(shared: bool, steps: int, occurrence: str = "none", lr: float = 2.0, G: int = 8, apply: str = "all",
          norm: str = "group") -> list[dict[str, float]]:
    """Expected-gradient GRPO (occurrence "none") or ReCo's response weights ("sequence", m_i) in the form that
    apply and norm name. Returns, before the first step and after each, every prompt kind's probability of a
    correct answer, and from the first step on the share of that step's update on easy groups (update_share_easy,
    as log.jsonl records it; c >= 3G/4 correct). Prompts of one kind have the same logits and the same gradient,
    so one row stands for all of them."""
    start = torch.tensor(SFT_FORM_PRIOR, dtype=torch.float64).log()
    logits = {name: start.clone().requires_grad_(True) for name in (["shared"] if shared else PROMPTS)}
    owner = {kind: "shared" if shared else kind for kind in PROMPTS}  # whose logits a prompt kind uses
    optimizer = torch.optim.SGD(list(logits.values()), lr=lr)
    total = sum(count for _, count in PROMPTS.values())

    def success() -> dict[str, float]:
        return {kind: float(torch.softmax(logits[owner[kind]].detach(), -1) @ torch.tensor(correct, dtype=torch.float64))
                for kind, (correct, _) in PROMPTS.items()}

    history = [success()]
    for _ in range(steps):
        pis = {kind: torch.softmax(logits[owner[kind]].detach(), -1).tolist() for kind in PROMPTS}
        batch_mean = sum(count * expected_inv_m(pis[kind], G, occurrence) for kind, (_, count) in PROMPTS.items()) / total \
            if norm == "batch" else None
        loss, sizes = 0.0, torch.zeros(3, dtype=torch.float64)
        for kind, (correct, count) in PROMPTS.items():
            logp = torch.log_softmax(logits[owner[kind]], -1)
            push, size = group_terms(pis[kind], correct, G, occurrence, apply, norm, batch_mean)
            loss = loss - count / total * (torch.tensor(push, dtype=torch.float64) * logp).sum() / G  # token-mean
            sizes += count * torch.tensor(size, dtype=torch.float64)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append({**success(), "update_share_easy": float(sizes[2] / sizes.sum())})
    return history


if __name__ == "__main__":
    for shared in (True, False):
        for name, (occurrence, apply, norm) in FORMS.items():
            h = train(shared, 100, occurrence, apply=apply, norm=norm)
            print("shared" if shared else "per-prompt", f"{name:20}",
                  {f"Pass@{k}": round(exact_pass_at_k(h[-1], k), 3) for k in (1, 16, 256)},
                  "easy share at step 100:", round(h[-1]["update_share_easy"], 3))
