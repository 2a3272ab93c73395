"""experiments/cpu_study.py: a multi-seed study of GRPO vs ReCo, and of each ReCo fix alone, on reco_mini's CPU task.

Every (variant, seed) run goes through experiments/lab.py (reco_mini's loop with the studies' hook): parse_config, then
train_rl on a copy of the SFT base, then evaluate on the held-out test split. All runs share ONE SFT base, reco_mini's
cached base for seed 0: a seed changes the RL run (rollout sampling, mini-batch order) and the evaluation sampling, not
the base, so paired differences between variants measure the RL method and nothing else. Every variant gets the same
budget, reco_mini's defaults plus --extra-args; nothing is tuned per method.

Outputs: <out>/<variant>/seed<k>/result.json and log.jsonl (finished runs are skipped on a rerun), the summary JSON
(--results) with a PNG beside it, and, with --write-readme, the docs/results.md text between the cpu-study markers.

Run from the repository root (reco_mini caches its base under runs/cache relative to the working directory):
  python experiments/cpu_study.py                          # the full study: 9 variants x 5 seeds
  python experiments/cpu_study.py --jobs 2                 # two single-threaded runs at a time (2 cores)
  python experiments/cpu_study.py --quick                  # smoke test: base, grpo, reco; 2 seeds; tiny budget
  python experiments/cpu_study.py --write-readme docs/results.md  # (re)aggregate and fill docs/results.md's block
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import lab  # noqa: E402
from analysis import COLLAPSE_WINDOW, divergence, finite_or_none, summarize  # noqa: E402
from diagnostics import on_step  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks.countdown import char_tokenizer, load_base, make_splits  # noqa: E402

# variant -> (reco_mini method, None for the SFT base without RL; extra reco_mini flags)
VARIANTS: dict[str, tuple[str | None, list[str]]] = {
    "base": (None, []),
    "grpo": ("grpo", []),
    "reco": ("reco", []),
    "reco-response": ("reco-response", []),
    "reco-token": ("reco-token", []),
    "reco+variance-old": ("reco", ["--token-ratio", "variance-old"]),
    "reco+occ-token-mean": ("reco", ["--occurrence", "token-mean"]),
    "reco+occ-count": ("reco", ["--occurrence", "count"]),
    "reco+apply-positive": ("reco", ["--occurrence-apply", "positive"]),
}
QUICK_VARIANTS = ["base", "grpo", "reco"]
# reco_mini's --quick budget, with a smaller model and SFT so that the smoke test fits in about a minute on a busy
# machine; its base solves almost nothing, so quick numbers test the plumbing, not the method
QUICK_FLAGS = ["--quick", "--hidden", "32", "--layers", "2", "--sft-steps", "40"]
REFERENCE = "grpo"  # paired differences are "<variant> - grpo"
SINGLE_FIXES = {"reco-response": "response-level", "reco-token": "token-level"}
KS = (1, 4, 16, 64, 256)
SCALARS = ("mean_accuracy", "distinct_correct", "solved_any")
FINAL_STEPS = 5  # entropy_final and kl_base_final average the last 5 logged steps
TRAJECTORY_KEYS = {  # logged key -> plot title
    "reward_mean": "training reward", "kl_base": "KL to the base (k3)", "entropy": "token entropy",
    "grad_norm": "grad norm (before clipping)", "rho_mean": "ρ mean (variance ratio)", "rho_max": "ρ max",
    "w_min": "w min (occurrence weight)", "w_max": "w max", "clip_frac_low": "clip fraction, low side",
    "clip_frac_high": "clip fraction, high side"}
BEGIN, END = "<!-- cpu-study:begin -->", "<!-- cpu-study:end -->"



# =============================================================================
# Statistics over seeds
# =============================================================================

def run_measures(result: dict, log: list[dict]) -> dict[str, float | None]:
    """One run's measures: Pass@k for k in KS (those evaluated), SCALARS, and the final entropy and KL to the base."""
    ev, tail = result["eval"], log[-FINAL_STEPS:]
    measures: dict[str, float | None] = {f"pass@{k}": ev["pass_at_k"][str(k)] for k in KS if str(k) in ev["pass_at_k"]}
    measures |= {key: ev[key] for key in SCALARS}
    for key in ("entropy", "kl_base"):
        measures[f"{key}_final"] = sum(row[key] for row in tail) / len(tail) if tail else None
    return measures


def measure_stats(per_seed: dict[int, dict[str, float | None]]) -> dict:
    """Per-seed measures -> {"seeds", "n_seeds", "pass_at_k": {k: stats}, measure: stats} (None where unmeasured)."""
    seeds = sorted(per_seed)
    out: dict = {"seeds": seeds, "n_seeds": len(seeds), "pass_at_k": {}}
    for name in per_seed[seeds[0]]:
        values = [per_seed[s][name] for s in seeds]
        stats = None if any(v is None for v in values) else summarize(values)
        if name.startswith("pass@"):
            out["pass_at_k"][name.removeprefix("pass@")] = stats
        else:
            out[name] = stats
    return out


def trajectories(logs: dict[int, list[dict]]) -> dict[str, list[float]]:
    """Per-step mean over seeds of each TRAJECTORY_KEYS statistic that the logs have (steps all seeds reached)."""
    steps = min(len(log) for log in logs.values())
    out = {}
    for key in TRAJECTORY_KEYS:
        if steps and all(key in log[t] for log in logs.values() for t in range(steps)):
            out[key] = [sum(log[t][key] for log in logs.values()) / len(logs) for t in range(steps)]
    return out


def extremes(logs: dict[int, list[dict]], grad_clip: float) -> dict[str, float | None]:
    """Over every seed and logged step: the largest rho, the mean grad norm (each step logs the mean over its updates)
    and the share of steps whose grad norm exceeded grad_clip."""
    rows = [row for log in logs.values() for row in log]
    rho = [row["rho_max"] for row in rows if "rho_max" in row]
    norms = [row["grad_norm"] for row in rows if "grad_norm" in row]
    return {"rho_max": max(rho) if rho else None,
            "grad_norm_mean": sum(norms) / len(norms) if norms else None,
            "grad_clip_active_frac": sum(g > grad_clip for g in norms) / len(norms) if norms else None}


# =============================================================================
# Running one (variant, seed)
# =============================================================================

def run_config(variant: str, seed: int, flags: list[str], run_dir: Path) -> lab.Config:
    method, variant_flags = VARIANTS[variant]
    return lab.parse_config([*lab.STUDY_PINS, *flags, *variant_flags, "--seed", str(seed), "--methods", method or "",
                             "--out", str(run_dir)])


def load_context(flags: list[str]) -> dict:
    """Tokenizer, splits and the one SFT base shared by every run (reco_mini's cached base for seed 0)."""
    cfg = lab.parse_config([*flags, "--seed", "0"])
    splits, tokenizer = make_splits(cfg), char_tokenizer()
    base = load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"])).requires_grad_(False)
    return {"splits": splits, "tokenizer": tokenizer, "base": base}


def run_one(variant: str, seed: int, flags: list[str], ctx: dict, run_dir: Path) -> dict:
    """Train (unless base) and evaluate one (variant, seed); writes run_dir/result.json and returns it."""
    cfg = run_config(variant, seed, flags, run_dir)
    method, base, tokenizer, splits = VARIANTS[variant][0], ctx["base"], ctx["tokenizer"], ctx["splits"]
    run_dir.mkdir(parents=True, exist_ok=True)
    start, stopped, model = time.time(), None, base
    torch.manual_seed(seed)
    if method is not None:
        model = copy.deepcopy(base).requires_grad_(True)
        try:
            lab.train_rl(cfg, method, model, base, tokenizer, splits["train"], run_dir, on_step=on_step)
        except SystemExit as exc:  # reco_mini stops before a non-finite gradient reaches the weights
            stopped = str(exc.code)
    result = {"variant": variant, "method": method, "seed": seed, "config": asdict(cfg), "stopped": stopped,
              "eval": rm.evaluate(cfg, model, tokenizer, splits["test"], f"{variant} seed{seed}"),
              "wall_time_s": round(time.time() - start, 1), "torch_threads": torch.get_num_threads()}
    tmp = run_dir / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(run_dir / "result.json")  # atomic: an interrupted run is redone, never half-read
    return result


_CTX: dict = {}  # per process: the shared context, loaded once


def _init_worker(flags: list[str], threads: int) -> None:
    torch.set_num_threads(threads)
    _CTX.update(load_context(flags))


def _run_task(variant: str, seed: int, flags: list[str], run_dir: Path) -> dict:
    return run_one(variant, seed, flags, _CTX, run_dir)


def run_all(todo: list[tuple[str, int, Path]], flags: list[str], jobs: int, threads: int) -> None:
    """Run the unfinished (variant, seed, run_dir) triples, in this process or in `jobs` worker processes."""
    if not todo:
        return
    bar = tqdm(total=len(todo), desc="cpu study runs")
    if jobs == 1:
        previous = torch.get_num_threads()
        try:
            _init_worker(flags, threads)
            for variant, seed, run_dir in todo:
                bar.set_postfix_str(f"{variant} seed{seed}")
                _run_task(variant, seed, flags, run_dir)
                bar.update()
        finally:
            torch.set_num_threads(previous)
    else:
        load_context(flags)  # train and cache the SFT base here, once, rather than in every worker at the same time
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_init_worker,
                                 initargs=(flags, threads)) as pool:
            longest_first = sorted(todo, key=lambda t: VARIANTS[t[0]][0] is None)  # the short base runs fill the tail
            futures = [pool.submit(_run_task, v, s, flags, d) for v, s, d in longest_first]
            for future in as_completed(futures):
                future.result()
                bar.update()
    bar.close()


def read_log(run_dir: Path) -> list[dict]:
    path = run_dir / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# =============================================================================
# Aggregation, plot, README
# =============================================================================

def aggregate(runs: dict[str, dict[int, dict]], logs: dict[str, dict[int, list[dict]]], flags: list[str]) -> dict:
    """The study summary: per-variant stats, paired differences to GRPO, stability, wall time and the config."""
    measures = {v: {s: run_measures(r, logs[v][s]) for s, r in by_seed.items()} for v, by_seed in runs.items()}
    variants = {v: measure_stats(m) for v, m in measures.items()}
    paired = {}
    if REFERENCE in measures:
        for v in measures:
            seeds = sorted(set(measures[v]) & set(measures[REFERENCE]))
            if v == REFERENCE or not seeds:
                continue
            diff = {s: {k: None if x is None or measures[REFERENCE][s][k] is None else x - measures[REFERENCE][s][k]
                        for k, x in measures[v][s].items()} for s in seeds}
            paired[f"{v} - {REFERENCE}"] = measure_stats(diff)
    shared = lab.parse_config([*flags, "--seed", "0"])
    stability = {}
    for v, by_seed in logs.items():
        if VARIANTS[v][0] is None:
            continue
        flags_per_seed = {s: divergence(log, runs[v][s]["stopped"]) for s, log in by_seed.items()}
        stability[v] = {"trajectories": trajectories(by_seed), "extremes": extremes(by_seed, shared.grad_clip),
                        "divergence": flags_per_seed, "n_diverged": sum(f["diverged"] for f in flags_per_seed.values())}
    per_run = {v: {s: r["wall_time_s"] for s, r in by_seed.items()} for v, by_seed in runs.items()}
    return {
        "study": {
            "variants": {v: {"method": VARIANTS[v][0], "flags": VARIANTS[v][1]} for v in runs},
            "seeds": sorted({s for by_seed in runs.values() for s in by_seed}),
            "shared_flags": flags,
            "config": asdict(shared),
            "base": "one SFT base for every run: reco_mini's cached base for seed 0 (runs/cache)",
            "notes": [
                "Seeds vary the RL run (rollout sampling, mini-batch order) and the evaluation sampling, not the base.",
                "Every variant has the same budget (reco_mini defaults plus shared_flags); nothing is tuned per method.",
                "Stats are over seeds: mean, sample std, 95% CI half-width t_{0.975,n-1} * std / sqrt(n).",
                f"entropy_final and kl_base_final are the mean of the last {FINAL_STEPS} logged RL steps "
                "(on training rollouts); the base has none.",
                f"paired_differences are '<variant> - {REFERENCE}' per seed, then the same stats over seeds.",
                f"Trajectories are per-step means over seeds. A seed diverged if a logged value is non-finite, "
                f"reco_mini stopped it on a non-finite gradient (its last good weights are evaluated), or its mean "
                f"reward over the last {COLLAPSE_WINDOW} steps is below 50% of its best {COLLAPSE_WINDOW}-step mean.",
                "wall_time_s.total sums the runs' own times (train + evaluate; each run's torch_threads is in its "
                "result.json); it leaves out loading the base, and runs in parallel (--jobs) overlap.",
            ],
        },
        "ks": [k for k in KS if str(k) in next(iter(variants.values()))["pass_at_k"]],
        "variants": variants,
        "paired_differences": paired,
        "stability": stability,
        "wall_time_s": {"per_run": per_run, "total": round(sum(t for r in per_run.values() for t in r.values()), 1)},
    }


def plot(summary: dict, path: Path) -> None:
    """Pass@k with 95% CI bands, the paired difference to GRPO, and every training trajectory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from PIL import Image

    fig, axes = plt.subplots(3, 4, figsize=(20, 12))
    colors = {v: plt.cm.tab10(i % 10) for i, v in enumerate(summary["variants"])}

    def band(ax, name: str, stats: dict) -> None:
        ks = [int(k) for k in stats]
        mean = [s["mean"] for s in stats.values()]
        ci = [s["ci95"] or 0.0 for s in stats.values()]
        ax.plot(ks, mean, marker="o", ms=3, color=colors[name], label=name)
        ax.fill_between(ks, [m - c for m, c in zip(mean, ci)], [m + c for m, c in zip(mean, ci)], color=colors[name],
                        alpha=0.15, lw=0)

    ax = axes[0, 0]
    for name, res in summary["variants"].items():
        band(ax, name, res["pass_at_k"])
    ax.set(ylabel="Pass@k (held-out problems)", title="Pass@k, mean and 95% CI over seeds", ylim=(0, 1.02))
    ax = axes[0, 1]
    for pair, res in summary["paired_differences"].items():
        band(ax, pair.split(" - ")[0], res["pass_at_k"])
    ax.axhline(0, color="k", lw=0.8)
    ax.set(ylabel=f"Pass@k(variant) - Pass@k({REFERENCE})", title=f"Paired difference to {REFERENCE}, 95% CI")
    for ax in axes[0, :2]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k (samples)")
        ax.grid(alpha=0.3)
    for ax, (key, title) in zip(axes.flat[2:], TRAJECTORY_KEYS.items()):
        for name, stab in summary["stability"].items():
            if key in stab["trajectories"]:
                ax.plot(stab["trajectories"][key], color=colors[name], label=name, lw=1)
        ax.set(xlabel="RL step", title=f"{title} (mean over seeds)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)  # a 256-colour palette keeps it < 200 KB


def fmt(stats: dict | None, digits: int = 3, signed: bool = False) -> str:
    if stats is None:
        return "–"
    mean = f"{stats['mean']:+.{digits}f}" if signed else f"{stats['mean']:.{digits}f}"
    return mean if stats["ci95"] is None else f"{mean} ± {stats['ci95']:.{digits}f}"


def ci_sign(stats: dict) -> int:
    """+1 if the 95% CI lies above zero, -1 if below, 0 if it includes zero (or there is no CI)."""
    if stats["ci95"] is None:
        return 0
    return 1 if stats["mean"] - stats["ci95"] > 0 else -1 if stats["mean"] + stats["ci95"] < 0 else 0


def negate(stats: dict) -> dict:
    return {**stats, "mean": 0.0 - stats["mean"], "values": [0.0 - x for x in stats["values"]]}  # never -0.0


def ci_words(stats: dict) -> str:
    if stats["ci95"] is None:
        return "there is no CI (one seed)"
    return {1: "its 95% CI lies above zero", -1: "its 95% CI lies below zero", 0: "its 95% CI includes zero"}[ci_sign(stats)]


def claims(summary: dict) -> list[str]:
    """One sentence per claim, each worded from the signs of the paired 95% CIs."""
    v, paired, k = summary["variants"], summary["paired_differences"], str(summary["ks"][-1])
    pk = lambda name, kk=k: fmt(v[name]["pass_at_k"][kk])
    out = []
    if "base" in v and REFERENCE in v:
        d = paired[f"base - {REFERENCE}"]["pass_at_k"][k]
        verdict = {1: "Concentration is reproduced", -1: "Concentration is not reproduced (GRPO gains coverage)",
                   0: "Concentration is not established at this budget"}[ci_sign(d)]
        gain = negate(paired[f"base - {REFERENCE}"]["pass_at_k"]["1"])
        out.append(f"**Concentration.** {verdict}: Pass@{k} is {pk('base')} for the base and {pk(REFERENCE)} for GRPO; "
                   f"base − GRPO = {fmt(d, signed=True)} and {ci_words(d)}. For reference, GRPO − base at "
                   f"Pass@1 is {fmt(gain, signed=True)}.")
    if "reco" in v and REFERENCE in v:
        d = paired[f"reco - {REFERENCE}"]["pass_at_k"][k]
        verdict = {1: "ReCo recovers coverage", -1: "ReCo loses coverage relative to GRPO",
                   0: "ReCo does not measurably change coverage relative to GRPO"}[ci_sign(d)]
        gap = ""
        if "base" in v and ci_sign(d) == 1 and ci_sign(paired[f"base - {REFERENCE}"]["pass_at_k"][k]) == 1:
            share = d["mean"] / paired[f"base - {REFERENCE}"]["pass_at_k"][k]["mean"]
            gap = f" That is {share:.0%} of the base − GRPO gap, in mean."
        out.append(f"**Coverage.** {verdict}: Pass@{k} is {pk('reco')} for ReCo and {pk(REFERENCE)} for GRPO; ReCo − GRPO "
                   f"= {fmt(d, signed=True)} and {ci_words(d)}.{gap}")
        d1 = paired[f"reco - {REFERENCE}"]["pass_at_k"]["1"]
        verdict = {1: "ReCo raises Pass@1 above GRPO's", -1: "ReCo gives back part of GRPO's Pass@1",
                   0: "Pass@1 is not distinguishable from GRPO's at this number of seeds"}[ci_sign(d1)]
        out.append(f"**Pass@1.** {verdict}: {pk('reco', '1')} for ReCo and {pk(REFERENCE, '1')} for GRPO; ReCo − GRPO = "
                   f"{fmt(d1, signed=True)} and {ci_words(d1)}.")
    diff = lambda name, kk=k: paired[f"{name} - {REFERENCE}"]["pass_at_k"][kk]
    singles = [name for name in SINGLE_FIXES if name in v]
    if not singles:
        out.append("**Which fix does the work.** Not answered yet: no single-fix variant (reco-response, reco-token) "
                   "was run in this study.")
    else:
        up = [name for name in singles if ci_sign(diff(name)) == 1]
        if not up:
            verdict = ("Neither fix alone measurably raises" if len(singles) == 2 else
                       f"The {SINGLE_FIXES[singles[0]]} fix alone does not measurably raise")
            verdict += f" Pass@{k} over GRPO"
            if "reco" in v and ci_sign(diff("reco")) == 1:
                verdict += f"; only the two together clear zero (ReCo − GRPO = {fmt(diff('reco'), signed=True)})"
        else:
            fixes = " and the ".join(f"{SINGLE_FIXES[name]} fix" for name in up)
            verdict = f"The {fixes} alone raise{'s' * (len(up) == 1)} Pass@{k} over GRPO"
        parts = "; ".join(f"{name} − GRPO = {fmt(diff(name), signed=True)} ({ci_words(diff(name))})" for name in singles)
        out.append(f"**Which fix does the work.** {verdict}: at Pass@{k}, {parts}.")
    switches = [name for name in v if name not in ("base", REFERENCE, "reco", *SINGLE_FIXES)]
    if switches:
        flags = lambda name: " ".join(VARIANTS[name][1]) if name in VARIANTS else name
        up = [f"{name} (`{flags(name)}`, {fmt(diff(name), signed=True)})" for name in switches if ci_sign(diff(name)) == 1]
        cost = [f"{name} ({fmt(diff(name, '1'), signed=True)})" for name in switches if ci_sign(diff(name, "1")) == -1]
        n_tests = len([name for name in v if name not in ("base", REFERENCE)])
        out.append(f"**Other settings of ReCo's terms.** Pass@{k} above GRPO's with a 95% CI above zero: "
                   f"{', '.join(up) if up else 'none'}; Pass@1 below GRPO's with a CI below zero: "
                   f"{', '.join(cost) if cost else 'none'}. With {n_tests} variants compared to GRPO at 95% each, "
                   f"about {0.05 * n_tests:.1f} of them would clear zero by chance alone, so a single such result is a "
                   f"lead for a larger study, not a finding.")
    diverged = [f"{name} (seed{'s' * (st['n_diverged'] > 1)} "
                f"{', '.join(str(s) for s, f in st['divergence'].items() if f['diverged'])})"
                for name, st in summary["stability"].items() if st["n_diverged"]]
    out.append(f"**Stability.** Diverged seeds (non-finite value, non-finite stop, or reward collapse > 50%): "
               f"{', '.join(diverged) if diverged else 'none'}.{swap_words(summary)}")
    return out


def swap_words(summary: dict) -> str:
    """What the ratio swap did to rho and the gradient norm, GRPO against ReCo ("" if either is missing)."""
    st = summary["stability"]
    if not {"reco", REFERENCE} <= set(st):
        return ""
    cfg = summary["study"]["config"]
    g, r = st[REFERENCE]["extremes"], st["reco"]["extremes"]
    rho = "" if r["rho_max"] is None else (f" ReCo's largest ρ over all seeds and steps was {r['rho_max']:.2f} "
                                           f"(cap {cfg['variance_cap']:g}).")
    return (f"{rho} Mean gradient norm before clipping: {g['grad_norm_mean']:.2f} for GRPO and {r['grad_norm_mean']:.2f} "
            f"for ReCo; a step's mean norm exceeded the clip ({cfg['grad_clip']:g}) on {g['grad_clip_active_frac']:.0%} "
            f"and {r['grad_clip_active_frac']:.0%} of their logged steps.")


def render_readme(summary: dict, image: str = "../results/cpu_study.png") -> str:
    """The docs/results.md block (the image path is relative to that page): setup line, table of mean ± 95% CI,
    paired differences and one sentence per claim."""
    cfg, study, ks = summary["study"]["config"], summary["study"], [str(k) for k in summary["ks"]]
    cols = [("pass_at_k", k, f"Pass@{k}", 3) for k in ks] + [
        (None, "mean_accuracy", "mean acc.", 3), (None, "distinct_correct", "distinct correct / problem", 2),
        (None, "solved_any", "solved ≥ 1", 3), (None, "entropy_final", "entropy", 3), (None, "kl_base_final", "KL to base", 4)]
    cell = lambda res, c, signed=False: fmt(res[c[0]][c[1]] if c[0] else res[c[1]], c[3], signed)
    head = "| " + " | ".join(c[2] for c in cols) + " |"
    rule = "|---" * (len(cols) + 1) + "|"
    lines = [
        "_Generated from the study's JSON by `python experiments/cpu_study.py --write-readme docs/results.md`; "
        "rerun it rather than editing._",
        "",
        f"Countdown (reco_mini defaults{' + ' + ' '.join(study['shared_flags']) if study['shared_flags'] else ''}): "
        f"{cfg['n_test']} held-out problems, n = {cfg['n_eval']} samples each; RL {cfg['steps']} steps × "
        f"{cfg['prompts_per_step']} prompts × G = {cfg['group_size']}, lr {cfg['lr']}, the same for every variant. "
        f"{len(study['seeds'])} seeds; one SFT base (seed 0), so seeds vary the RL run and the evaluation sampling, not "
        f"the base. Cells are mean ± 95% CI over seeds (t-distribution). Entropy and KL to the base are the mean of the "
        f"last {FINAL_STEPS} RL steps. Compute: {summary['wall_time_s']['total'] / 60:.1f} min summed over the runs "
        f"(runs overlap under --jobs).",
        "",
        "| variant " + head, rule,
    ]
    lines += [f"| {name} | " + " | ".join(cell(res, c) for c in cols) + " |" for name, res in summary["variants"].items()]
    lines += ["", f"Paired differences to {REFERENCE} (per seed, then mean ± 95% CI):", "", "| difference " + head, rule]
    lines += [f"| {pair} | " + " | ".join(cell(res, c, True) for c in cols) + " |"
              for pair, res in summary["paired_differences"].items()]
    lines += ["", *[f"- {c}" for c in claims(summary)], "", f"![Pass@k and training curves]({image})"]
    return "\n".join(lines)


def write_readme(path: Path, block: str) -> None:
    """Replace the text between the cpu-study markers (the markers stay)."""
    text = path.read_text()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        sys.exit(f"error: {path} has no '{BEGIN}' ... '{END}' markers")
    path.write_text(text[: i + len(BEGIN)] + "\n" + block + "\n" + text[j:])


# =============================================================================
# CLI
# =============================================================================

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", help=f"comma-separated subset of {', '.join(VARIANTS)} (default: all; --quick: "
                                      f"{','.join(QUICK_VARIANTS)})")
    p.add_argument("--seeds", type=int, help="seeds 0..N-1 (default 5; --quick: 2, the fewest that give a CI)")
    p.add_argument("--extra-args", default="", help="reco_mini flags for every run, e.g. \"--steps 40\"")
    p.add_argument("--quick", action="store_true", help="reco_mini's --quick budget: a smoke test, not a result")
    p.add_argument("--out", type=Path, help="study dir (default runs/cpu_study, --quick: runs/cpu_study_quick)")
    p.add_argument("--results", type=Path, help="summary JSON, PNG beside it (default results/cpu_study.json; "
                                                "--quick: <out>/cpu_study.json)")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (more than cores/jobs is slow)")
    p.add_argument("--write-readme", type=Path, help="fill this page's cpu-study markers (docs/results.md)")
    args = p.parse_args(argv)
    args.variants = (args.variants.split(",") if args.variants else QUICK_VARIANTS if args.quick else list(VARIANTS))
    args.seeds = args.seeds if args.seeds is not None else 2 if args.quick else 5
    args.out = args.out or Path("runs/cpu_study_quick" if args.quick else "runs/cpu_study")
    args.results = args.results or (args.out / "cpu_study.json" if args.quick else Path("results/cpu_study.json"))
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or args.seeds < 1 or args.jobs < 1 or args.threads < 1:
        p.error(f"unknown variants {unknown}" if unknown else "--seeds, --jobs and --threads must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Run what is missing, aggregate, write the JSON and PNG (and the README block). Returns the summary
    plus "ran"/"skipped" counts of this invocation (not saved)."""
    args = parse_args(argv)
    flags = (QUICK_FLAGS if args.quick else []) + shlex.split(args.extra_args)  # the later flag wins
    todo, skipped = [], 0
    for variant in args.variants:
        for seed in range(args.seeds):
            run_dir = args.out / variant / f"seed{seed}"
            cfg = asdict(run_config(variant, seed, flags, run_dir))  # also rejects bad --extra-args early
            done = run_dir / "result.json"
            if not done.exists():
                todo.append((variant, seed, run_dir))
                continue
            old = json.loads(done.read_text())["config"]
            stale = sorted(k for k in old.keys() | cfg.keys() if old.get(k) != cfg.get(k))
            if stale:
                sys.exit(f"error: {done} was run with other settings ({', '.join(stale)}); delete it or use another --out")
            skipped += 1
    run_all(todo, flags, args.jobs, args.threads)
    runs = {v: {s: json.loads((args.out / v / f"seed{s}" / "result.json").read_text()) for s in range(args.seeds)}
            for v in args.variants}
    logs = {v: {s: read_log(args.out / v / f"seed{s}") for s in range(args.seeds)} for v in args.variants}
    summary = finite_or_none(aggregate(runs, logs, flags))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(summary, indent=1, allow_nan=False))
    plot(summary, args.results.with_suffix(".png"))
    if args.write_readme:
        image = os.path.relpath(args.results.with_suffix(".png"), args.write_readme.resolve().parent)
        write_readme(args.write_readme, render_readme(summary, Path(image).as_posix()))
    print(f"ran {len(todo)}, skipped {skipped} finished; wrote {args.results} and {args.results.with_suffix('.png')}"
          f"{' and ' + str(args.write_readme) if args.write_readme else ''}")
    return {**summary, "ran": len(todo), "skipped": skipped}


if __name__ == "__main__":  # bad input (a malformed or missing file, a bad reco_mini flag): one line, exit code 2
    from reco import cli

    cli.run_entry_point("cpu_study.py", main, (rm.ConfigError, json.JSONDecodeError, FileNotFoundError))
