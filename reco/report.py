"""reco/report.py: the end of a run: results.json, the Pass@k table and the Pass@k plot, which reco_scaled's
evaluation uses too.
"""
from __future__ import annotations

import json
import math
from pathlib import Path


def write_results(results: dict, out: Path) -> None:
    """reco_mini's end: results.json, the Pass@k table on stdout and the Pass@k plot, with the run's details."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(format_table(results["methods"]))
    cfg, problems = results["config"], len(next(iter(results["methods"].values()))["counts"])
    if cfg.get("quick"):
        print(smoke_test_note(problems, cfg["steps"]))
    eval_seed = cfg["seed"] + 1 if cfg["eval_seed"] < 0 else cfg["eval_seed"]
    caption = (f"task {cfg['task']}, model {cfg['model'] or 'the tiny one built here'}: {problems} held-out problems, "
               f"n = {cfg['n_eval']} samples each at temperature {cfg['temperature']:g}; seed {cfg['seed']} "
               f"(evaluation samples: seed {eval_seed})")
    plot_pass_at_k({m: {"held-out": res} for m, res in results["methods"].items()}, out / "pass_at_k.png",
                   caption=caption)
    print(f"wrote {out / 'results.json'} and {out / 'pass_at_k.png'} in {results['wall_time_s']} s")


def smoke_test_note(problems: int, steps: int) -> str:
    """The line under --quick's table: its numbers say the pipeline runs, not which method is better."""
    return (f"--quick: a smoke test on {problems} problems x {steps} RL steps; these numbers are noise, "
            "not a comparison of the methods (run without --quick for that)")


def format_table(columns: dict[str, dict], title: str = "") -> str:
    """Pass@k rows (and mean accuracy, distinct correct, solved-any) by columns (methods, or benchmarks)."""
    width = max(10, *(len(c) + 2 for c in columns))
    lines = ([title] if title else []) + [f"{'pass@k':<10}" + "".join(f"{c:>{width}}" for c in columns)]
    for k in next(iter(columns.values()))["pass_at_k"]:
        lines.append(f"{k:<10}" + "".join(f"{s['pass_at_k'][k]:>{width}.4f}" for s in columns.values()))
    for key, label in (("mean_accuracy", "mean acc"), ("distinct_correct", "distinct"), ("solved_any", "solved")):
        lines.append(f"{label:<10}" + "".join(f"{s[key]:>{width}.4f}" for s in columns.values()))
    if all("n_problems" in s for s in columns.values()):
        lines.append(f"{'problems':<10}" + "".join(f"{s['n_problems']:>{width}d}" for s in columns.values()))
    return "\n".join(lines)


def plot_pass_at_k(runs: dict[str, dict[str, dict]], path: str | Path, title: str = "Pass@k", caption: str = "") -> Path:
    """Pass@k against k (log2 axis): one panel per benchmark (plus the average), one line per run; at least 900 px
    wide, one title (a single panel's name joins it), and `caption` (the run's details: seed, problems, n) below.

    runs: run name -> panel name -> {"pass_at_k": {k: value}, optional "n_problems"}.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(b for summary in runs.values() for b in summary))  # first-seen order
    panels = [b for b in panels if b != "average"] + (["average"] if len(panels) > 2 else [])
    cols, rows = min(3, len(panels)), math.ceil(len(panels) / 3)
    below = 0.5 if caption else 0.0  # inches for the caption
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.5, 4.2 * cols), 3.6 * rows + below), squeeze=False)
    for ax, bench in zip(axes.flat, panels):
        ks: set[int] = set()
        for name, summary in runs.items():
            if bench in summary:
                curve = summary[bench]["pass_at_k"]
                ks |= {int(k) for k in curve}
                ax.plot([int(k) for k in curve], list(curve.values()), marker="o", ms=3, label=name)
        n_problems = next((s[bench].get("n_problems") for s in runs.values() if bench in s), None)
        name = ("average over benchmarks" if bench == "average"
                else bench + (f" ({n_problems} problems)" if n_problems else ""))
        ax.set_title(f"{title}, {name}" if len(panels) == 1 else name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
        ax.minorticks_off()
        ax.set(xlabel="k (samples)", ylabel="Pass@k", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if len(panels) > 1:
        fig.suptitle(title)
    if caption:
        fig.text(0.5, 0.02, caption, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, below / fig.get_figheight(), 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
