"""experiments/protocol.py: the frontier protocol that reads the whole trajectory (issue 19).

A run's trajectory is its measured checkpoints in step order, each (Pass@1, Pass@k); the base (step 0) is not a
measured checkpoint of the run and is never used to fill a gap (no interpolation to the base). Along a trajectory,
Pass@k "at Pass@1 = p" is read where the piecewise-linear path through the checkpoints first reaches p; it is defined
for p from the first checkpoint's Pass@1 up to the highest Pass@1 the run reaches (`covered`).

  primary     per seed, the mean over p of Pass@k(run, p) - Pass@k(reference, p) over the Pass@1 range that both
              runs' measured checkpoints cover (exact: both curves are linear inside each interval between the union of
              their Pass@1 breakpoints, so the midpoint rule integrates them exactly; a path that dips and climbs
              again jumps at its earlier record, and the midpoints never straddle a jump); None where the ranges do
              not overlap
  endpoint    the run's final checkpoint against the reference's trajectory at the run's final Pass@1:
              Pass@k(run, final) - Pass@k(reference, first reach of that Pass@1); None where the reference's
              trajectory does not reach it (the run is not the slower one) or starts above it
  final       the final checkpoints' difference in Pass@k

`python experiments/protocol.py` applies this, as an exploratory analysis added after the fact, to the committed
results/frontier_study.json (k = 256, the largest k it stores; its confirmatory results are left untouched), writes
results/frontier_reanalysis.json and, with --write-docs, the generated block between the frontier-reanalysis markers.

  python experiments/protocol.py --write-docs docs/results.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from analysis import equivalence_test, finite_or_none, holm, paired_test  # noqa: E402

Curve = list[tuple[float, float]]  # (Pass@1, Pass@k) at the measured checkpoints, in step order
EQUIVALENCE_MARGIN = 0.02
BEGIN, END = "<!-- frontier-reanalysis:begin -->", "<!-- frontier-reanalysis:end -->"


def measured_curve(trajectory: list[dict], k: str) -> Curve:
    """(Pass@1, Pass@k) of the checkpoints with step > 0. Rows carry either pass_at_k {k: value} (reco_mini's
    trajectory.jsonl) or pass_at_1 / pass_at_<k> (the frontier study's summary)."""
    def get(row: dict, key: str) -> float:
        return row["pass_at_k"][key] if "pass_at_k" in row else row[f"pass_at_{key}"]
    return [(get(r, "1"), get(r, k)) for r in sorted(trajectory, key=lambda r: r["step"]) if r["step"] > 0]


def covered(curve: Curve) -> tuple[float, float] | None:
    """The Pass@1 range where `first_reach` is defined: first checkpoint's Pass@1 to the highest Pass@1."""
    return (curve[0][0], max(p for p, _ in curve)) if curve else None


def first_reach(curve: Curve, level: float) -> float | None:
    """Pass@k where the piecewise-linear path first reaches Pass@1 = level; None outside `covered`."""
    if not curve or level < curve[0][0]:
        return None
    for i, (p, v) in enumerate(curve):
        if p >= level:
            if i == 0:
                return v
            p0, v0 = curve[i - 1]
            return v0 + (level - p0) / (p - p0) * (v - v0)  # p0 < level <= p: the path was below level until here
    return None


def last_reach(curve: Curve, level: float) -> float | None:
    """Pass@k where the piecewise-linear path last reaches Pass@1 = level (the robustness reading of issue 52: a run
    that climbs past a level and falls back is read on its way down); None outside `covered`."""
    if not curve or level < curve[0][0] or level > max(p for p, _ in curve):
        return None
    for (p0, v0), (p1, v1) in zip(curve[-2::-1], curve[:0:-1]):  # the segments, last first
        if min(p0, p1) <= level <= max(p0, p1):
            return v1 if p1 == p0 else v0 + (level - p0) / (p1 - p0) * (v1 - v0)
    return curve[0][1]  # a single checkpoint, at the level


def mean_gap(curve: Curve, ref: Curve, reach=first_reach) -> float | None:
    """Primary statistic: the mean of reach(curve, p) - reach(ref, p) over p in the common covered range (the value at
    the point if the range is a single point); None if the ranges do not overlap. reach: first_reach (the primary)
    or last_reach (the last-visit reading)."""
    a, b = covered(curve), covered(ref)
    if a is None or b is None or max(a[0], b[0]) > min(a[1], b[1]):
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])

    def gap(p: float) -> float:
        return reach(curve, p) - reach(ref, p)
    if hi == lo:
        return gap(lo)
    points = sorted({lo, hi} | {p for p, _ in curve + ref if lo < p < hi})
    area = sum((q - p) * gap((p + q) / 2) for p, q in zip(points, points[1:]))  # linear inside each interval
    return area / (hi - lo)


def endpoint_gap(curve: Curve, ref: Curve) -> float | None:
    """Secondary statistic: the run's final Pass@k minus the reference's Pass@k where its trajectory first reaches
    the run's final Pass@1; None where it does not."""
    if not curve:
        return None
    at = first_reach(ref, curve[-1][0])
    return None if at is None else curve[-1][1] - at


def final_gap(curve: Curve, ref: Curve) -> float | None:
    return curve[-1][1] - ref[-1][1] if curve and ref else None


def last_visit_gap(curve: Curve, ref: Curve) -> float | None:
    return mean_gap(curve, ref, reach=last_reach)


STATISTICS = {"primary": mean_gap, "endpoint": endpoint_gap, "final": final_gap, "last_visit": last_visit_gap}


def compare(curves: dict[int, Curve], refs: dict[int, Curve], statistics=("primary", "endpoint", "final")) -> dict:
    """Per seed (both present) each of `statistics` (STATISTICS), and over seeds: mean, t CI, one-sided p (greater
    than 0) and the TOST p against +-EQUIVALENCE_MARGIN. Seeds where a statistic is None are left out of its test
    (n says)."""
    seeds = sorted(set(curves) & set(refs))
    out = {"seeds": seeds}
    for name, fn in ((name, STATISTICS[name]) for name in statistics):
        per_seed = {s: fn(curves[s], refs[s]) for s in seeds}
        values = [v for v in per_seed.values() if v is not None]
        test = paired_test(values) if len(values) >= 2 else {"n": len(values), "values": values}
        tost = equivalence_test(values, EQUIVALENCE_MARGIN) if len(values) >= 2 else {}
        ci = test.get("ci95")
        out[name] = {"per_seed": {str(s): v for s, v in per_seed.items()}, "n": len(values), "mean": test.get("mean"),
                     "ci_low": None if ci is None else test["mean"] - ci, "ci_high": None if ci is None else test["mean"] + ci,
                     "p_greater": test.get("p_greater"), "p_tost": tost.get("p_equivalent")}
    return out


def add_holm(comparisons: dict[str, dict], statistic: str = "primary") -> None:
    """Holm-adjusted one-sided p of `statistic` over the comparisons, in place (key p_holm)."""
    names = list(comparisons)
    for name, adjusted in zip(names, holm([comparisons[n][statistic]["p_greater"] for n in names])):
        comparisons[name][statistic]["p_holm"] = adjusted


def verdict(stat: dict, margin: float = EQUIVALENCE_MARGIN, alpha: float = 0.05, p_key: str = "p_greater") -> str:
    """A plain-language reading of one statistic, by rule: above zero, equivalent within the margin, or neither."""
    if stat["mean"] is None or stat["ci_low"] is None:
        return "not estimable"
    p = stat.get(p_key)
    if p is not None and p < alpha:
        return "greater than zero"
    if stat.get("p_tost") is not None and stat["p_tost"] < alpha:
        return f"equivalent to zero within ±{margin}"
    return "no detectable difference, and not shown equivalent"


# =============================================================================
# The exploratory re-analysis of the committed frontier study
# =============================================================================

def reanalyse_frontier(summary: dict, k: str = "256", reference: str = "grpo") -> dict:
    methods = {m: v for m, v in summary["methods"].items() if "trajectory" in v}
    curves = {m: {s: measured_curve(t, k) for s, t in zip(v["seeds"], v["trajectory"])} for m, v in methods.items()}
    comparisons = {f"{m} - {reference}": compare(curves[m], curves[reference]) for m in curves if m != reference}
    for statistic in ("primary", "endpoint", "final"):
        add_holm(comparisons, statistic)
    ranges = {m: {str(s): covered(c) for s, c in cs.items()} for m, cs in curves.items()}
    return finite_or_none({
        "exploratory": True,
        "note": "Added after the fact (issue 19): the whole-trajectory protocol of experiments/protocol.py applied to the "
                "committed results/frontier_study.json. Not part of that study's pre-registered hypotheses, which are "
                "unchanged. Holm p-values are over the comparisons listed, for orientation only.",
        "source": "results/frontier_study.json", "k": int(k), "reference": reference,
        "checkpoints": "measured checkpoints only (steps > 0); the base is not used",
        "equivalence_margin": EQUIVALENCE_MARGIN, "covered_pass_at_1": ranges, "comparisons": comparisons})


def _interval(s: dict) -> str:
    if s["mean"] is None:
        return "–"
    ci = f" ({s['ci_low']:+.3f}, {s['ci_high']:+.3f})" if s["ci_low"] is not None else ""
    return f"{s['mean']:+.3f}{ci}"


def _p(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def render_reanalysis(result: dict, results_path: str) -> str:
    k = result["k"]
    out = [f"_Generated from `{results_path}` by `python experiments/protocol.py --write-docs <this file>`; rerun it "
           "rather than editing._",
           f"\n**Exploratory, added after the fact: the frontier study read along the whole trajectory** (k = {k}; "
           f"paired by seed against {result['reference']}; {result['checkpoints']}). {result['note']}\n",
           "| comparison | statistic | mean (95% CI) | n | p (> 0) | p (Holm) | TOST p (±0.02) | reading |",
           "|---|---|---|---|---|---|---|---|"]
    names = {"primary": f"mean Pass@{k} gap over the common Pass@1 range", "endpoint": "endpoint-matched",
             "final": "final checkpoint"}
    for comp, c in result["comparisons"].items():
        for stat in ("primary", "endpoint", "final"):
            s = c[stat]
            out.append(f"| {comp} | {names[stat]} | {_interval(s)} | {s['n']} | {_p(s['p_greater'])} | "
                       f"{_p(s.get('p_holm'))} | {_p(s['p_tost'])} | {verdict(s, p_key='p_holm')} |")
    out.append("\nReadings are rules, not judgement: \"greater than zero\" needs a Holm-adjusted one-sided p < 0.05 "
               "(over the three comparisons of that statistic), \"equivalent\" a TOST p < 0.05 against ±0.02; otherwise "
               "the comparison is reported as a null. The final checkpoint compares runs at different Pass@1 (a less "
               "trained run keeps more coverage), which is why the primary statistic matches Pass@1 first.")
    return "\n".join(out)


def write_block(path: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the text between the markers in `path`; a file without them is an error."""
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"error: {path} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    path.write_text(head + begin + "\n" + block + "\n" + end + rest.split(end, 1)[1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", default="results/frontier_study.json")
    parser.add_argument("--results", default="results/frontier_reanalysis.json")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the frontier-reanalysis markers")
    args = parser.parse_args(argv)
    result = reanalyse_frontier(json.loads(Path(args.source).read_text()))
    Path(args.results).write_text(json.dumps(result, indent=1))
    if args.write_docs:
        write_block(Path(args.write_docs), render_reanalysis(result, args.results))
    print(f"wrote {args.results}" + (f" and the block in {args.write_docs}" if args.write_docs else ""))
    return result


if __name__ == "__main__":
    main()
