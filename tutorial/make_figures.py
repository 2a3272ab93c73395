"""The tutorial's toy computations and the figures drawn from them.

    python tutorial/make_figures.py            # writes tutorial/figures/*.png
    python tutorial/make_figures.py --fast     # fewer points, lower resolution (what the test runs)

Every number plotted here comes from reco_mini's own functions (pass_at_k, group_advantages,
occurrence_weights, variance_stat, policy_loss) applied to small toys. The chapters include the
toy functions below by name, so the chapter text, the figure and the code cannot disagree.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reco.tasks.countdown import SFT_FORM_PRIOR  # noqa: E402
from reco_mini import LossConfig, group_advantages, occurrence_weights, policy_loss, variance_stat  # noqa: E402

FIGURES = Path(__file__).resolve().parent / "figures"


# ------------------------------------------------------------------------------ chapter 2: Pass@k

def toy_models() -> dict[str, list[float]]:
    """Per-problem success probabilities of two made-up models on 100 problems.

    An illustration, not data: "after RL" is sharper on the problems it solves and has lost the
    problems that the base model solved only rarely.
    """
    base = [0.30] * 40 + [0.02] * 40 + [0.003] * 20
    after_rl = [0.80] * 40 + [0.05] * 20 + [0.0] * 40
    return {"base": base, "after RL": after_rl}


def true_pass_at_k(success_probs: list[float], k: int) -> float:
    """Pass@k of a model whose per-problem success probabilities are known: mean of 1 - (1 - p)^k."""
    return sum(1.0 - (1.0 - p) ** k for p in success_probs) / len(success_probs)


# ------------------------------------------------------------------------------ chapter 3: response weights

def all_groups(num_responses: int, G: int) -> torch.Tensor:
    """Every possible group of G draws from num_responses distinct responses: [num_responses**G, G]."""
    return torch.cartesian_prod(*[torch.arange(num_responses)] * G).view(-1, G)


def expected_weights(pi: list[float], correct: list[float], G: int, occurrence: str,
                     apply: str = "all", norm: str = "group") -> tuple[list[float], list[float]]:
    """Exact expectations over every group of G samples from the categorical policy pi.

    Returns, for each distinct response y,
      weight[y] = E[ sum_i w_i 1[y_i = y] ]          how much y counts in one group's loss
      push[y]   = E[ sum_i w_i A_i 1[y_i = y] ]      the coefficient of grad log pi(y) in the
                                                     expected (on-policy, token-mean) GRPO gradient
    with A from group_advantages and w from occurrence_weights (mode "none" is GRPO: w = 1;
    apply="positive" reweights only the responses with A > 0; by default the form before issue 52, group/all).
    """
    p = torch.tensor(pi, dtype=torch.float64)
    groups = all_groups(len(pi), G)  # [N, G]
    prob = p[groups].prod(1)  # [N]: the probability of drawing exactly this group
    A = group_advantages(torch.tensor(correct, dtype=torch.float64)[groups])  # [N, G]
    w = occurrence_weights(p.log()[groups], occurrence, advantages=A, apply=apply, norm=norm)  # [N, G]; log p_i = log pi(y_i)
    def per_response(x: torch.Tensor) -> list[float]:  # sum of prob * x over every (group, slot) holding y
        return torch.zeros(len(pi), dtype=torch.float64).index_add_(0, groups.flatten(), (prob[:, None] * x).flatten()).tolist()

    return per_response(w), per_response(w * A)


# ------------------------------------------------------------------------------ chapter 4: update scale

def update_scale(p: float, p_old: float, v_old_mean: float, vocab: int = 8, advantage: float = 1.0) -> dict[str, float]:
    """One position whose sampled token y has probability p now and p_old at sampling time; the
    other vocab - 1 tokens share the rest equally (at both times).

    Returns the importance ratio r = p / p_old, the variance ratio rho = V_theta / v_old_mean, and
    the norm of the loss gradient on the logits, by autograd through reco_mini.policy_loss, for
    token_ratio "is" (GRPO) and "variance" (ReCo). Both are 0 where the trust region clips.
    """
    def logits_for(q: float) -> torch.Tensor:
        return torch.tensor([math.log(q)] + [math.log((1 - q) / (vocab - 1))] * (vocab - 1), dtype=torch.float64)

    old_logp = torch.log_softmax(logits_for(p_old), -1)[0].view(1, 1)
    out = {"r": p / p_old, "rho": min(variance_stat(logits_for(p)).item() / v_old_mean, 10.0)}
    for mode in ("is", "variance"):
        z = logits_for(p).requires_grad_(True)
        logp = torch.log_softmax(z, -1)[0].view(1, 1)
        batch = {"old_logp": old_logp, "advantages": torch.tensor([advantage], dtype=torch.float64),
                 "mask": torch.ones(1, 1), "v_old_mean": v_old_mean}
        loss, _ = policy_loss(logp, batch, LossConfig(token_ratio=mode), variance_stat(z.detach()).view(1, 1))
        loss.backward()
        out[f"grad_norm_{mode}"] = z.grad.norm().item()
    return out


def v_uniform_rest(p: float, vocab: int = 8) -> float:
    """V = 1 - sum pi^2 at a position where one token has p and vocab - 1 tokens share 1 - p."""
    return 1 - p**2 - (1 - p) ** 2 / (vocab - 1)


# ------------------------------------------------------------------------------ plots

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_pass_at_k(path: Path, dpi: int) -> Path:
    plt = _plt()
    ks = [2 ** i for i in range(9)]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for name, probs in toy_models().items():
        ax.plot(ks, [true_pass_at_k(probs, k) for k in ks], marker="o", ms=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set(xlabel="k (samples per problem)", ylabel="Pass@k", title="A toy: sharper at k = 1, narrower at k = 256")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_response_weights(path: Path, dpi: int, G: int) -> Path:
    plt = _plt()
    pi = SFT_FORM_PRIOR
    correct = [1.0] * len(pi)  # weights only: every response counts (advantages do not enter `weight`)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    x = range(len(pi))
    for offset, (mode, label) in zip((-0.2, 0.2), (("none", "GRPO (w = 1)"), ("sequence", "ReCo (expected occurrence)"))):
        weight, _ = expected_weights(pi, correct, G, mode)
        ax1.bar([i + offset for i in x], [wt / G for wt in weight], width=0.4, label=label)
    ax1.set_xticks(list(x), [f"y{i}\npi={p}" for i, p in enumerate(pi)], fontsize=8)
    ax1.set(ylabel="expected share of the group's weight", title=f"Who counts in a group (G = {G})")
    ax1.legend(fontsize=8)
    ps = [i / 200 for i in range(1, 201)]
    ax2.plot(ps, [G * q for q in ps], label="GRPO: G p (expected copies)")
    ax2.plot(ps, [G * q / (1 + (G - 1) * q) for q in ps], label="ReCo: G p / (1 + (G-1) p)")
    ax2.set(xlabel="p = pi_old(y | x)", ylabel="expected raw weight of y per group", title="Weight against probability")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_update_scale(path: Path, dpi: int, points: int) -> Path:
    plt = _plt()
    ps = [0.01 + 0.98 * i / (points - 1) for i in range(points)]
    p_old = 0.5
    during = [update_scale(p, p_old, v_uniform_rest(p_old)) for p in ps]  # one position, during the update
    v_bar = 0.3  # an illustrative batch mean of V_old
    on_policy = [update_scale(p, p, v_bar) for p in ps]  # many positions, at theta = theta_old
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ax1.plot(ps, [r["r"] for r in during], label="GRPO: r = pi / pi_old")
    ax1.plot(ps, [r["rho"] for r in during], label="ReCo: rho = V / V_old")
    ax1.axvspan(p_old * 1.2, 1, color="grey", alpha=0.15, lw=0, label="A > 0: clipped, keep = 0")
    ax1.axvspan(0, p_old * 0.8, color="tab:red", alpha=0.08, lw=0, label="A < 0: clipped, keep = 0")
    ax1.axvline(p_old, color="grey", ls=":", lw=1)
    ax1.set(xlabel="pi_theta(y_t) during the update", ylabel="scale of the token's gradient", ylim=(0, 2.2),
            title=f"One position, sampled at pi_old = {p_old}")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7, loc="upper left")
    ax2.plot(ps, [r["grad_norm_is"] for r in on_policy], label="GRPO: |e_y - pi|")
    ax2.plot(ps, [r["grad_norm_variance"] for r in on_policy], label=f"ReCo: rho |e_y - pi|, mean V_old = {v_bar}")
    ax2.set(xlabel="pi_old(y_t) of the sampled token", ylabel="|d loss / d logits| (A = 1)",
            title="On policy, across positions")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(FIGURES), help="output folder (default tutorial/figures)")
    parser.add_argument("--fast", action="store_true", help="fewer points and lower resolution (for tests)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dpi = 50 if args.fast else 110
    written = [
        plot_pass_at_k(out / "pass_at_k_toy.png", dpi),
        plot_response_weights(out / "response_weights.png", dpi, G=4 if args.fast else 8),
        plot_update_scale(out / "update_scale.png", dpi, points=12 if args.fast else 99),
    ]
    for p in written:
        print(f"wrote {p} ({p.stat().st_size // 1024} KB)")
    return written


if __name__ == "__main__":
    main()
