"""Statistics over seeds and run-log diagnostics, shared by the studies in experiments/.

Means with Student-t 95% CIs, one-sided p-values of the paired t-test (exact Student t CDF for integer degrees
of freedom), a TOST equivalence test, Holm's step-down correction, and the divergence flags of one RL log.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

# two-sided 95% Student t quantiles t_{0.975, df} for df = 1..30
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
COLLAPSE_WINDOW = 10  # reward collapse: last 10-step mean < 50% of the best 10-step mean


def t975(df: int) -> float:
    """Two-sided 95% Student t quantile; beyond the table, the first Cornish-Fisher correction to 1.96."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    return T975[df - 1] if df <= len(T975) else 1.96 + (1.96 ** 3 + 1.96) / (4 * df)


def summarize(values: list[float]) -> dict:
    """Mean, sample std, 95% CI half-width t_{0.975,n-1} std / sqrt(n), n and the values (std and CI need n >= 2)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1)) if n >= 2 else None
    ci = t975(n - 1) * std / math.sqrt(n) if n >= 2 else None
    return {"mean": mean, "std": std, "ci95": ci, "n": n, "values": values}


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer df (Abramowitz & Stegun 26.7.3-26.7.4, exact finite sums)."""
    if df < 1:
        raise ValueError(f"t distribution needs df >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:  # A = sin(theta) (1 + c2/2 + 1*3/(2*4) c2^2 + ... ), df/2 terms
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    else:  # A = (2/pi)(theta + sin cos (1 + 2/3 c2 + 2*4/(3*5) c2^2 + ...)), (df-1)/2 terms
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2 / math.pi * (theta + s * math.cos(theta) * total)
    return 0.5 + inside / 2 if t >= 0 else 0.5 - inside / 2


def paired_test(diffs: list[float], margin: float = 0.0) -> dict:
    """Paired differences: mean, 95% CI and the one-sided p-value of H0 mean <= margin (H1: mean > margin)."""
    s = summarize(diffs)
    if s["n"] < 2 or not s["std"]:
        return {**s, "p_greater": None}
    t = (s["mean"] - margin) / (s["std"] / math.sqrt(s["n"]))
    return {**s, "p_greater": 1.0 - t_cdf(t, s["n"] - 1)}


def equivalence_test(diffs: list[float], margin: float) -> dict:
    """TOST: H1 is |mean| < margin; p = the larger of the two one-sided p-values."""
    s = summarize(diffs)
    if s["n"] < 2 or not s["std"]:
        return {**s, "p_equivalent": None}
    se = s["std"] / math.sqrt(s["n"])
    p_low = 1.0 - t_cdf((s["mean"] + margin) / se, s["n"] - 1)  # H0: mean <= -margin
    p_high = t_cdf((s["mean"] - margin) / se, s["n"] - 1)  # H0: mean >= +margin
    return {**s, "p_equivalent": max(p_low, p_high)}


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def leave_one_out_holm(family: list[dict]) -> dict:
    """A family's Holm-adjusted one-sided p-values recomputed with each seed left out, from each contrast's per-seed
    gaps (`per_seed`: seed -> gap or None): left-out seed -> one Holm p per contrast, in the family's order."""
    seeds = sorted({seed for row in family for seed in row["per_seed"]})
    return {left: holm([paired_test([v for seed, v in row["per_seed"].items() if seed != left and v is not None])
                        ["p_greater"] for row in family]) for left in seeds}


def divergence(log: list[dict], stopped: str | None, kl_limit: float | None = None) -> dict:
    """Flags for one RL run: non-finite logged values, reco_mini's non-finite stop, a reward collapse (the last
    COLLAPSE_WINDOW-step mean reward below half the best such mean) and, with kl_limit, a last-window mean KL to the
    base above kl_limit."""
    non_finite = any(isinstance(v, float) and not math.isfinite(v) for row in log for v in row.values())
    rewards, kls = [row["reward_mean"] for row in log], [row.get("kl_base", 0.0) for row in log]
    width = min(COLLAPSE_WINDOW, len(rewards))
    windows = [sum(rewards[i: i + width]) / width for i in range(len(rewards) - width + 1)] if rewards else []
    last, best = (windows[-1], max(windows)) if windows else (None, None)
    collapse = bool(windows) and last < 0.5 * best
    kl_last = sum(kls[-width:]) / width if width else None
    kl_high = kl_limit is not None and kl_last is not None and not kl_last <= kl_limit
    return {"non_finite": non_finite, "stopped": stopped, "reward_collapse": collapse, "reward_last_window": last,
            "reward_best_window": best, "kl_base_last_window": kl_last, "kl_too_high": kl_high,
            "diverged": non_finite or stopped is not None or collapse or kl_high}


def finite_or_none(obj):
    """Strict JSON: non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_none(v) for v in obj]
    return obj


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
