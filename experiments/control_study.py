"""experiments/control_study.py: can this CPU regime show a coverage gain for any method? The positive control (issue 42;
pre-registration in docs/control_study.md, written before any run).

Countdown, reco_mini's default task (TASK_RULE chose it: GRPO's collapse on validation is largest there), on a committed
SFT base (results/control_study_base.pt), eight arms (ARMS: GRPO, F-GRPO, four peers with published coverage gains, ReCo,
ReCo with positive-only weights), each one registered function and a flag of experiments/lab.py. Phases:

  base     the base's evaluation on the validation and test splits (the stall rule's reference)
  select   per arm, lr in LRS x SELECT_SEEDS on the validation split; SELECTION_RULE picks each arm's lr
  confirm  each arm at its selected lr and at grpo's selected lr on CONFIRM_SEEDS, test split; every contrast arm - grpo as
           one Holm family (FAMILY_RULE), a TOST at +-EQUIVALENCE_MARGIN, stalls (fork_study.STALL_RULE) per arm
  where    grpo and zero-success at grpo's lr on WHERE_SEEDS: Pass@k at WHERE_STEPS on the validation split and on the
           problems of the first step's batch: when the collapse happens, and whether it reaches problems never trained on

A second family (--family code-tiny; amendment 1, constants CODE): the same arms on code-tiny, grpo alone selecting
its lr and every arm at it, no where phase, its own Holm family; it runs after the first has finished, within what that
left of the budget (CODE_BUDGET_RULE).

Every run evaluates its policy at EVAL_STEPS (WHERE_STEPS in the where phase) through lab.train_rl's per-step hook, so the
early steps, where GRPO loses most of its Pass@256, are on every trajectory. Runs write <out>/base-<sha12>/.../result.json
atomically and the summary writes every finished run to results/control_study_runs.jsonl.gz, which the next start
restores: the study stops and resumes across sessions (experiments/long_study.py's pool and archive).

  python experiments/control_study.py --timing          # 5 RL steps per arm and an evaluation: the budget's inputs
  nohup python experiments/control_study.py --jobs 2 > runs/control_study.log 2>&1 &   # start or resume
  python experiments/control_study.py --status          # runs done / planned and the projected hours, runs nothing
  python experiments/control_study.py --aggregate-only --write-docs docs/results.md
  python experiments/control_study.py --quick           # smoke test: tiny model and budget
  python experiments/control_study.py --family code-tiny ...   # the same commands for the second family
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import fork_study as fs  # noqa: E402  (its stall rule, Fisher test, selection with stalls, frontier band)
import lab  # noqa: E402
import long_study as ls  # noqa: E402
from analysis import COLLAPSE_WINDOW, divergence, finite_or_none, holm, read_jsonl, summarize  # noqa: E402
from protocol import EQUIVALENCE_MARGIN, compare, measured_curve, write_block  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks.countdown import SFT_FORM_PRIOR  # noqa: E402

ARMS = {  # arm -> (reco_mini method, extra flags): each a registered function and a flag value, never a copy
    "grpo": ("grpo", []),
    "f-grpo": ("f-grpo", []),  # advantages x (1 - group success rate)^1 (arXiv 2602.06717)
    "pass-at-k": ("grpo", ["--advantage", "pass-at-k", "--pass-k", "4"]),  # arXiv 2508.10751, Eqs. 11-15
    "zero-success": ("grpo", ["--prompt-gate", "zero-success"]),  # a first-success gate under GRPO, not arXiv 2606.15455's
    "ucpo": ("grpo", ["--response-weight", "ucpo"]),  # arXiv 2605.00365, the authors' estimator, tau 0.2
    "simko": ("grpo", ["--token-ratio", "simko"]),  # arXiv 2510.14807, K 3, alpha 0.01, lambda 1.1, quantile 0.8
    "reco": ("reco", []),
    "reco-positive": ("reco", ["--occurrence-apply", "positive"]),  # the frontier study's one positive estimate
}
REFERENCE, RECO_ARMS, WHERE_ARMS = "grpo", ("reco", "reco-positive"), ("grpo", "zero-success")
TASK_FLAGS: list[str] = []  # reco_mini's default task: Countdown, its default model and SFT
LRS, SELECT_SEEDS, CONFIRM_SEEDS, WHERE_SEEDS = (2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4), (40, 41), tuple(range(500, 508)), (60, 61, 62)
STEPS, N_EVAL, K = 120, 256, "256"
EVAL_STEPS = (5, 10, 20, 40, 60, 80, 100, 120)
WHERE_STEPS = (0, 1, 2, 3, 4, 6, 8, 10, 15, 20, 30, 40, 60, 80, 100, 120)
EVAL_SEED_BASE, ALPHA, BUDGET_HOURS = ls.EVAL_SEED_BASE, 0.05, 20.0
TASK_RULE = ("Of the CPU tasks with a committed GRPO run on the validation split (countdown: the frontier study's long phase, "
             "grpo at its selected lr 1e-4, seeds 300-302; countdown-long: the fork study's selection runs of grpo at its "
             "selected lr 5e-5, seeds 20-21), choose the one with the largest collapse: the base's validation Pass@n minus "
             "grpo's at step 120, averaged over seeds, n the largest k both evaluated (256 and 128).")
SELECTION_RULE = fs.SELECTION_RULE.replace(str(list(fs.LRS)), str(list(LRS))).replace(
    f"the lowest lr, {min(fs.LRS)}", f"the lowest lr, {min(LRS)}").replace(f"Pass@{fs.K}", f"Pass@{K}")
FAMILY_RULE = (f"Every arm but grpo is compared with grpo at grpo's selected lr twice: at the arm's own selected lr and at "
               f"grpo's (one contrast when the two are equal). All these contrasts form one family: a one-sided paired "
               f"t-test over the confirmation seeds on the primary statistic (H: > 0), Holm at alpha {ALPHA}, and a TOST "
               f"at +-{EQUIVALENCE_MARGIN}. An arm is a positive control if one of its contrasts is confirmed.")
PRIMARY = f"the mean Pass@{K} gap over the Pass@1 range both runs' measured checkpoints cover (experiments/protocol.py)"
QUICK = dict(flags=["--quick", "--sft-steps", "30", "--sft-batch", "32", "--n-test", "8", "--prompts-per-step", "4",
                    "--hidden", "32", "--layers", "1"], steps=3, lrs=(2e-4, 4e-4), select=(40,), confirm=(500, 501),
             where=(60,), k="8", n_eval=8, eval_steps=(1, 3), where_steps=(0, 1, 2, 3), base_sha256=None)
ARCHIVE_WHAT = "finished runs of experiments/control_study.py (raw results; restored by its next start)"
KEEP = ("step", "pass_at_k", "counts", "mean_accuracy", "distinct_correct")
LOGGED = ["reward_mean", "pass_rate", "adv_abs_mean", "w_min", "w_max", "entropy", "kl_base", "grad_norm",
          "clip_frac_high", "clip_frac_low"]
BEGIN, END = "<!-- control-study:begin -->", "<!-- control-study:end -->"
# The second family (docs/control_study.md, amendment 1, written before any of its runs): the same arms on code-tiny,
# reco_mini's code task (issue 45), at its default model, SFT and 20 RL steps. Smaller: grpo alone selects its lr on the
# grid, and every arm runs at grpo's lr (no contrast is confounded with lr); no where phase; its own Holm family. It
# runs after the first family has finished, and only if its projection fits in what that family left of BUDGET_HOURS.
CODE = dict(family="code-tiny", task_flags=["--task", "code-tiny"], steps=20, eval_steps=(2, 5, 10, 20),
            n_eval=64, k="64", select_arms=[REFERENCE], where=(), where_steps=(), stall_after=10)
CODE_QUICK = dict(flags=["--quick", "--sft-steps", "30", "--n-test", "8", "--prompts-per-step", "4", "--hidden", "32",
                        "--layers", "1"], steps=3, lrs=(2e-4, 4e-4), select=(40,), confirm=(500, 501), k="8", n_eval=8,
                  eval_steps=(1, 3))
CODE_FAMILY_RULE = (f"Every arm but grpo is compared with grpo, both at grpo's selected lr. These contrasts form this "
                    f"family's own family: a one-sided paired t-test over the confirmation seeds on the primary statistic "
                    f"(H: > 0), Holm at alpha {ALPHA} within it, and a TOST at +-{EQUIVALENCE_MARGIN}.")
CODE_BUDGET_RULE = (f"The code-tiny family runs after the countdown family has finished, and only if its projected run "
                    f"hours (--timing --family code-tiny) fit in {BUDGET_HOURS:g} h minus the countdown family's summed "
                    "run hours; otherwise it does not run, and its block says so.")
# Amendment 2 (docs/control_study.md, written on 2026-12-05 after the partial results were seen, before any of its runs):
# exploratory, outside the family. The selection runs showed the lr alone moving grpo's primary statistic by +0.11 to
# +0.17, so a contrast at an arm's own lr against grpo at 2e-4 mostly measures the lr. grpo runs at each other selected
# lr on the confirmation seeds, and each arm at its own lr is compared with grpo at the same lr, unadjusted.
MATCHED_RULE = ("Exploratory (amendment 2, written after the partial results were seen): grpo also runs at every other "
                "arm's selected lr, on the confirmation seeds and split; each arm at its own selected lr is compared with "
                "grpo at that lr by the primary statistic (paired t CI, unadjusted, outside the family). It runs after "
                f"both families, only if its projection fits in what they left of {BUDGET_HOURS:g} h.")
FILES = {"countdown": ("control_study", "runs/control", (BEGIN, END)),
         "code-tiny": ("control_study_code", "runs/control-code", ("<!-- control-study-code:begin -->",
                                                                   "<!-- control-study-code:end -->"))}


# =============================================================================
# Specs and runs
# =============================================================================

def tag(plan: dict) -> dict:
    return {"base": plan["base_sha256"][:12]}


def base_specs(plan: dict) -> list[dict]:
    return [{"phase": "base", "arm": "base", "split": split, "seed": 0} | tag(plan) for split in ("val", "test")]


def select_specs(plan: dict) -> list[dict]:
    return [{"phase": "select", "arm": a, "lr": lr, "seed": s, "split": "val"} | tag(plan)
            for a in selecting(plan) for lr in plan["lrs"] for s in plan["select"]]


def selecting(plan: dict) -> list[str]:
    """The arms that select their lr on the grid: every arm, or grpo alone in a family run at grpo's lr (CODE)."""
    return plan.get("select_arms") or plan["arms"]


def arm_lrs(plan: dict, chosen: dict) -> dict:
    """Each arm's lr from the selection's choices: its own, or grpo's in a family run at grpo's lr ({} until known)."""
    if not plan.get("select_arms"):
        return chosen
    return {a: chosen[REFERENCE] for a in plan["arms"]} if REFERENCE in chosen else {}


def choose(plan: dict, base_val: float | None) -> dict:
    """SELECTION_RULE on the finished selection runs."""
    return fs.selection(ls.load_results(select_specs(plan), plan), plan, base_val, selecting(plan)) | {
        "rule": in_family(SELECTION_RULE, plan)}


def in_family(rule: str, plan: dict) -> str:
    """A rule's text with the family's stall step, RL steps and primary k (the second family's are 10, 20 and 64)."""
    return (rule.replace(f"step >= {fs.STALL_AFTER}", f"step >= {plan['stall_after']}")
            .replace(f"(step {STEPS})", f"(step {plan['steps']})").replace(f"Pass@{K}", f"Pass@{plan['k']}"))


def confirm_specs(plan: dict, choices: dict) -> list[dict]:
    """Each arm at its selected lr and at grpo's (one run per distinct lr), grpo first."""
    lrs = {a: sorted({choices[a], choices[REFERENCE]}) for a in plan["arms"]}
    return [{"phase": "confirm", "arm": a, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for a in plan["arms"] for lr in lrs[a] for s in plan["confirm"]]


def matched_specs(plan: dict, choices: dict) -> list[dict]:
    """MATCHED_RULE: grpo at each other selected lr, on the confirmation seeds and split."""
    return [{"phase": "matched", "arm": REFERENCE, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for lr in sorted(set(choices.values()) - {choices[REFERENCE]}) for s in plan["confirm"]]


def where_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "where", "arm": a, "lr": choices[REFERENCE], "seed": s, "split": "val"} | tag(plan)
            for a in WHERE_ARMS for s in plan["where"]]


def run_one(spec: dict, plan: dict, ctx: dict, arms: dict | None = None, logged: list[str] | None = None) -> dict:
    """Train one spec with lab.train_rl, evaluating through its per-step hook at the plan's steps (the hook runs
    before a step's updates: at call s the policy has had s updates), or evaluate the base. The where phase also
    evaluates the problems of the first step's batch ("trained"). Writes result.json atomically and returns it.
    Another study passes its own `arms` (arm -> method, flags) and the log fields it keeps (default: ARMS, LOGGED)."""
    path = ls.run_dir(Path(plan["out"]), spec)
    if (path / "result.json").exists():
        return json.loads((path / "result.json").read_text())
    path.mkdir(parents=True, exist_ok=True)
    start, stopped, log, base, tokenizer, splits = time.time(), None, [], ctx["base"], ctx["tokenizer"], ctx["splits"]
    common = [*plan["task_flags"], *plan["flags"], "--n-eval", str(plan["n_eval"]),
              "--eval-seed", str(EVAL_SEED_BASE + spec["seed"])]
    if spec["arm"] == "base":
        cfg = lab.parse_config([*common, "--seed", "0", "--methods", ""])
        trajectory = [{"step": 0, **rm.evaluate(cfg, base, tokenizer, splits[spec["split"]], "base")}]
    else:
        method, extra = (arms or ARMS)[spec["arm"]]
        cfg = lab.parse_config([*lab.STUDY_PINS, *common, *extra, "--method", method, "--seed", str(spec["seed"]),
                                "--lr", str(spec["lr"]), "--steps", str(plan["steps"]), "--out", str(path)])
        torch.manual_seed(spec["seed"])
        model = copy.deepcopy(base).requires_grad_(True)
        where = spec["phase"] == "where"
        at = set(plan["where_steps"] if where else plan["eval_steps"])
        sets, trajectory, calls = {"val" if where else spec["split"]: splits[spec["split"]]}, [], [0]

        def evaluate(step: int) -> None:
            for name, problems in sets.items():
                row = rm.evaluate(cfg, model, tokenizer, problems, f"{name} step {step}")
                trajectory.append({"step": step, **({"set": name} if where else {}), **{k: row[k] for k in KEEP if k in row}})

        def on_step(step: lab.Step) -> dict:
            if where and calls[0] == 0:
                sets["trained"] = list(step.problems)  # the first batch: trained on from step 1
            if calls[0] in at:
                evaluate(calls[0])
            calls[0] += 1
            return {}
        try:
            lab.train_rl(cfg, method, model, base, tokenizer, splits["train"], path, on_step=on_step)
            if plan["steps"] in at:
                evaluate(plan["steps"])
        except SystemExit as exc:  # reco_mini stops before a non-finite gradient reaches the weights
            stopped = str(exc.code)
        log = read_jsonl(path / "log.jsonl")
    result = {"spec": spec, "stopped": stopped, "trajectory": trajectory,
              "logged": {name: [row.get(name) for row in log] for name in logged or LOGGED},
              "divergence": divergence(log, stopped, ls.KL_LIMIT) if log else None,
              "wall_time_s": round(time.time() - start, 1), "torch_threads": torch.get_num_threads()}
    return ls.save_result(path, finite_or_none(result))


def _run(spec: dict, plan: dict) -> dict:
    return run_one(spec, plan, ls._CTX)


def load_one(spec: dict, plan: dict) -> dict | None:
    results = ls.load_results([spec], plan)
    return results[0] if results else None


# =============================================================================
# Task choice, statistics, summary
# =============================================================================

def task_choice() -> dict:
    """TASK_RULE on the committed studies: GRPO's collapse on validation per task, measured before this study's runs."""
    import gzip
    frontier = json.loads((ROOT / "results" / "frontier_study.json").read_text())["long"]["methods"]["grpo"]
    before, after = frontier["pass_at_256_by_step"]["0"]["values"], frontier["pass_at_256_by_step"]["120"]["values"]
    with gzip.open(ROOT / "results" / "fork_study_runs.jsonl.gz", "rt") as f:
        f.readline()
        runs = [json.loads(line) for line in f]
    base = next(r for r in runs if r["spec"]["arm"] == "base" and r["spec"]["split"] == "val")["trajectory"][0]
    grpo = [r["trajectory"][-1] for r in runs if r["spec"]["phase"] == "select" and r["spec"]["arm"] == "grpo"
            and r["spec"]["lr"] == 5e-5]
    tasks = {"countdown": {"k": 256, "base": sum(before) / len(before), "grpo_step_120": sum(after) / len(after),
                           "source": "results/frontier_study.json, long phase (grpo, lr 1e-4, seeds 300-302)"},
             "countdown-long": {"k": 128, "base": base["pass_at_k"]["128"],
                                "grpo_step_120": sum(t["pass_at_k"]["128"] for t in grpo) / len(grpo),
                                "source": "results/fork_study_runs.jsonl.gz, selection (grpo, lr 5e-5, seeds 20-21)"}}
    for t in tasks.values():
        t["collapse"] = t["base"] - t["grpo_step_120"]
    return {"rule": TASK_RULE, "tasks": tasks, "chosen": max(tasks, key=lambda name: tasks[name]["collapse"])}


def planning_sd() -> float:
    """The largest per-seed sd of the primary statistic among the frontier re-analysis' contrasts (Countdown, 10 seeds)."""
    comparisons = json.loads((ROOT / "results" / "frontier_reanalysis.json").read_text())["comparisons"]
    return max(summarize([v for v in c["primary"]["per_seed"].values() if v is not None])["std"] for c in comparisons.values())


def contrasts(plan: dict, choices: dict) -> list[dict]:
    """The family (FAMILY_RULE): (arm, lr) against grpo at its lr, one per distinct lr of each arm."""
    out = []
    for a in plan["arms"]:
        if a == REFERENCE:
            continue
        for lr in sorted({choices[a], choices[REFERENCE]}):
            which = ("grpo's lr" if plan.get("select_arms") else "its lr = grpo's" if choices[a] == choices[REFERENCE] else
                     "its selected lr" if lr == choices[a] else "grpo's lr")
            out.append({"name": f"{a} @ {which}", "arm": a, "lr": lr, "reference": REFERENCE, "reference_lr": choices[REFERENCE]})
    return out


def aggregate(plan: dict, wall_s: float, timing: dict | None) -> dict:
    base = {s["split"]: r["trajectory"][0] for s in base_specs(plan) if (r := load_one(s, plan))}
    base_val = base["val"]["pass_at_k"]["1"] if "val" in base else None
    base_test = base["test"]["pass_at_k"]["1"] if "test" in base else None
    sel_results = ls.load_results(select_specs(plan), plan)
    sel = choose(plan, base_val)
    choices = arm_lrs(plan, sel["choices"])
    ready = len(choices) == len(plan["arms"])
    confirm = ls.load_results(confirm_specs(plan, choices), plan) if ready else []
    where = ls.load_results(where_specs(plan, choices), plan) if ready else []
    matched = ls.load_results(matched_specs(plan, choices), plan) if ready else []
    planned = len(confirm_specs(plan, choices)) if ready else None
    complete = {"base": len(base) == 2, "select": ready, "confirm": ready and len(confirm) == planned,
                "where": ready and len(where) == len(where_specs(plan, choices))}
    curves, runs_of, stalls = {}, {}, {}
    for r in confirm:
        key = fs.key(r["spec"]["arm"], r["spec"]["lr"])
        curves.setdefault(key, {})[r["spec"]["seed"]] = measured_curve(r["trajectory"], plan["k"])
        runs_of.setdefault(key, []).append(r)
        stalls.setdefault(key, {})[r["spec"]["seed"]] = base_test is not None and fs.stalled(
            r["trajectory"], base_test, plan["stall_after"], r["stopped"])
    ref = fs.key(REFERENCE, choices[REFERENCE]) if ready else None
    family = contrasts(plan, choices) if ready else []
    for row in family:
        a = fs.key(row["arm"], row["lr"])
        if a in curves and ref in curves:
            c = compare(curves[a], curves[ref])
            row |= {k: c["primary"][k] for k in ("per_seed", "n", "mean", "ci_low", "ci_high", "p_greater", "p_tost")}
            row["final"] = c["final"]
    for row, adjusted in zip(family, holm([r.get("p_greater") for r in family])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    controls = sorted({r["arm"] for r in family if r.get("confirmed")})
    versus = reco_vs_controls(controls, choices, curves)
    per_arm = {}
    for key, runs in sorted(runs_of.items()):
        finals = [r["trajectory"][-1]["pass_at_k"] for r in runs if r["trajectory"]]
        per_arm[key] = {"arm": runs[0]["spec"]["arm"], "lr": runs[0]["spec"]["lr"], "seeds": sorted(stalls[key]),
                        "stalled": sum(stalls[key].values()), "stopped": sum(bool(r["stopped"]) for r in runs),
                        "diverged": sum(bool((r["divergence"] or {}).get("diverged")) for r in runs),
                        "final_pass_at_1": summarize([f["1"] for f in finals]),
                        f"final_pass_at_{plan['k']}": summarize([f[plan["k"]] for f in finals]),
                        "trajectory": [r["trajectory"] for r in sorted(runs, key=lambda r: r["spec"]["seed"])],
                        "wall_time_s": [r["wall_time_s"] for r in runs]}
    if ref in per_arm:
        g = per_arm[ref]
        for key, v in per_arm.items():
            if key != ref:
                v["fisher_p_vs_grpo"] = fs.fisher_exact(v["stalled"], len(v["seeds"]) - v["stalled"], g["stalled"],
                                                        len(g["seeds"]) - g["stalled"])
    runs_all = [r for s in base_specs(plan) if (r := load_one(s, plan))] + sel_results + confirm + where
    runs_planned = 2 + len(select_specs(plan)) + (planned or 0) + (len(where_specs(plan, choices)) if ready else 0)
    countdown = plan["family"] == "countdown"
    sd = planning_sd() if countdown and not plan.get("quick") else 0.0
    n_contrasts = (len(plan["arms"]) - 1) * (1 if plan.get("select_arms") else 2)
    return finite_or_none({
        "partial": not all(complete.values()), "complete": complete,
        "design": {"family": plan["family"], "task": task_choice() if countdown and not plan.get("quick") else None,
                   "arms": ARMS, "arms_run": plan["arms"], "select_arms": selecting(plan),
                   "reference": REFERENCE, "task_flags": plan["task_flags"], "flags": plan["flags"],
                   "base_sha256": plan["base_sha256"],
                   "lrs": list(plan["lrs"]), "select_seeds": list(plan["select"]), "confirm_seeds": list(plan["confirm"]),
                   "where_seeds": list(plan["where"]), "steps": plan["steps"], "eval_steps": list(plan["eval_steps"]),
                   "where_steps": list(plan["where_steps"]), "n_eval": plan["n_eval"], "k": int(plan["k"]),
                   "primary": in_family(PRIMARY, plan), "eval_seed": f"{EVAL_SEED_BASE} + RL seed", "alpha": ALPHA,
                   "equivalence_margin": EQUIVALENCE_MARGIN, "stall_rule": in_family(fs.STALL_RULE, plan),
                   "family_rule": CODE_FAMILY_RULE if plan.get("select_arms") else FAMILY_RULE,
                   "mde_planning_sd": sd,
                   "mde": ls.minimum_detectable_effect(len(plan["confirm"]), sd, ALPHA / n_contrasts) if sd else None,
                   "budget_rule": CODE_BUDGET_RULE if not countdown else None},
        "base": base, "selection": sel, "family": family, "positive_controls": controls, "reco_vs_controls": versus,
        "lr_effects": lr_effects(sel_results, choices, plan["k"]) if ready else {},
        "lr_matched": lr_matched(confirm, matched, choices, plan) if ready else None,
        "arms": per_arm, "where": where_summary(where, plan["k"]),
        "compute": {"runs": len(runs_all), "runs_planned": runs_planned,
                    "run_time_s": round(sum(r["wall_time_s"] for r in runs_all), 1), "this_invocation_wall_s": round(wall_s, 1),
                    "budget_hours": BUDGET_HOURS, "timing": timing,
                    "projected_run_hours": ((timing or {}).get("budget") or {}).get("projected_run_hours")},
    })


def reco_vs_controls(controls: list[str], choices: dict, curves: dict) -> dict:
    """Secondary: each ReCo arm against each positive control that is not a form of ReCo, at grpo's lr and each at
    its own selected lr (one pair when these are equal); `curves` maps fs.key(arm, lr) to {seed: curve}."""
    out = {}
    for control in (c for c in controls if c not in RECO_ARMS):
        for a in RECO_ARMS:
            for lr_a, lr_c in sorted({(choices[REFERENCE], choices[REFERENCE]), (choices[a], choices[control])}):
                x, y = fs.key(a, lr_a), fs.key(control, lr_c)
                if x in curves and y in curves:
                    out[f"{x} - {y}"] = compare(curves[x], curves[y])["primary"]
    return out


def lr_effects(selection: list[dict], choices: dict, k: str) -> dict:
    """Exploratory, added on 2026-12-05 after the partial results were seen: from the selection runs (validation, their
    two seeds), the primary statistic of grpo at each other arm's selected lr against grpo at its own, and of each such
    arm against grpo at the arm's lr: how much of a contrast at an arm's own lr the lr alone could give (primary and
    final statistics; lr_matched reads the same contrasts on the test split)."""
    curves: dict[tuple, dict] = {}
    for r in selection:
        curves.setdefault((r["spec"]["arm"], r["spec"]["lr"]), {})[r["spec"]["seed"]] = measured_curve(r["trajectory"], k)
    ref, out = choices[REFERENCE], {}
    pairs = [((REFERENCE, lr), (REFERENCE, ref)) for lr in sorted(set(choices.values()) - {ref})]
    pairs += [((a, lr), (REFERENCE, lr)) for a, lr in choices.items() if a != REFERENCE and lr != ref]
    for x, y in pairs:
        if x in curves and y in curves:
            c = compare(curves[x], curves[y])
            out[f"{x[0]} @ {x[1]:g} - {y[0]} @ {y[1]:g}"] = c["primary"] | {"final": c["final"]}
    return out


def lr_matched(confirm: list[dict], matched: list[dict], choices: dict, plan: dict) -> dict:
    """MATCHED_RULE: each arm at its own selected lr against grpo at the same lr, and grpo at each such lr against
    grpo at its own, on the test split (primary and final statistics); how many of its runs have finished."""
    contrasts = lr_effects(confirm + matched, choices, plan["k"])  # the same contrasts, on the test split
    planned = len(matched_specs(plan, choices))
    return {"rule": MATCHED_RULE, "runs": len(matched), "runs_planned": planned, "partial": len(matched) < planned,
            "run_time_s": round(sum(r["wall_time_s"] for r in matched), 1), "contrasts": contrasts}


def where_summary(runs: list[dict], k: str) -> dict:
    """Per where-arm and set, mean Pass@1 and Pass@k over seeds at each step; the step by which the validation Pass@k had
    lost half of its loss at the last step; the trained set's loss beside the held-out one's."""
    out = {}
    for a in WHERE_ARMS:
        mine = [r for r in runs if r["spec"]["arm"] == a]
        if not mine:
            continue
        table = {}
        for name in ("val", "trained"):
            rows = {}
            for r in mine:
                for row in r["trajectory"]:
                    if row.get("set") == name:
                        rows.setdefault(row["step"], []).append((row["pass_at_k"]["1"], row["pass_at_k"][k]))
            table[name] = {str(s): {"pass_at_1": sum(x for x, _ in v) / len(v), f"pass_at_{k}": sum(y for _, y in v) / len(v),
                                    "seeds": len(v)} for s, v in sorted(rows.items())}
        val = table["val"]
        steps = sorted(int(s) for s in val)
        half = None
        if steps and steps[0] == 0:
            drop = val[str(steps[0])][f"pass_at_{k}"] - val[str(steps[-1])][f"pass_at_{k}"]
            half = next((s for s in steps if drop > 0 and val[str(steps[0])][f"pass_at_{k}"] - val[str(s)][f"pass_at_{k}"]
                         >= drop / 2), None)
        loss = {name: (t[str(min(map(int, t)))][f"pass_at_{k}"] - t[str(max(map(int, t)))][f"pass_at_{k}"]) if t else None
                for name, t in table.items()}
        out[a] = {"by_step": table, "half_of_val_loss_by_step": half, "loss_first_to_last": loss, "seeds": len(mine)}
    return out


# =============================================================================
# Budget, status, plot, block
# =============================================================================

def run_seconds(timing: dict, spec: dict, plan: dict) -> float:
    evaluation = timing[f"s_per_eval_n{plan['n_eval']}"]
    if spec["arm"] == "base":
        return evaluation
    steps = plan["where_steps"] if spec["phase"] == "where" else plan["eval_steps"]
    evals = len(steps) * (1.5 if spec["phase"] == "where" else 1.0)  # the where phase adds half a split (32 problems)
    return plan["steps"] * timing["arms"][spec["arm"]]["s_per_step"] + evals * evaluation


def projected_hours(timing: dict, plan: dict, choices: dict | None = None) -> float:
    """Summed run hours of the plan: the base, the selection, and the confirmation and where phases, with every arm's
    selected lr assumed different from grpo's unless `choices` says otherwise (the largest plan)."""
    guess = choices or arm_lrs(plan, {a: (0.0 if a == REFERENCE else 1.0) for a in plan["arms"]})
    specs = base_specs(plan) + select_specs(plan) + confirm_specs(plan, guess) + where_specs(plan, guess)
    return sum(run_seconds(timing, s, plan) for s in specs) / 3600


def timing_run(plan: dict) -> dict:
    """5 RL steps of each arm at grpo's default lr and one evaluation at n = N_EVAL, on this machine."""
    ctx = ls.load_context(plan["flags"], task_flags=plan["task_flags"])
    out, arms = Path(plan["out"]) / "timing", {}
    for a in [plan["arms"][0], *plan["arms"]]:  # the first arm twice: its first run pays the start-up
        method, extra = ARMS[a]
        cfg = lab.parse_config([*lab.STUDY_PINS, *plan["task_flags"], *plan["flags"], *extra, "--method", method,
                                "--steps", "5", "--out", str(out)])
        (out / a).mkdir(parents=True, exist_ok=True)
        model = copy.deepcopy(ctx["base"]).requires_grad_(True)
        start = time.time()
        lab.train_rl(cfg, method, model, ctx["base"], ctx["tokenizer"], ctx["splits"]["train"], out / a)
        arms[a] = {"s_per_step": (time.time() - start) / 5}
    cfg = lab.parse_config([*plan["task_flags"], *plan["flags"], "--n-eval", str(plan["n_eval"])])
    start = time.time()
    rm.evaluate(cfg, ctx["base"], ctx["tokenizer"], ctx["splits"]["val"], "timing")
    timing = {"arms": arms, f"s_per_eval_n{plan['n_eval']}": time.time() - start, "torch_threads": torch.get_num_threads(),
              "task_flags": plan["task_flags"]}
    hours = projected_hours(timing, plan)
    fits = hours <= BUDGET_HOURS if plan["family"] == "countdown" else None  # the second family: CODE_BUDGET_RULE decides
    return timing | {"budget": {"projected_run_hours": hours, "budget_hours": BUDGET_HOURS, "within_budget": fits,
                                "projected_wall_hours_at_jobs_2": hours / 2}
                     | ({} if fits is not None else {"rule": CODE_BUDGET_RULE})}


def status(plan: dict, timing: dict | None) -> dict:
    base = {s["split"]: r for s in base_specs(plan) if (r := load_one(s, plan))}
    base_val = base["val"]["trajectory"][0]["pass_at_k"]["1"] if "val" in base else None
    choices = arm_lrs(plan, choose(plan, base_val)["choices"])
    guess = arm_lrs(plan, {a: choices.get(a, 0.0 if a == REFERENCE else 1.0) for a in plan["arms"]})  # the largest plan
    out, left_s = {}, 0.0
    for name, specs in (("base", base_specs(plan)), ("select", select_specs(plan)), ("confirm", confirm_specs(plan, guess)),
                        ("where", where_specs(plan, guess))):
        todo = [s for s in specs if not (ls.run_dir(Path(plan["out"]), s) / "result.json").exists()]
        out[name] = {"done": len(specs) - len(todo), "planned": len(specs)}
        left_s += sum(run_seconds(timing, s, plan) for s in todo) if timing else 0.0
    out["projected_run_hours_left"] = left_s / 3600 if timing else None
    if len(choices) == len(plan["arms"]):  # amendment 2, once the lrs are known; it runs only when named
        todo = [s for s in matched_specs(plan, choices) if not (ls.run_dir(Path(plan["out"]), s) / "result.json").exists()]
        out["matched"] = {"done": len(matched_specs(plan, choices)) - len(todo), "planned": len(matched_specs(plan, choices)),
                          "projected_run_hours_left": sum(run_seconds(timing, s, plan) for s in todo) / 3600
                          if timing else None}
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = summary["design"]["k"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5))
    colors = plt.get_cmap("tab20")  # up to 14 arm-lr pairs: ten colors would repeat
    for i, (key, v) in enumerate(summary["arms"].items()):
        xs, mean, lo, hi = fs.frontier_band([measured_curve(t, str(k)) for t in v["trajectory"]])
        selected = v["lr"] == summary["selection"]["choices"].get(v["arm"])
        ax.plot(xs, mean, color=colors(i % 20), ls="-" if selected else "--", label=f"{key} ({len(v['seeds'])} seeds)")
        ax.fill_between(xs, lo, hi, color=colors(i % 20), alpha=0.1)
    if summary["base"].get("test"):
        b = summary["base"]["test"]["pass_at_k"]
        ax.plot([b["1"]], [b[str(k)]], "k*", ms=10, label="base")
    ax.set(xlabel="Pass@1 (test)", ylabel=f"Pass@{k} (test)", title="Mean frontier per arm and lr (band: 95% CI)")
    ax.legend(fontsize=6)
    for i, (a, w) in enumerate(summary["where"].items()):
        for name, style in (("val", "-"), ("trained", ":")):
            t = w["by_step"][name]
            bx.plot([int(s) for s in t], [x[f"pass_at_{k}"] for x in t.values()], style, color=f"C{i}", marker="o", ms=3,
                    label=f"{a}: {'held out (validation)' if name == 'val' else 'first batch (trained on)'}")
    bx.set(xscale="symlog", xlabel="RL step", ylabel=f"Pass@{k}", title="Where the coverage goes: the first steps")
    if summary["where"]:
        bx.legend(fontsize=7)
    else:
        countdown = summary["design"].get("family", "countdown") == "countdown"
        none = "no where-phase run yet" if countdown else "no where phase in this family"
        bx.text(0.5, 0.5, none, ha="center", transform=bx.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def confirmed_at_grpo_lr(summary: dict) -> list[str]:
    """The positive controls with a confirmed contrast at grpo's lr: the ones whose gain is not the lr's."""
    return sorted({r["arm"] for r in summary["family"] if r.get("confirmed") and r["lr"] == r["reference_lr"]})


def same_lr_reading(summary: dict) -> dict | None:
    """Every arm against grpo at the same lr (issue 52's correction of the record), once amendment 2 has finished:
    the family's contrast at grpo's lr and amendment 2's at the arm's own lr. `gains`: each arm confirmed at grpo's lr,
    with its gap there and at its own lr (None where the two lrs are equal); `matched`: the arms whose every same-lr
    interval spans zero; `worse`: those with one below zero. None while amendment 2 is unfinished."""
    matched_lr = summary.get("lr_matched") or {}
    if matched_lr.get("partial", True) or not matched_lr.get("runs_planned"):
        return None
    choices, same = summary["selection"]["choices"], confirmed_at_grpo_lr(summary)
    at_own = {name.split(" @ ")[0]: c for name, c in matched_lr["contrasts"].items() if not name.startswith(REFERENCE)}
    gains, matched, worse = {}, [], []
    for a in (a for a in summary["design"]["arms_run"] if a != REFERENCE):
        rows = [r for r in summary["family"] if r["arm"] == a and r["lr"] == r["reference_lr"]] + (
            [at_own[a]] if a in at_own else [])
        if a in same:
            own = at_own.get(a)
            gains[a] = {"at_grpo_lr": rows[0]["mean"], "own_lr": choices[a], "at_own_lr": own["mean"] if own else None}
        elif any((r["ci_high"] or 0) < 0 for r in rows):
            worse.append(a)
        else:
            matched.append(a)
    return {"reference_lr": choices[REFERENCE], "gains": gains, "matched": matched, "worse": worse}


def claims(summary: dict) -> list[str]:
    """The answer to the primary question, by rule, then each contrast's reading."""
    if summary["partial"] or not summary["family"]:
        return ["The study is partial: no answer is drawn from it yet."]
    controls = summary["positive_controls"]
    if controls:
        same = confirmed_at_grpo_lr(summary)
        own = [a for a in controls if a not in same]
        out = [f"**Positive control found:** {', '.join(controls)} beat grpo's frontier (Holm p < {ALPHA}). At grpo's lr, "
               f"where the contrast does not change the lr: {', '.join(same) or 'none'}"
               + (f"; only at its own selected lr, where the contrast also changes the lr: {', '.join(own)}" if own else "")
               + "."]
        reading = same_lr_reading(summary)
        if reading and reading["matched"]:
            out[0] += (" Against grpo at the same lr (the family at grpo's lr and amendment 2 at each arm's own), grpo "
                       f"shows no detectable difference from {', '.join(reading['matched'])} (added with issue 52).")
    else:
        out = ["**No positive control:** no tested method, peers with published coverage gains included, beat grpo's "
               f"Pass@{summary['design']['k']} frontier in this CPU regime, so its ReCo nulls say little about the "
               "paper's claim at scale."]
    for row in summary["family"]:
        if row.get("mean") is None:
            out.append(f"{row['name']}: not estimable (no paired seeds).")
            continue
        reading = ("confirmed (Holm p < 0.05)" if row["confirmed"] else
                   f"equivalent to zero within ±{EQUIVALENCE_MARGIN} (TOST)" if row["equivalent"] else
                   "worse than grpo: its 95% CI lies below zero" if (row["ci_high"] or 0) < 0 else
                   "a null, not evidence of no effect")
        out.append(f"{row['name']} (lr {row['lr']:g}) − grpo (lr {row['reference_lr']:g}) = {fs._interval(row)} over "
                   f"{row['n']} seeds; {reading}.")
    return out


def render_block(summary: dict, results_path: str, png: str) -> str:
    d, c, k = summary["design"], summary["compute"], summary["design"]["k"]
    family = "" if d.get("family", "countdown") == "countdown" else f"--family {d['family']} "
    out = [f"_Generated from `{results_path}` by `python experiments/control_study.py {family}--aggregate-only --write-docs "
           "<this file>`; rerun it rather than editing._"]
    if summary["partial"] and summary.get("budget_check") and not c["runs"]:
        out.append(f"\n**Not run:** {summary['budget_check']}.")
    elif summary["partial"]:
        done = ", ".join(p for p, ok in summary["complete"].items() if ok) or "none"
        out.append(f"\n**PARTIAL: the study has not finished.** Phases complete: {done}. Finished runs: {c['runs']} of "
                   f"{c['runs_planned'] or '?'}; no finding is drawn from it until it finishes.")
    task = d["task"]
    if task:
        why = "; ".join(f"{n}: Pass@{t['k']} {t['base']:.3f} → {t['grpo_step_120']:.3f} (collapse {t['collapse']:.3f})"
                        for n, t in task["tasks"].items())
        out.append(f"\nTask: {task['chosen']}, where GRPO's collapse on validation is largest ({why}).")
    elif d.get("family", "countdown") != "countdown":
        out.append(f"\nTask: {d['family']}, the second family (amendment 1 of docs/control_study.md): grpo selects its lr "
                   "on validation and every arm runs at it; its own Holm family.")
    out.append(f"\nRL {d['steps']} steps, evaluated at steps {d['eval_steps']}, n = {d['n_eval']}, primary k = {k}; "
               f"lr grid {d['lrs']}; confirmation seeds {d['confirm_seeds']} on the test split.")
    if summary["base"].get("test"):
        b = summary["base"]["test"]["pass_at_k"]
        out.append(f"The base before RL, test split: Pass@1 {b['1']:.3f}, Pass@{k} {b[str(k)]:.3f}.")
    if summary["selection"]["choices"]:
        out.append("\nSelected lr: " + ", ".join(f"{a} {lr:g}" for a, lr in summary["selection"]["choices"].items())
                   + (" (every arm runs at grpo's lr)." if d.get("select_arms", d["arms_run"]) != d["arms_run"] else "."))
    if summary["arms"]:
        out.append(f"\n![Frontiers and the first steps]({png})")
    out.append("\n**Answer and family** (declared before the runs; Holm over every contrast; TOST ±0.02):\n")
    out += [f"- {line}" for line in claims(summary)]
    if summary["reco_vs_controls"]:
        out.append("\nSecondary, ReCo against each positive control that is not a form of ReCo (primary statistic, "
                   "unadjusted; at grpo's lr, and each at its own selected lr):\n")
        out += [f"- {name}: {fs._interval(s)} over {s['n']} seeds" for name, s in summary["reco_vs_controls"].items()]
    if summary.get("lr_effects"):
        out.append("\nExploratory, added after the partial results were seen: how much the lr alone moves the primary "
                   "statistic, from the selection runs (validation split, 2 seeds each, no test; the per-seed values):\n")
        out += [f"- {name}: mean {s['mean']:+.3f}; per seed "
                + ", ".join(f"{seed}: {v:+.3f}" for seed, v in s["per_seed"].items() if v is not None)
                for name, s in summary["lr_effects"].items() if s["mean"] is not None]
    matched = summary.get("lr_matched") or {}
    if matched.get("runs_planned"):
        out.append("\n**Exploratory, amendment 2** (written after the partial results were seen, before its runs; outside "
                   "the family, unadjusted): each arm at its own selected lr against grpo at the same lr, test split"
                   + (f". **PARTIAL:** {matched['runs']} of its {matched['runs_planned']} runs have finished"
                      if matched["partial"] else "") + (":\n" if matched["contrasts"] else "; no contrast yet."))
        out += [f"- {name}: {fs._interval(c)} over {c['n']} seeds; final checkpoints {fs._interval(c['final'])}"
                for name, c in matched["contrasts"].items() if c["mean"] is not None]
    if summary["arms"]:
        out.append(f"\n| arm @ lr | runs | stalled | stopped | diverged | Fisher p vs grpo | final Pass@1 | final Pass@{k} |")
        out.append("|---|---|---|---|---|---|---|---|")
        for key, v in summary["arms"].items():
            fisher = "–" if v.get("fisher_p_vs_grpo") is None else f"{v['fisher_p_vs_grpo']:.3g}"
            out.append(f"| {key} | {len(v['seeds'])} | {v['stalled']} | {v['stopped']} | {v.get('diverged', '–')} | "
                       f"{fisher} | {v['final_pass_at_1']['mean']:.3f} | {v[f'final_pass_at_{k}']['mean']:.3f} |")
        out.append("\n_diverged_ (added after the partial results were seen, descriptive): runs that meet the selection "
                   "rule's divergence test (a non-finite value, a reward collapse below half its best "
                   f"{COLLAPSE_WINDOW}-step mean, or a last-{COLLAPSE_WINDOW}-step KL to the base above "
                   f"{ls.KL_LIMIT:g}); they stay in the family, as the pre-registration says.")
    for a, w in summary["where"].items():
        val, trained = w["by_step"]["val"], w["by_step"]["trained"]
        line = ", ".join(f"{s}: {x[f'pass_at_{k}']:.3f}" for s, x in val.items())
        out.append(f"\n**Where ({a}, {w['seeds']} seeds):** validation Pass@{k} by step {line}. "
                   "Half of its loss (on the mean over seeds, at the first evaluated step) by step "
                   f"{w['half_of_val_loss_by_step']}. Loss from the first to the last step: held out "
                   f"{w['loss_first_to_last']['val']:.3f}, first batch (trained on) "
                   + (f"{w['loss_first_to_last']['trained']:.3f}." if trained else "–."))
    hours, projected = c["run_time_s"] / 3600, c.get("projected_run_hours")
    out.append(f"\nCompute: {c['runs']} of {c['runs_planned'] or '?'} runs, {hours:.2f} h summed over the runs' own wall "
               f"times, against a budget of {c['budget_hours']:g} h" + (f" (projected {projected:.2f} h before the runs)"
                                                                          if projected else "") + "."
               + (f" Amendment 2: {matched['runs']} of {matched['runs_planned']} runs, "
                  f"{matched['run_time_s'] / 3600:.2f} h." if matched.get("runs_planned") else ""))
    return "\n".join(out)


# =============================================================================
# main
# =============================================================================

def make_plan(args: argparse.Namespace) -> dict:
    plan = {"out": args.out, "flags": [], "steps": STEPS, "lrs": LRS, "select": SELECT_SEEDS, "confirm": CONFIRM_SEEDS,
            "where": WHERE_SEEDS, "arms": list(ARMS), "k": K, "n_eval": N_EVAL, "eval_steps": EVAL_STEPS,
            "where_steps": WHERE_STEPS, "stall_after": fs.STALL_AFTER, "base_sha256": None, "task_flags": TASK_FLAGS,
            "sft_form_prior": SFT_FORM_PRIOR, "quick": False, "family": "countdown"}
    if args.family == "code-tiny":
        return plan | CODE | (CODE_QUICK | {"quick": True, "stall_after": 1} if args.quick else {})
    return plan | (QUICK | {"quick": True, "stall_after": 1} if args.quick else {})


def code_budget_check(plan: dict, timing: dict | None, first: Path) -> str | None:
    """CODE_BUDGET_RULE: why the code-tiny family may not run yet, or None. `first` is the countdown family's summary."""
    if timing is None:
        return "no timing of the code-tiny family: run --timing --family code-tiny first"
    if not first.exists():
        return f"{first}: no summary of the countdown family (the code-tiny family runs after it has finished)"
    summary = json.loads(first.read_text())
    if summary.get("partial", True):
        return f"{first}: the countdown family has not finished (the code-tiny family runs after it)"
    spent = summary["compute"]["run_time_s"] / 3600
    projected = projected_hours(timing, plan | {"base_sha256": plan["base_sha256"] or "0" * 64})  # counts, not runs
    if spent + projected > BUDGET_HOURS:
        return (f"the code-tiny family is projected at {projected:.2f} h, and the countdown family spent {spent:.2f} h of "
                f"the {BUDGET_HOURS:g} h budget: it does not fit, so it does not run")
    return None


def matched_budget_check(plan: dict, timing: dict | None, first: Path, code: Path, choices: dict) -> str | None:
    """MATCHED_RULE's budget: why amendment 2 may not run yet, or None. `first` and `code` are the two families'
    summaries."""
    if timing is None:
        return "no timing of the countdown family: run --timing first"
    spent = 0.0
    for path, name in ((first, "countdown"), (code, "code-tiny")):
        if not path.exists() or json.loads(path.read_text()).get("partial", True):
            return f"{path}: the {name} family has not finished (amendment 2 runs after both families)"
        spent += json.loads(path.read_text())["compute"]["run_time_s"] / 3600
    projected = sum(run_seconds(timing, s, plan) for s in matched_specs(plan, choices)) / 3600
    if spent + projected > BUDGET_HOURS:
        return (f"amendment 2 is projected at {projected:.2f} h, and the two families spent {spent:.2f} h of the "
                f"{BUDGET_HOURS:g} h budget: it does not fit, so it does not run")
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", default="countdown", choices=list(FILES),
                        help="countdown: the primary family; code-tiny: the second family (amendment 1)")
    parser.add_argument("--phases", default="base,select,confirm,where",
                        help="comma-separated phases to run; 'matched' (amendment 2) runs only when named")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/control, runs/control-code; with --quick, "
                                                   "..._quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/control_study.json, "
                                                       "results/control_study_code.json; with --quick, in <out>)")
    parser.add_argument("--after", default="results/control_study.json",
                        help="code-tiny family: the countdown family's summary, read by its budget rule")
    parser.add_argument("--code-summary", default="results/control_study_code.json",
                        help="--phases matched: the code-tiny family's summary, read by amendment 2's budget rule")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the control-study markers")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--status", action="store_true", help="print runs done / planned and the projected hours")
    parser.add_argument("--timing", action="store_true", help="measure 5 RL steps per arm and an evaluation, then stop")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and grid")
    args = parser.parse_args(argv)
    stem, out, markers = FILES[args.family]
    args.out = args.out or (f"{out}_quick" if args.quick else out)
    results = Path(args.results or (f"{args.out}/{stem}.json" if args.quick else f"results/{stem}.json"))
    timing_path, archive = results.with_name(results.stem + "_timing.json"), results.with_name(results.stem + "_runs.jsonl.gz")
    base_file = ROOT / "results" / f"{stem}_base.pt"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else None
    plan, start = make_plan(args), time.time()
    torch.set_num_threads(args.threads)
    reading = args.aggregate_only or args.status
    if "matched" in args.phases.split(",") and plan["family"] != "countdown":
        sys.exit(f"control_study.py --family {plan['family']}: --phases matched is the countdown family's amendment 2 "
                 "(this family runs every arm at grpo's lr)")
    if plan["family"] != "countdown" and not (reading or args.timing or args.quick):
        if why := code_budget_check(plan, timing, Path(args.after)):
            sys.exit(f"control_study.py --family {plan['family']}: {why} ({CODE_BUDGET_RULE})")
    if reading and (ls.archived_base(archive) or not (args.quick or base_file.exists())):
        plan["base_sha256"] = ls.archived_base(archive) or "0" * 64  # "0": nothing has run yet
    else:  # a run, or a summary of runs made before the first archive (a study stopped in its first invocation)
        model = ls.load_context(plan["flags"], None if args.quick else base_file, task_flags=plan["task_flags"])["base"]
        plan["base_sha256"] = ls.base_sha256(model)
        if not (reading or args.quick or base_file.exists()):  # the first start: the base every later run uses
            torch.save(model.state_dict(), base_file.with_suffix(".tmp"))
            base_file.with_suffix(".tmp").replace(base_file)
    if args.timing:
        timing = timing_run(plan)
        timing_path.parent.mkdir(parents=True, exist_ok=True)
        timing_path.write_text(json.dumps(finite_or_none(timing), indent=1))
        print(f"wrote {timing_path}: {timing['budget']['projected_run_hours']:.2f} h projected")
        return timing
    restored = ls.restore_archive(archive, plan, plan["base_sha256"])
    if restored:
        print(f"restored {restored} finished runs")
    if args.status:
        report = status(plan, timing)
        print(json.dumps(report, indent=1))
        return report
    phases, ran = set(args.phases.split(",")), 0
    if not args.aggregate_only:
        if "base" in phases:
            ran += ls.run_all(base_specs(plan), plan, args.jobs, args.threads, run=_run)
        if "select" in phases:
            ran += ls.run_all(select_specs(plan), plan, args.jobs, args.threads, run=_run)
        base_val = load_one(base_specs(plan)[0], plan)
        choices = arm_lrs(plan, choose(plan, base_val["trajectory"][0]["pass_at_k"]["1"] if base_val else None)["choices"])
        if len(choices) == len(plan["arms"]) and base_val:
            todo = (confirm_specs(plan, choices) if "confirm" in phases else []) + (
                where_specs(plan, choices) if "where" in phases else [])
            if "matched" in phases:
                if why := matched_budget_check(plan, timing, results, Path(args.code_summary), choices):
                    sys.exit(f"control_study.py --phases matched: {why} ({MATCHED_RULE})")
                todo += matched_specs(plan, choices)
            ran += ls.run_all(todo, plan, args.jobs, args.threads, run=_run)
    summary = aggregate(plan, time.time() - start, timing)
    summary["compute"]["runs_this_invocation"] = ran
    if plan["family"] != "countdown" and not plan["quick"]:
        summary["budget_check"] = code_budget_check(plan, timing, Path(args.after))
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    choices = arm_lrs(plan, summary["selection"]["choices"])
    ready = len(choices) == len(plan["arms"])
    specs = base_specs(plan) + select_specs(plan) + (
        confirm_specs(plan, choices) + where_specs(plan, choices) + matched_specs(plan, choices) if ready else [])
    ls.write_archive(archive, plan, specs, summary["partial"], plan["base_sha256"], what=ARCHIVE_WHAT)
    png = results.with_suffix(".png")
    if summary["arms"] or summary["where"]:
        plot(summary, png)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_block(docs, render_block(summary, str(results), os.path.relpath(png, docs.parent)), *markers)
    print(f"wrote {results}" + (" (partial)" if summary["partial"] else "") + f"; {ran} runs this invocation")
    return summary


if __name__ == "__main__":
    main()
