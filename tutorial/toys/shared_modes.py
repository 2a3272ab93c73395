"""Chapter 3's toy: with parameters shared across prompts, GRPO raises Pass@1 and lowers Pass@k at large k.

Ten prompts, five answer modes (countdown's solution forms), every prompt starting at the SFT prior over them.
Eight "common" prompts are solved only by mode 0, the likeliest; two "rare" prompts only by mode 3. The policy is
one softmax whose logits every prompt shares, or one softmax per prompt. Each update is the exact expected
gradient of one on-policy GRPO step, summed over every possible group of G samples with reco_mini's advantages
and response weights, and Pass@k is exact, 1 - (1 - p)^k per prompt: nothing is sampled, so a run is deterministic.

  python tutorial/toys/shared_modes.py
"""
from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reco.tasks.countdown import SFT_FORM_PRIOR  # noqa: E402
from reco_mini import group_advantages, occurrence_weights  # noqa: E402

# prompt kind -> (which modes are correct, how many prompts of that kind)
PROMPTS = {"common": ([1.0, 0.0, 0.0, 0.0, 0.0], 8), "rare": ([0.0, 0.0, 0.0, 1.0, 0.0], 2)}


def exact_pass_at_k(success: dict[str, float], k: int) -> float:
    """Mean over the ten prompts of 1 - (1 - p)^k, p a prompt's probability of a correct answer."""
    total = sum(count for _, count in PROMPTS.values())
    return sum(count * (1 - (1 - success[kind]) ** k) for kind, (_, count) in PROMPTS.items()) / total


def expected_push(pi: list[float], correct: list[float], G: int, occurrence: str = "none") -> list[float]:
    """push[y] = E[sum_i w_i A_i 1(y_i = y)] over groups of G draws from pi: the coefficient of grad log pi(y) in a
    group's expected (on-policy) gradient, w = 1 for "none" (GRPO). The order of a group's draws changes neither A
    nor w, so it sums over the C(M + G - 1, G) multisets of draws, each with its multinomial probability, instead
    of the M**G ordered groups that make_figures.expected_weights enumerates (chapter 3 checks the two agree).
    """
    p = torch.tensor(pi, dtype=torch.float64)
    groups = torch.tensor(list(itertools.combinations_with_replacement(range(len(pi)), G)))  # [C, G], each sorted
    counts = torch.nn.functional.one_hot(groups, len(pi)).sum(1).double()  # [C, M]
    orderings = math.lgamma(G + 1) - torch.lgamma(counts + 1.0).sum(1)  # log(G! / prod n_y!)
    prob = (orderings + (counts * p.log()).sum(1)).exp()  # [C]
    A = group_advantages(torch.tensor(correct, dtype=torch.float64)[groups])  # [C, G]
    w = occurrence_weights(p.log()[groups], occurrence)  # [C, G]; a one-token response: log p_i = log pi(y_i)
    return torch.zeros(len(pi), dtype=torch.float64).index_add_(0, groups.flatten(), (prob[:, None] * w * A).flatten()).tolist()


def train(shared: bool, steps: int, occurrence: str = "none", lr: float = 2.0, G: int = 8) -> list[dict[str, float]]:
    """Expected-gradient GRPO (occurrence "none") or its response-weighted form ("sequence", ReCo's m_i).

    Returns, before the first step and after each, every prompt kind's probability of a correct answer.
    Prompts of one kind have the same logits and the same gradient, so one row stands for all of them.
    """
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
        loss = 0.0
        for kind, (correct, count) in PROMPTS.items():
            logp = torch.log_softmax(logits[owner[kind]], -1)
            push = expected_push(logp.detach().exp().tolist(), correct, G, occurrence)
            loss = loss - count / total * (torch.tensor(push, dtype=torch.float64) * logp).sum() / G  # token-mean
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(success())
    return history


if __name__ == "__main__":
    for shared in (True, False):
        end = train(shared, 100)[-1]
        print("shared" if shared else "per-prompt", {k: round(exact_pass_at_k(end, k), 3) for k in (1, 16, 256)})
