"""Pass@k against k (log2 axis): one panel per benchmark plus the average, one line per run."""
from __future__ import annotations

import math
from pathlib import Path


def plot_pass_at_k(runs: dict[str, dict], path: str | Path, title: str = "Pass@k") -> Path:
    """Save the overlay plot of `runs` (run name -> ``evaluate.summarize`` output) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(b for summary in runs.values() for b in summary))  # first-seen order
    panels = [b for b in panels if b != "average"] + (["average"] if len(panels) > 2 else [])
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, bench in zip(axes.flat, panels):
        ks: set[int] = set()
        for name, summary in runs.items():
            if bench in summary:
                curve = summary[bench]["pass_at_k"]
                ks |= {int(k) for k in curve}
                ax.plot([int(k) for k in curve], list(curve.values()), marker="o", ms=3, label=name)
        n_problems = next(s[bench]["n_problems"] for s in runs.values() if bench in s)
        ax.set_title(f"{bench} ({n_problems} problems)" if bench != "average" else "average over benchmarks")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
        ax.minorticks_off()
        ax.set(xlabel="k (samples)", ylabel="Pass@k", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
