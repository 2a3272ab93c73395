"""experiments/norm_study.py: does ReCo's normalisation explain its null? (issue 52; pre-registration in
docs/norm_study.md, written before any run).

ReCo's response weights w_i = (1/m_i) / Z were normalised to mean 1 within each group (Z: the group's mean), so a group
of G copies of one likely answer keeps GRPO's total weight G. --occurrence-norm batch divides by the rollout batch's
mean instead, which lets weight leave concentrated prompts, as F-GRPO does. Six arms (ARMS) at two lrs (LRS), both
confirmatory, on 8 seeds no study has used (SEEDS), Countdown on the control study's committed base, 120 RL steps,
evaluated at the control study's steps (n = 256), the test split:

  base         the base's evaluation on the test split (the stall rule's reference)
  confirm      every arm at every lr on every seed, seed by seed (a partial study is balanced across arms)
  exploratory  F-GRPO at the paper's gamma (0.5), only after the confirmation and only within BUDGET_HOURS

The primary family (FAMILY, Holm): reco-batch - grpo, reco-positive-batch - grpo and reco-batch - reco at each lr, by
the control study's primary statistic, with its TOST margin; beside it the final-checkpoint gaps and the last-visit
reading. Secondary (SECONDARY, unadjusted): does F-GRPO's gain replicate, the pilot's negative, reco-positive-batch
against F-GRPO. Every run logs where its update goes (update_share_hard/mid/easy), plotted per arm. DEFAULT_RULE says,
before the runs, when the default normalisation changes.

  python experiments/norm_study.py --status            # runs done / planned, the projection, runs nothing
  nohup python experiments/norm_study.py --jobs 2 > runs/norm_study.log 2>&1 &      # start or resume
  python experiments/norm_study.py --aggregate-only --write-docs docs/results.md   # summary, plot, generated block
  python experiments/norm_study.py --quick             # smoke test: tiny model and budget
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import control_study as cs  # noqa: E402  (run_one: train through lab's hook, evaluating at the plan's steps)
import fork_study as fs  # noqa: E402  (stall rule, Fisher test, frontier band, intervals)
import long_study as ls  # noqa: E402  (the pool, run directories, the archive)
from analysis import finite_or_none, holm, summarize  # noqa: E402
from protocol import EQUIVALENCE_MARGIN, compare, measured_curve, write_block  # noqa: E402

ARMS = {  # arm -> (reco_mini method, extra flags): each a registered function and a flag value, never a copy
    "grpo": ("grpo", []),
    "f-grpo": ("f-grpo", []),  # gamma 1, as in the control study
    "reco": ("reco", []),  # group normalisation, ReCo's default before issue 52 (cs.run_one pins lab.STUDY_PINS)
    "reco-batch": ("reco", ["--occurrence-norm", "batch"]),
    "reco-positive-batch": ("reco", ["--occurrence-norm", "batch", "--occurrence-apply", "positive"]),
    "reco-response-batch": ("reco-response", ["--occurrence-norm", "batch"]),  # the response term, GRPO's ratio
}
EXPLORATORY = {"f-grpo-g0.5": ("f-grpo", ["--focal-gamma", "0.5"])}  # the F-GRPO paper's gamma (docs/design.md §3.4)
ALL_ARMS = ARMS | EXPLORATORY
REFERENCE, LRS, SEEDS = "grpo", (1e-4, 2e-4), tuple(range(700, 708))
STEPS, N_EVAL, K, EVAL_STEPS, EVAL_SEED_BASE = cs.STEPS, cs.N_EVAL, cs.K, cs.EVAL_STEPS, cs.EVAL_SEED_BASE
ALPHA, BUDGET_HOURS, STALL_AFTER = 0.05, 12.0, fs.STALL_AFTER
BASE_FILE = "results/control_study_base.pt"  # the control study's committed SFT base
FAMILY = [("reco-batch", "grpo"), ("reco-positive-batch", "grpo"), ("reco-batch", "reco")]  # at each lr
SECONDARY = [("f-grpo", "grpo"), ("reco-response-batch", "grpo"), ("reco-positive-batch", "f-grpo")]  # at each lr
EXPLORATORY_CONTRASTS = [("f-grpo-g0.5", "grpo"), ("f-grpo-g0.5", "f-grpo")]
SHARES = ("update_share_hard", "update_share_mid", "update_share_easy")
LOGGED = [*cs.LOGGED, "w_mean", *SHARES]
PRIMARY = cs.PRIMARY
FAMILY_RULE = (f"The six contrasts reco-batch - grpo, reco-positive-batch - grpo and reco-batch - reco, each at lr "
               f"{' and '.join(f'{lr:g}' for lr in LRS)} (both runs at the same lr), form one family: a one-sided paired "
               f"t-test over the seeds on the primary statistic (H: > 0), Holm at alpha {ALPHA}, and a TOST at "
               f"+-{EQUIVALENCE_MARGIN}.")
DEFAULT_RULE = ("If a batch-normalised form (reco-batch or reco-positive-batch) is confirmed against grpo at both lrs, it "
                "becomes ReCo's default everywhere (--occurrence-norm batch, with --occurrence-apply positive for the "
                "second), and the README, docs/design.md §3.2 and the tutorial say why. Otherwise group stays the default, "
                "and the README says that the normalisation was tested and what the update shares show.")
BUDGET_RULE = (f"At most {BUDGET_HOURS:g} h summed over the runs. The exploratory arm runs after every confirmation run, "
               "only if the summed hours so far plus its projection fit in the budget.")
QUICK = dict(flags=["--quick", "--sft-steps", "30", "--sft-batch", "32", "--n-test", "8", "--prompts-per-step", "4",
                    "--hidden", "32", "--layers", "1"], steps=3, seeds=(700, 701), k="8", n_eval=8, eval_steps=(1, 3))
ARCHIVE_WHAT = "finished runs of experiments/norm_study.py (raw results; restored by its next start)"
BEGIN, END = "<!-- norm-study:begin -->", "<!-- norm-study:end -->"


# =============================================================================
# Specs and runs
# =============================================================================

def tag(plan: dict) -> dict:
    return {"base": plan["base_sha256"][:12]}


def base_specs(plan: dict) -> list[dict]:
    return [{"phase": "base", "arm": "base", "split": "test", "seed": 0} | tag(plan)]


def confirm_specs(plan: dict) -> list[dict]:
    """Seed by seed, so that a study stopped part-way has every arm on the same seeds."""
    return [{"phase": "confirm", "arm": a, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for s in plan["seeds"] for lr in plan["lrs"] for a in ARMS]


def exploratory_specs(plan: dict) -> list[dict]:
    return [{"phase": "exploratory", "arm": a, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for s in plan["seeds"] for lr in plan["lrs"] for a in EXPLORATORY]


def _run(spec: dict, plan: dict) -> dict:
    return cs.run_one(spec, plan, ls._CTX, arms=ALL_ARMS, logged=LOGGED)


def load_one(spec: dict, plan: dict) -> dict | None:
    results = ls.load_results([spec], plan)
    return results[0] if results else None


# =============================================================================
# Budget
# =============================================================================

def projection(plan: dict) -> dict:
    """Seconds per run of each arm, from the control study's committed confirmation runs (results/
    control_study_runs.jsonl.gz, lr 2e-4, the same task, base, steps and evaluations): grpo's for grpo, f-grpo's for
    both F-GRPO arms, and the slower of reco's and reco-positive's for every ReCo arm (each computes the same old
    statistics and weights); the summed hours of this plan."""
    with gzip.open(ROOT / "results" / "control_study_runs.jsonl.gz", "rt") as f:
        f.readline()
        runs = [json.loads(line) for line in f]
    seconds = {}
    for arm in ("grpo", "f-grpo", "reco", "reco-positive"):
        times = [r["wall_time_s"] for r in runs if r["spec"]["phase"] == "confirm" and r["spec"]["arm"] == arm
                 and r["spec"]["lr"] == 2e-4]
        seconds[arm] = sum(times) / len(times)
    per_arm = {a: seconds["grpo"] if a == "grpo" else seconds["f-grpo"] if a.startswith("f-grpo")
               else max(seconds["reco"], seconds["reco-positive"]) for a in ALL_ARMS}
    confirm = sum(per_arm[s["arm"]] for s in confirm_specs(plan)) / 3600
    exploratory = sum(per_arm[s["arm"]] for s in exploratory_specs(plan)) / 3600
    return {"s_per_run": per_arm, "source": "results/control_study_runs.jsonl.gz, confirmation runs at lr 2e-4",
            "confirm_hours": confirm, "exploratory_hours": exploratory, "budget_hours": BUDGET_HOURS,
            "projected_wall_hours_at_jobs_2": (confirm + exploratory) / 2}


def exploratory_check(plan: dict) -> str | None:
    """BUDGET_RULE: why the exploratory arm may not run yet, or None."""
    done = ls.load_results(confirm_specs(plan), plan)
    if len(done) < len(confirm_specs(plan)):
        return f"{len(done)} of {len(confirm_specs(plan))} confirmation runs have finished (it runs after them)"
    spent = sum(r["wall_time_s"] for r in done + ls.load_results(base_specs(plan), plan)) / 3600
    projected = projection(plan)["exploratory_hours"]
    if spent + projected > BUDGET_HOURS:
        return f"{spent:.2f} h spent + {projected:.2f} h projected exceeds the {BUDGET_HOURS:g} h budget"
    return None


def status(plan: dict) -> dict:
    out = {}
    for name, specs in (("base", base_specs(plan)), ("confirm", confirm_specs(plan)),
                        ("exploratory", exploratory_specs(plan))):
        out[name] = {"done": len(ls.load_results(specs, plan)), "planned": len(specs)}
    return out | {"projection": projection(plan), "exploratory_check": exploratory_check(plan)}


# =============================================================================
# Statistics and summary
# =============================================================================

def contrast(curves: dict, ones: dict, a: str, b: str, lr: float) -> dict:
    """a - b at lr: the primary statistic, the last-visit reading and the final checkpoints' Pass@k gap (compare),
    and the final Pass@1 gap (curves of Pass@1 against itself)."""
    x, y = fs.key(a, lr), fs.key(b, lr)
    row = {"name": f"{a} - {b} @ {lr:g}", "arm": a, "reference": b, "lr": lr}
    if x not in curves or y not in curves:
        return row | {"mean": None, "n": 0}
    c = compare(curves[x], curves[y], statistics=("primary", "final", "last_visit"))
    row |= {k: c["primary"][k] for k in ("per_seed", "n", "mean", "ci_low", "ci_high", "p_greater", "p_tost")}
    final_1 = compare(ones[x], ones[y], statistics=("final",))["final"]
    return row | {"final_pass_at_k": c["final"], "final_pass_at_1": final_1, "last_visit": c["last_visit"]}


def shares_by_step(runs: list[dict]) -> dict:
    """Per share, its mean over seeds at each step (None where no seed logged one), and its mean over steps and seeds."""
    out = {}
    for name in SHARES:
        rows = [r["logged"][name] for r in runs]
        steps = max(len(x) for x in rows)
        by_step = []
        for t in range(steps):
            values = [x[t] for x in rows if t < len(x) and x[t] is not None]
            by_step.append(sum(values) / len(values) if values else None)
        known = [v for x in rows for v in x if v is not None]
        out[name] = {"by_step": by_step, "mean": sum(known) / len(known) if known else None}
    return out


def default_decision(family: list[dict], partial: bool) -> dict:
    """DEFAULT_RULE on the family: which batch-normalised forms are confirmed against grpo at both lrs."""
    if partial:
        return {"rule": DEFAULT_RULE, "decided": False, "change": None, "confirmed_at_both_lrs": []}
    both = [a for a in ("reco-batch", "reco-positive-batch")
            if all(r.get("confirmed") for r in family if r["arm"] == a and r["reference"] == REFERENCE)]
    return {"rule": DEFAULT_RULE, "decided": True, "change": both[0] if both else None, "confirmed_at_both_lrs": both}


def aggregate(plan: dict, wall_s: float) -> dict:
    base = load_one(base_specs(plan)[0], plan)
    base_test = base["trajectory"][0]["pass_at_k"]["1"] if base else None
    confirm = ls.load_results(confirm_specs(plan), plan)
    explore = ls.load_results(exploratory_specs(plan), plan)
    curves, ones, runs_of, stalls = {}, {}, {}, {}
    for r in confirm + explore:
        key, seed = fs.key(r["spec"]["arm"], r["spec"]["lr"]), r["spec"]["seed"]
        curves.setdefault(key, {})[seed] = measured_curve(r["trajectory"], plan["k"])
        ones.setdefault(key, {})[seed] = measured_curve(r["trajectory"], "1")
        runs_of.setdefault(key, []).append(r)
        stalls.setdefault(key, {})[seed] = base_test is not None and fs.stalled(
            r["trajectory"], base_test, plan["stall_after"], r["stopped"])
    complete = {"base": base is not None, "confirm": len(confirm) == len(confirm_specs(plan)),
                "exploratory": len(explore) == len(exploratory_specs(plan))}
    partial = not (complete["base"] and complete["confirm"])
    family = [contrast(curves, ones, a, b, lr) for lr in plan["lrs"] for a, b in FAMILY]
    for row, adjusted in zip(family, holm([r.get("p_greater") for r in family])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    secondary = [contrast(curves, ones, a, b, lr) for lr in plan["lrs"] for a, b in SECONDARY]
    exploratory = [contrast(curves, ones, a, b, lr) for lr in plan["lrs"] for a, b in EXPLORATORY_CONTRASTS]
    arms = {}
    for key, runs in sorted(runs_of.items(), key=lambda kv: (list(ALL_ARMS).index(kv[1][0]["spec"]["arm"]),
                                                              kv[1][0]["spec"]["lr"])):
        finals = [r["trajectory"][-1]["pass_at_k"] for r in runs if r["trajectory"]]
        arms[key] = {"arm": runs[0]["spec"]["arm"], "lr": runs[0]["spec"]["lr"], "seeds": sorted(stalls[key]),
                     "stalled": sum(stalls[key].values()), "stopped": sum(bool(r["stopped"]) for r in runs),
                     "final_pass_at_1": summarize([f["1"] for f in finals]),
                     f"final_pass_at_{plan['k']}": summarize([f[plan["k"]] for f in finals]),
                     "shares": shares_by_step(runs),
                     "trajectory": [r["trajectory"] for r in sorted(runs, key=lambda r: r["spec"]["seed"])],
                     "wall_time_s": [r["wall_time_s"] for r in runs]}
    ref = {lr: arms.get(fs.key(REFERENCE, lr)) for lr in plan["lrs"]}
    for v in arms.values():
        g = ref.get(v["lr"])
        if g is not None and v["arm"] != REFERENCE:
            v["fisher_p_vs_grpo"] = fs.fisher_exact(v["stalled"], len(v["seeds"]) - v["stalled"], g["stalled"],
                                                    len(g["seeds"]) - g["stalled"])
    runs_all = ([base] if base else []) + confirm + explore
    return finite_or_none({
        "partial": partial, "complete": complete,
        "design": {"arms": ARMS, "exploratory_arms": EXPLORATORY, "reference": REFERENCE, "lrs": list(plan["lrs"]),
                   "seeds": list(plan["seeds"]), "steps": plan["steps"], "eval_steps": list(plan["eval_steps"]),
                   "n_eval": plan["n_eval"], "k": int(plan["k"]), "base_file": BASE_FILE,
                   "base_sha256": plan["base_sha256"], "flags": plan["flags"], "primary": cs.in_family(PRIMARY, plan),
                   "eval_seed": f"{EVAL_SEED_BASE} + RL seed", "alpha": ALPHA, "equivalence_margin": EQUIVALENCE_MARGIN,
                   "stall_rule": fs.STALL_RULE, "family_rule": FAMILY_RULE, "default_rule": DEFAULT_RULE,
                   "budget_rule": BUDGET_RULE},
        "base": base["trajectory"][0] if base else None,
        "family": family, "secondary": secondary, "exploratory": exploratory, "arms": arms,
        "default": default_decision(family, partial),
        "compute": {"runs": len(runs_all), "runs_planned": 1 + len(confirm_specs(plan)),
                    "exploratory_runs_planned": len(exploratory_specs(plan)),
                    "run_time_s": round(sum(r["wall_time_s"] for r in runs_all), 1),
                    "this_invocation_wall_s": round(wall_s, 1), "budget_hours": BUDGET_HOURS,
                    "projection": None if plan.get("quick") else projection(plan)},
    })


# =============================================================================
# Plot and block
# =============================================================================

def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k, lrs = summary["design"]["k"], summary["design"]["lrs"]
    fig, axes = plt.subplots(2, len(lrs), figsize=(7 * len(lrs), 9), squeeze=False)
    arms = list(summary["design"]["arms"]) + list(summary["design"]["exploratory_arms"])
    for col, lr in enumerate(lrs):
        ax, bx = axes[0][col], axes[1][col]
        for v in summary["arms"].values():
            if v["lr"] != lr:
                continue
            color = f"C{arms.index(v['arm'])}"
            xs, mean, lo, hi = fs.frontier_band([measured_curve(t, str(k)) for t in v["trajectory"]])
            ax.plot(xs, mean, color=color, label=f"{v['arm']} ({len(v['seeds'])} seeds)")
            ax.fill_between(xs, lo, hi, color=color, alpha=0.1)
            for name, style in zip(SHARES, (":", "--", "-")):
                ys = v["shares"][name]["by_step"]
                bx.plot(range(len(ys)), [float("nan") if y is None else y for y in ys], style, color=color, lw=1,
                        label=f"{v['arm']}: {name.removeprefix('update_share_')}" if name == SHARES[-1] else None)
        if summary["base"]:
            b = summary["base"]["pass_at_k"]
            ax.plot([b["1"]], [b[str(k)]], "k*", ms=10, label="base")
        ax.set(xlabel="Pass@1 (test)", ylabel=f"Pass@{k} (test)", title=f"Mean frontier, lr {lr:g} (band: 95% CI)")
        ax.legend(fontsize=7)
        bx.set(xlabel="RL step", ylabel="share of sum |w A|",
               title=f"Where the update goes, lr {lr:g}: easy (solid), mid (dashed), hard (dotted)")
        bx.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _reading(row: dict) -> str:
    if row.get("mean") is None:
        return "not estimable (no paired seeds)"
    if row.get("confirmed"):
        return "confirmed (Holm p < 0.05)"
    if row.get("equivalent"):
        return f"equivalent to zero within ±{EQUIVALENCE_MARGIN} (TOST)"
    if (row.get("ci_high") or 0) < 0:
        return "worse: its 95% CI lies below zero"
    return "a null, not evidence of no effect"


def claims(summary: dict) -> list[str]:
    """The answer, by rule, then each contrast's reading."""
    out = []
    if summary["partial"]:
        out.append("The study is partial: no answer is drawn from it yet.")
    else:
        d = summary["default"]
        out.append(f"**The default changes:** {d['change']} is confirmed against grpo at both lrs, so it becomes ReCo's "
                   "default." if d["change"] else
                   "**The default stays group:** no batch-normalised form of ReCo is confirmed against grpo at both lrs "
                   "(DEFAULT_RULE), so the normalisation does not explain ReCo's null here.")
    for row in summary["family"]:
        if row.get("mean") is None:
            out.append(f"{row['name']}: not estimable yet.")
            continue
        holm_p = "–" if row["p_holm"] is None else f"{row['p_holm']:.3g}"
        out.append(f"{row['name']} = {fs._interval(row)} over {row['n']} seeds, Holm p {holm_p}: "
                   f"{_reading(row)}; final checkpoints Pass@1 {fs._interval(row['final_pass_at_1'])}, "
                   f"Pass@{summary['design']['k']} {fs._interval(row['final_pass_at_k'])}; last-visit reading "
                   f"{fs._interval(row['last_visit'])}.")
    return out


def render_block(summary: dict, results_path: str, png: str) -> str:
    d, c, k = summary["design"], summary["compute"], summary["design"]["k"]
    out = [f"_Generated from `{results_path}` by `python experiments/norm_study.py --aggregate-only --write-docs "
           "<this file>`; rerun it rather than editing._"]
    if summary["partial"]:
        out.append(f"\n**PARTIAL: the study has not finished.** Finished runs: {c['runs']} of {c['runs_planned']} "
                   "(and the exploratory arm's); no finding is drawn from it until it finishes.")
    out.append(f"\nCountdown on the control study's base, {d['steps']} RL steps, evaluated at steps {d['eval_steps']} "
               f"(n = {d['n_eval']}, primary k = {k}); lrs {d['lrs']}, seeds {d['seeds']}, test split. "
               f"Pre-registered in [norm_study.md](norm_study.md).")
    if summary["base"]:
        b = summary["base"]["pass_at_k"]
        out.append(f"The base before RL: Pass@1 {b['1']:.3f}, Pass@{k} {b[str(k)]:.3f}.")
    if summary["arms"]:
        out.append(f"\n![Frontiers and where the update goes]({png})")
    out.append("\n**Answer and family** (declared before the runs; Holm over the six contrasts; TOST ±0.02):\n")
    out += [f"- {line}" for line in claims(summary)]
    rows = [r for r in summary["secondary"] if r.get("mean") is not None]
    if rows:
        out.append("\nSecondary (declared before the runs, unadjusted):\n")
        out += [f"- {r['name']}: {fs._interval(r)} over {r['n']} seeds; final checkpoints Pass@1 "
                f"{fs._interval(r['final_pass_at_1'])}, Pass@{k} {fs._interval(r['final_pass_at_k'])}" for r in rows]
    rows = [r for r in summary["exploratory"] if r.get("mean") is not None]
    if rows:
        out.append("\nExploratory (F-GRPO at the paper's γ = 0.5; unadjusted, no test):\n")
        out += [f"- {r['name']}: {fs._interval(r)} over {r['n']} seeds" for r in rows]
    if summary["arms"]:
        out.append(f"\n| arm @ lr | runs | stalled | stopped | final Pass@1 | final Pass@{k} | update share hard / mid / "
                   "easy (mean over steps) |")
        out.append("|---|---|---|---|---|---|---|")
        for key, v in summary["arms"].items():
            shares = " / ".join("–" if v["shares"][s]["mean"] is None else f"{v['shares'][s]['mean']:.2f}" for s in SHARES)
            out.append(f"| {key} | {len(v['seeds'])} | {v['stalled']} | {v['stopped']} | "
                       f"{v['final_pass_at_1']['mean']:.3f} | {v[f'final_pass_at_{k}']['mean']:.3f} | {shares} |")
    p = c.get("projection") or {}
    out.append(f"\nCompute: {c['runs']} runs, {c['run_time_s'] / 3600:.2f} h summed over the runs' own wall times, "
               f"against a budget of {c['budget_hours']:g} h" + (
                   f" (projected before the runs: {p['confirm_hours']:.2f} h for the confirmation, "
                   f"{p['exploratory_hours']:.2f} h for the exploratory arm)" if p else "") + ".")
    return "\n".join(out)


# =============================================================================
# main
# =============================================================================

def make_plan(args: argparse.Namespace) -> dict:
    plan = {"out": args.out, "flags": [], "steps": STEPS, "lrs": LRS, "seeds": SEEDS, "k": K, "n_eval": N_EVAL,
            "eval_steps": EVAL_STEPS, "where_steps": (), "stall_after": STALL_AFTER, "base_sha256": None,
            "task_flags": [], "sft_form_prior": cs.SFT_FORM_PRIOR, "quick": False}
    return plan | (QUICK | {"quick": True, "stall_after": 1} if args.quick else {})


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="base,confirm,exploratory", help="comma-separated phases to run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/norm; with --quick, runs/norm_quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/norm_study.json; --quick: in <out>)")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the norm-study markers")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--status", action="store_true", help="print runs done / planned and the projection")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and seeds")
    args = parser.parse_args(argv)
    args.out = args.out or ("runs/norm_quick" if args.quick else "runs/norm")
    results = Path(args.results or (f"{args.out}/norm_study.json" if args.quick else "results/norm_study.json"))
    archive = results.with_name(results.stem + "_runs.jsonl.gz")
    plan, start = make_plan(args), time.time()
    torch.set_num_threads(args.threads)
    reading = args.aggregate_only or args.status
    base_file = None if args.quick else ROOT / BASE_FILE
    if reading and ls.archived_base(archive):
        plan["base_sha256"] = ls.archived_base(archive)
    else:  # a run, or a summary before the first archive: the committed base's digest
        plan["base_sha256"] = ls.base_sha256(ls.load_context(plan["flags"], base_file, task_flags=[])["base"])
    restored = ls.restore_archive(archive, plan, plan["base_sha256"])
    if restored:
        print(f"restored {restored} finished runs")
    if args.status:
        report = status(plan)
        print(json.dumps(report, indent=1))
        return report
    phases, ran = set(args.phases.split(",")), 0
    if not args.aggregate_only:
        for name, specs in (("base", base_specs(plan)), ("confirm", confirm_specs(plan))):
            if name in phases:
                ran += ls.run_all(specs, plan, args.jobs, args.threads, run=_run)
        if "exploratory" in phases:
            why = None if plan["quick"] else exploratory_check(plan)
            if why:
                print(f"norm_study.py: the exploratory arm does not run: {why} ({BUDGET_RULE})")
            else:
                ran += ls.run_all(exploratory_specs(plan), plan, args.jobs, args.threads, run=_run)
    summary = aggregate(plan, time.time() - start)
    summary["compute"]["runs_this_invocation"] = ran
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    specs = base_specs(plan) + confirm_specs(plan) + exploratory_specs(plan)
    ls.write_archive(archive, plan, specs, summary["partial"], plan["base_sha256"], what=ARCHIVE_WHAT)
    png = results.with_suffix(".png")
    if summary["arms"]:
        plot(summary, png)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_block(docs, render_block(summary, str(results), os.path.relpath(png, docs.parent)), BEGIN, END)
    print(f"wrote {results}" + (" (partial)" if summary["partial"] else "") + f"; {ran} runs this invocation")
    return summary


if __name__ == "__main__":
    main()
