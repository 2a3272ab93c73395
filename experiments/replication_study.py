"""experiments/replication_study.py: ReCo's default replicated and taken apart (issue 59; pre-registration in
docs/replication_study.md, written before any run).

The normalisation study (docs/norm_study.md) made batch-normalised, positive-only response weights ReCo's default:
w_i = (1/m_i) / (the mean of 1/m_j over the rollout batch) where A_i > 0, 1 elsewhere. This study replicates that on 8
seeds no study has used (SEEDS) at the same two lrs (LRS), and takes it apart with two ablations, on Countdown with the
control study's committed base, 120 RL steps, evaluated at the control study's steps (n = 256), the test split:

  grpo           the reference
  f-grpo         advantages x (1 - group success rate), gamma 1 as in the earlier studies
  reco           today's default (its flags are written out, so the arm does not move if the default does)
  reco-response  the default's response weights with GRPO's token ratio: does the token term add anything?
  reco-prompt    each A > 0 response gets the mean of the default weights over its group's A > 0 responses
                 (experiments/lab.py's --weight-pool prompt-mean): is the response-level structure doing anything?

The primary family (FAMILY, Holm over 2): reco - grpo at each lr, the replication. Secondary (SECONDARY, unadjusted):
reco - f-grpo with its TOST, reco - reco-response, reco - reco-prompt; beside each the final-checkpoint gaps and the
last-visit reading; leave-one-seed-out for the family; every arm's update shares. Exploratory: the normalisation
study's runs of the same three forms (grpo, f-grpo, reco-positive-batch) pooled with these over 16 seeds. DEFAULT_RULE
says, before the runs, whether the default stays.

  python experiments/replication_study.py --status            # runs done / planned, the projection, runs nothing
  nohup python experiments/replication_study.py --jobs 2 > runs/replication_study.log 2>&1 &      # start or resume
  python experiments/replication_study.py --aggregate-only --write-docs docs/results.md   # summary, plot, block
  python experiments/replication_study.py --quick             # smoke test: tiny model and budget
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
import norm_study as ns  # noqa: E402  (a contrast's readings, the update shares, the plot)
from analysis import finite_or_none, holm, summarize  # noqa: E402
from protocol import EQUIVALENCE_MARGIN, measured_curve, write_block  # noqa: E402

DEFAULT = ["--occurrence-norm", "batch", "--occurrence-apply", "positive"]  # ReCo's default since issue 52
ARMS = {  # arm -> (reco_mini method, extra flags); cs.run_one puts lab.STUDY_PINS (group / all) before these
    "grpo": ("grpo", []),
    "f-grpo": ("f-grpo", []),  # gamma 1
    "reco": ("reco", DEFAULT),
    "reco-response": ("reco-response", DEFAULT),
    "reco-prompt": ("reco", [*DEFAULT, "--weight-pool", "prompt-mean"]),
}
REFERENCE, LRS, SEEDS = "grpo", (1e-4, 2e-4), tuple(range(800, 808))
USED_SEEDS = frozenset({*range(0, 5), 10, 11, 20, 21, 40, 41, 60, 61, 62, *range(100, 110), 200, 201, 202, 300, 301, 302,
                        *range(400, 410), *range(500, 508), *range(700, 708)})  # every earlier study's RL seeds
STEPS, N_EVAL, K, EVAL_STEPS, EVAL_SEED_BASE = cs.STEPS, cs.N_EVAL, cs.K, cs.EVAL_STEPS, cs.EVAL_SEED_BASE
ALPHA, BUDGET_HOURS, STALL_AFTER = 0.05, 9.0, fs.STALL_AFTER
BASE_FILE = "results/control_study_base.pt"  # the control study's committed SFT base
FAMILY = [("reco", "grpo")]  # at each lr
SECONDARY = [("reco", "f-grpo"), ("reco", "reco-response"), ("reco", "reco-prompt")]  # at each lr, unadjusted
# The normalisation study's arms of the same forms (its reco-positive-batch ran today's default's flags), for the pool
EARLIER = {"grpo": "grpo", "f-grpo": "f-grpo", "reco-positive-batch": "reco"}
EARLIER_ARCHIVE = "results/norm_study_runs.jsonl.gz"
POOLED = [("reco", "grpo"), ("reco", "f-grpo")]  # at each lr, over both studies' seeds: exploratory
SHARES, PRIMARY = ns.SHARES, cs.PRIMARY
LOGGED = [*cs.LOGGED, "w_mean", *SHARES]
FAMILY_RULE = (f"The two contrasts reco - grpo at lr {' and '.join(f'{lr:g}' for lr in LRS)} (both runs at the same lr) "
               f"form one family: a one-sided paired t-test over the seeds on the primary statistic (H: > 0), Holm at "
               f"alpha {ALPHA}, and a TOST at +-{EQUIVALENCE_MARGIN}.")
DEFAULT_RULE = ("If reco - grpo is confirmed at one lr or at both, ReCo's default (--occurrence-norm batch "
                "--occurrence-apply positive) stays. Otherwise it goes back to --occurrence-norm group --occurrence-apply "
                "all everywhere (reco_mini, reco_scaled, TRL, verl, the configs), and the README, docs/design.md §3.2 and "
                "the tutorial say that the normalisation study's gain did not replicate.")
BUDGET_RULE = f"At most {BUDGET_HOURS:g} h summed over the runs."
QUICK = dict(flags=["--quick", "--sft-steps", "30", "--sft-batch", "32", "--n-test", "8", "--prompts-per-step", "4",
                    "--hidden", "32", "--layers", "1"], steps=3, seeds=(800, 801), k="8", n_eval=8, eval_steps=(1, 3))
ARCHIVE_WHAT = "finished runs of experiments/replication_study.py (raw results; restored by its next start)"
BEGIN, END = "<!-- replication-study:begin -->", "<!-- replication-study:end -->"


# =============================================================================
# Specs, runs and budget
# =============================================================================

def tag(plan: dict) -> dict:
    return {"base": plan["base_sha256"][:12]}


def base_specs(plan: dict) -> list[dict]:
    return [{"phase": "base", "arm": "base", "split": "test", "seed": 0} | tag(plan)]


def confirm_specs(plan: dict) -> list[dict]:
    """Seed by seed, so that a study stopped part-way has every arm on the same seeds."""
    return [{"phase": "confirm", "arm": a, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for s in plan["seeds"] for lr in plan["lrs"] for a in ARMS]


def _run(spec: dict, plan: dict) -> dict:
    return cs.run_one(spec, plan, ls._CTX, arms=ARMS, logged=LOGGED)


def projection(plan: dict) -> dict:
    """Seconds per run from the control study's committed confirmation runs at lr 2e-4 (the same task, base, steps and
    evaluations), as the normalisation study projected: grpo's, f-grpo's, and for every ReCo arm the slower of reco's and
    reco-positive's (each computes the same old statistics and weights); the summed hours of this plan."""
    with gzip.open(ROOT / "results" / "control_study_runs.jsonl.gz", "rt") as f:
        f.readline()
        runs = [json.loads(line) for line in f]
    seconds = {}
    for arm in ("grpo", "f-grpo", "reco", "reco-positive"):
        times = [r["wall_time_s"] for r in runs if r["spec"]["phase"] == "confirm" and r["spec"]["arm"] == arm
                 and r["spec"]["lr"] == 2e-4]
        seconds[arm] = sum(times) / len(times)
    per_arm = {a: seconds[a] if a in ("grpo", "f-grpo") else max(seconds["reco"], seconds["reco-positive"]) for a in ARMS}
    hours = sum(per_arm[s["arm"]] for s in confirm_specs(plan)) / 3600
    return {"s_per_run": per_arm, "source": "results/control_study_runs.jsonl.gz, confirmation runs at lr 2e-4",
            "confirm_hours": hours, "budget_hours": BUDGET_HOURS, "projected_wall_hours_at_jobs_2": hours / 2}


def status(plan: dict) -> dict:
    out = {name: {"done": len(ls.load_results(specs, plan)), "planned": len(specs)}
           for name, specs in (("base", base_specs(plan)), ("confirm", confirm_specs(plan)))}
    return out | {"projection": projection(plan)}


# =============================================================================
# Statistics
# =============================================================================

def curves_of(runs: list[dict], k: str, rename: dict | None = None) -> tuple[dict, dict]:
    """Each run's measured Pass@k and Pass@1 paths, keyed by arm@lr (arms renamed by `rename`, others dropped), then
    seed."""
    curves, ones = {}, {}
    for r in runs:
        arm = r["spec"]["arm"] if rename is None else rename.get(r["spec"]["arm"])
        if arm is None:
            continue
        key, seed = fs.key(arm, r["spec"]["lr"]), r["spec"]["seed"]
        curves.setdefault(key, {})[seed] = measured_curve(r["trajectory"], k)
        ones.setdefault(key, {})[seed] = measured_curve(r["trajectory"], "1")
    return curves, ones


def family_rows(curves: dict, ones: dict, lrs) -> list[dict]:
    """FAMILY at each lr, Holm-adjusted, with its readings (confirmed, equivalent)."""
    rows = [ns.contrast(curves, ones, a, b, lr) for lr in lrs for a, b in FAMILY]
    for row, adjusted in zip(rows, holm([r.get("p_greater") for r in rows])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    return rows


def leave_one_seed_out(curves: dict, ones: dict, lrs) -> list[dict]:
    """The family again with each seed left out: per left-out seed, each contrast's mean and Holm p (over the family)."""
    seeds = sorted({s for v in curves.values() for s in v})
    out = []
    for left in seeds:
        kept_curves, kept_ones = ({key: {s: c for s, c in v.items() if s != left} for key, v in d.items()}
                                  for d in (curves, ones))
        rows = family_rows(kept_curves, kept_ones, lrs)
        out.append({"left_out": left, "rows": [{"name": r["name"], "mean": r.get("mean"), "p_holm": r.get("p_holm"),
                                                "confirmed": r.get("confirmed")} for r in rows]})
    return out


def earlier_runs(path: Path, base_sha256: str | None) -> tuple[list[dict], str | None]:
    """The normalisation study's archived confirmation runs, or why they cannot be pooled (another base)."""
    if not path.exists():
        return [], f"{path} is not here"
    with gzip.open(path, "rt") as f:
        header = json.loads(f.readline())
        runs = [json.loads(line) for line in f]
    if base_sha256 is not None and header.get("base_sha256") != base_sha256:
        return [], f"{path} was trained from another base ({str(header.get('base_sha256'))[:12]})"
    return [r for r in runs if r["spec"]["phase"] == "confirm"], None


def pooled(curves: dict, ones: dict, earlier: list[dict], k: str, lrs) -> list[dict]:
    """POOLED at each lr over this study's seeds and the earlier study's (disjoint seeds): exploratory, unadjusted."""
    old_curves, old_ones = curves_of(earlier, k, rename=EARLIER)
    both_curves = {key: old_curves.get(key, {}) | curves.get(key, {}) for key in {*curves, *old_curves}}
    both_ones = {key: old_ones.get(key, {}) | ones.get(key, {}) for key in {*ones, *old_ones}}
    return [ns.contrast(both_curves, both_ones, a, b, lr) | {"pooled": True} for lr in lrs for a, b in POOLED]


def default_decision(family: list[dict], partial: bool) -> dict:
    """DEFAULT_RULE on the family: the lrs at which reco - grpo is confirmed."""
    if partial:
        return {"rule": DEFAULT_RULE, "decided": False, "stays": None, "confirmed_at": []}
    at = [r["lr"] for r in family if r.get("confirmed")]
    return {"rule": DEFAULT_RULE, "decided": True, "stays": bool(at), "confirmed_at": at}


def aggregate(plan: dict, wall_s: float, earlier_path: Path) -> dict:
    base = ns.load_one(base_specs(plan)[0], plan)
    base_test = base["trajectory"][0]["pass_at_k"]["1"] if base else None
    confirm = ls.load_results(confirm_specs(plan), plan)
    curves, ones = curves_of(confirm, plan["k"])
    runs_of, stalls = {}, {}
    for r in confirm:
        key = fs.key(r["spec"]["arm"], r["spec"]["lr"])
        runs_of.setdefault(key, []).append(r)
        stalls.setdefault(key, {})[r["spec"]["seed"]] = base_test is not None and fs.stalled(
            r["trajectory"], base_test, plan["stall_after"], r["stopped"])
    complete = {"base": base is not None, "confirm": len(confirm) == len(confirm_specs(plan))}
    partial = not all(complete.values())
    family = family_rows(curves, ones, plan["lrs"])
    secondary = [ns.contrast(curves, ones, a, b, lr) for lr in plan["lrs"] for a, b in SECONDARY]
    for row in secondary:
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    earlier, why_not = earlier_runs(earlier_path if earlier_path.is_absolute() else ROOT / earlier_path,
                                    plan["base_sha256"])
    arms = {}
    for key, runs in sorted(runs_of.items(), key=lambda kv: (list(ARMS).index(kv[1][0]["spec"]["arm"]),
                                                              kv[1][0]["spec"]["lr"])):
        finals = [r["trajectory"][-1]["pass_at_k"] for r in runs if r["trajectory"]]
        arms[key] = {"arm": runs[0]["spec"]["arm"], "lr": runs[0]["spec"]["lr"], "seeds": sorted(stalls[key]),
                     "stalled": sum(stalls[key].values()), "stopped": sum(bool(r["stopped"]) for r in runs),
                     "final_pass_at_1": summarize([f["1"] for f in finals]),
                     f"final_pass_at_{plan['k']}": summarize([f[plan["k"]] for f in finals]),
                     "shares": ns.shares_by_step(runs),
                     "trajectory": [r["trajectory"] for r in sorted(runs, key=lambda r: r["spec"]["seed"])],
                     "wall_time_s": [r["wall_time_s"] for r in runs]}
    ref = {lr: arms.get(fs.key(REFERENCE, lr)) for lr in plan["lrs"]}
    for v in arms.values():
        g = ref.get(v["lr"])
        if g is not None and v["arm"] != REFERENCE:
            v["fisher_p_vs_grpo"] = fs.fisher_exact(v["stalled"], len(v["seeds"]) - v["stalled"], g["stalled"],
                                                    len(g["seeds"]) - g["stalled"])
    runs_all = ([base] if base else []) + confirm
    return finite_or_none({
        "partial": partial, "complete": complete,
        "design": {"arms": ARMS, "exploratory_arms": {}, "reference": REFERENCE, "lrs": list(plan["lrs"]),
                   "seeds": list(plan["seeds"]), "steps": plan["steps"], "eval_steps": list(plan["eval_steps"]),
                   "n_eval": plan["n_eval"], "k": int(plan["k"]), "base_file": BASE_FILE,
                   "base_sha256": plan["base_sha256"], "flags": plan["flags"], "primary": cs.in_family(PRIMARY, plan),
                   "eval_seed": f"{EVAL_SEED_BASE} + RL seed", "alpha": ALPHA, "equivalence_margin": EQUIVALENCE_MARGIN,
                   "stall_rule": fs.STALL_RULE, "family_rule": FAMILY_RULE, "default_rule": DEFAULT_RULE,
                   "budget_rule": BUDGET_RULE, "earlier_archive": EARLIER_ARCHIVE, "earlier_arms": EARLIER},
        "base": base["trajectory"][0] if base else None,
        "family": family, "secondary": secondary, "leave_one_seed_out": leave_one_seed_out(curves, ones, plan["lrs"]),
        "pooled": pooled(curves, ones, earlier, plan["k"], plan["lrs"]) if earlier else [], "pooled_not_possible": why_not,
        "arms": arms, "default": default_decision(family, partial),
        "compute": {"runs": len(runs_all), "runs_planned": 1 + len(confirm_specs(plan)),
                    "run_time_s": round(sum(r["wall_time_s"] for r in runs_all), 1),
                    "this_invocation_wall_s": round(wall_s, 1), "budget_hours": BUDGET_HOURS,
                    "projection": None if plan.get("quick") else projection(plan)},
    })


# =============================================================================
# Block
# =============================================================================

def _line(row: dict, k: int) -> str:
    return (f"{row['name']} = {fs._interval(row)} over {row['n']} seeds; final checkpoints Pass@1 "
            f"{fs._interval(row['final_pass_at_1'])}, Pass@{k} {fs._interval(row['final_pass_at_k'])}; last-visit "
            f"reading {fs._interval(row['last_visit'])}")


def loso_line(summary: dict) -> list[str]:
    """Per lr: how many left-out seeds keep the confirmation, and the largest Holm p."""
    out = []
    for i, row in enumerate(summary["family"]):
        ps = [d["rows"][i]["p_holm"] for d in summary["leave_one_seed_out"] if d["rows"][i]["p_holm"] is not None]
        if ps:
            kept = sum(p < ALPHA for p in ps)
            out.append(f"{row['name']}, leaving out one seed: confirmed in {kept} of {len(ps)} cases, Holm p "
                       f"{min(ps):.3g} to {max(ps):.3g}")
    return out


def render_block(summary: dict, results_path: str, png: str) -> str:
    d, c, k = summary["design"], summary["compute"], summary["design"]["k"]
    out = [f"_Generated from `{results_path}` by `python experiments/replication_study.py --aggregate-only --write-docs "
           "<this file>`; rerun it rather than editing._"]
    if summary["partial"]:
        out.append(f"\n**PARTIAL: the study has not finished.** Finished runs: {c['runs']} of {c['runs_planned']}; "
                   "no finding is drawn from it until it finishes.")
    out.append(f"\nCountdown on the control study's base, {d['steps']} RL steps, evaluated at steps {d['eval_steps']} "
               f"(n = {d['n_eval']}, primary k = {k}); lrs {d['lrs']}, seeds {d['seeds']}, test split. "
               f"Pre-registered in [replication_study.md](replication_study.md).")
    if summary["base"]:
        b = summary["base"]["pass_at_k"]
        out.append(f"The base before RL: Pass@1 {b['1']:.3f}, Pass@{k} {b[str(k)]:.3f}.")
    if summary["partial"]:  # no contrast is shown before the study ends: how far it has run, and nothing else
        done = ", ".join(f"{key} {len(v['seeds'])}" for key, v in summary["arms"].items())
        return "\n".join(out + [f"\nRuns finished per arm: {done or 'none'}.", _compute_line(c)])
    if summary["arms"]:
        out.append(f"\n![Frontiers and where the update goes]({png})")
    out.append("\n**The replication** (declared before the runs; Holm over the two lrs; TOST ±0.02):\n")
    dd = summary["default"]
    out.append("- **The default stays:** reco - grpo is confirmed at lr "
               f"{' and '.join(f'{lr:g}' for lr in dd['confirmed_at'])}." if dd["stays"] else
               "- **The default goes back to group / all:** reco - grpo is confirmed at neither lr (DEFAULT_RULE).")
    for row in summary["family"]:
        if row.get("mean") is None:
            out.append(f"- {row['name']}: not estimable yet.")
            continue
        holm_p = "–" if row["p_holm"] is None else f"{row['p_holm']:.3g}"
        out.append(f"- {_line(row, k)}; Holm p {holm_p}: {ns._reading(row)}.")
    out += [f"- {line}." for line in loso_line(summary)]
    rows = [r for r in summary["secondary"] if r.get("mean") is not None]
    if rows:
        out.append("\nSecondary (declared before the runs, unadjusted; TOST at ±0.02):\n")
        out += [f"- {_line(r, k)}; TOST p " + ("–" if r["p_tost"] is None else f"{r['p_tost']:.3g}") + "." for r in rows]
    rows = [r for r in summary["pooled"] if r.get("mean") is not None]
    if rows:
        out.append("\nExploratory: the normalisation study's runs of the same forms (its reco-positive-batch is reco "
                   "here) pooled with these, paired by seed:\n")
        out += [f"- {_line(r, k)}." for r in rows]
    elif summary.get("pooled_not_possible"):
        out.append(f"\nNot pooled with the normalisation study: {summary['pooled_not_possible']}.")
    if summary["arms"]:
        out.append(f"\n| arm @ lr | runs | stalled | stopped | final Pass@1 | final Pass@{k} | update share hard / mid / "
                   "easy (mean over steps) |")
        out.append("|---|---|---|---|---|---|---|")
        for key, v in summary["arms"].items():
            shares = " / ".join("–" if v["shares"][s]["mean"] is None else f"{v['shares'][s]['mean']:.2f}" for s in SHARES)
            out.append(f"| {key} | {len(v['seeds'])} | {v['stalled']} | {v['stopped']} | "
                       f"{v['final_pass_at_1']['mean']:.3f} | {v[f'final_pass_at_{k}']['mean']:.3f} | {shares} |")
    out.append(_compute_line(c))
    return "\n".join(out)


def _compute_line(c: dict) -> str:
    p = c.get("projection") or {}
    return (f"\nCompute: {c['runs']} runs, {c['run_time_s'] / 3600:.2f} h summed over the runs' own wall times, against "
            f"a budget of {c['budget_hours']:g} h" + (f" (projected before the runs: {p['confirm_hours']:.2f} h)" if p else "")
            + ".")


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
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/replication; --quick: runs/replication_quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/replication_study.json; --quick: in <out>)")
    parser.add_argument("--earlier", default=EARLIER_ARCHIVE, help="the normalisation study's archive, for the pooled figures")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the replication-study markers")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--status", action="store_true", help="print runs done / planned and the projection")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and seeds")
    args = parser.parse_args(argv)
    args.out = args.out or ("runs/replication_quick" if args.quick else "runs/replication")
    results = Path(args.results or (f"{args.out}/replication_study.json" if args.quick else "results/replication_study.json"))
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
    ran = 0
    if not args.aggregate_only:
        for specs in (base_specs(plan), confirm_specs(plan)):
            ran += ls.run_all(specs, plan, args.jobs, args.threads, run=_run)
    summary = aggregate(plan, time.time() - start, Path(args.earlier))
    summary["compute"]["runs_this_invocation"] = ran
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    ls.write_archive(archive, plan, base_specs(plan) + confirm_specs(plan), summary["partial"], plan["base_sha256"],
                     what=ARCHIVE_WHAT)
    png = results.with_suffix(".png")
    if summary["arms"] and not summary["partial"]:  # a partial study shows no curves either
        ns.plot(summary, png)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_block(docs, render_block(summary, str(results), os.path.relpath(png, docs.parent)), BEGIN, END)
    print(f"wrote {results}" + (" (partial)" if summary["partial"] else "") + f"; {ran} runs this invocation")
    return summary


if __name__ == "__main__":
    main()
