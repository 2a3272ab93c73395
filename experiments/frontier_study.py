"""experiments/frontier_study.py: does ReCo buy coverage, or is it only less trained?

GRPO, ReCo, ReCo with positive-only response weights and a published peer, F-GRPO, on reco_mini's Countdown task,
compared at matched training progress: every run evaluates its policy every EVAL_EVERY RL steps (n = 256 samples per
held-out problem), and Pass@256 is read off at matched Pass@1 along that trajectory. Three tested phases and one
exploratory phase, all from one SFT base (reco_mini's cached base for seed 0) and all through experiments/lab.py:

  select   per method, lr x grad clip (LRS x CLIPS), seeds SELECT_SEEDS, trajectories on the validation split; each
           method's setting is chosen by SELECTION_RULE (fixed before any run, and written in the README first)
  confirm  each method at its chosen setting on fresh seeds CONFIRM_SEEDS, trajectories on the test split; the base
           is evaluated at step 0; the hypotheses HYPOTHESES are tested with a Holm correction
  stress   grpo, reco and f-grpo at STRESS_FACTORS x their chosen lr, seeds STRESS_SEEDS: divergence, rho, clipping
  long     exploratory, added after the confirmatory run: LONG_METHODS at their chosen setting for LONG_STEPS steps,
           seeds LONG_SEEDS, validation split: where Pass@1 plateaus, and the frontier at levels 120 steps do not reach

Every (phase, method, setting, seed) writes <out>/.../result.json; a rerun reuses finished runs and redoes the rest,
so the study can be stopped and resumed, or split over sessions (--phases). The summary goes to --results (JSON and a
PNG beside it) and, with --write-readme, to docs/results.md between the frontier-study markers; a summary of an unfinished
study says "partial": true.

  python experiments/frontier_study.py --jobs 2                  # the whole study (4 h 22 min here on 2 cores)
  python experiments/frontier_study.py --jobs 2 --phases select  # one phase
  python experiments/frontier_study.py --quick                   # smoke test: tiny model and budget, minutes
  python experiments/frontier_study.py --aggregate-only --write-readme docs/results.md
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import lab  # noqa: E402
from analysis import divergence, equivalence_test, finite_or_none, holm, paired_test, read_jsonl, summarize  # noqa: E402
from diagnostics import on_step  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks.countdown import FORMS, SFT_FORM_PRIOR, char_tokenizer, load_base, make_splits, solving_forms  # noqa: E402

METHODS = {  # study method -> (reco_mini method, extra flags)
    "grpo": ("grpo", []),
    "reco": ("reco", []),
    "reco-positive": ("reco", ["--occurrence-apply", "positive"]),
    "f-grpo": ("f-grpo", []),
}
REFERENCE = "grpo"
LRS, CLIPS = (1e-4, 2e-4, 4e-4), (1.0, 0.0)  # grad clip 0 = off
SELECT_SEEDS, CONFIRM_SEEDS, STRESS_SEEDS = (10, 11), tuple(range(100, 110)), (200, 201, 202)
STEPS, EVAL_EVERY = 120, 20
LEVELS = (0.15, 0.20, 0.25)  # matched Pass@1 levels
TIE = 0.01  # selection: validation Pass@1 within this of the best counts as a tie
STRESS_METHODS, STRESS_FACTORS, KL_LIMIT = ("grpo", "reco", "f-grpo"), (5, 20), 2.0
LONG_METHODS, LONG_SEEDS, LONG_STEPS, LONG_EVAL_EVERY, LONG_LEVELS = ("grpo", "reco", "reco-positive"), (300, 301, 302), \
    360, 40, (0.20, 0.25, 0.30)
RARE_FORMS = set(sorted(range(len(FORMS)), key=lambda f: SFT_FORM_PRIOR[f])[:2])  # the two rarest SFT forms
ALPHA = 0.05
SELECTION_RULE = (
    f"Per method, over lr in {list(LRS)} x grad clip in {{1.0, off}}, {len(SELECT_SEEDS)} seeds each, on the "
    "validation split: drop every setting with a diverged seed (a non-finite value, a reward collapse below half its "
    f"best 10-step mean, or a last-10-step KL to the base above {KL_LIMIT}); choose the highest validation Pass@1 at "
    f"the final checkpoint (step {STEPS}), averaged over seeds; settings within {TIE} of that best are tied, and the tie "
    "goes to the highest mean validation Pass@256. The matched level L* of H1 and H3 is the highest of "
    f"{list(LEVELS)} that every selection run at its method's chosen setting reaches.")
HYPOTHESES = [  # name, statement, study method, test
    ("H1", "ReCo's Pass@256 exceeds GRPO's at matched Pass@1 L*", "reco", "frontier"),
    ("H2", "ReCo's final Pass@1 is within 0.02 of GRPO's", "reco", "equivalence"),
    ("H3", "ReCo with positive-only weights exceeds GRPO's Pass@256 at matched Pass@1 L*", "reco-positive", "frontier"),
]
EQUIVALENCE_MARGIN = 0.02
PEER_REPORTED = {"f-grpo": "the F-GRPO paper reports +0.062 at Pass@256 on Qwen2.5-7B (64.1 → 70.3)"}
QUICK = dict(flags=["--quick"], steps=8, eval_every=4, lrs=(2e-4, 4e-4), clips=(1.0,), methods=["grpo", "reco"],
             select=(10,), confirm=(100, 101), stress=(200,), stress_methods=("grpo",), stress_factors=(5,),
             long=(300,), long_methods=("grpo", "reco"), long_steps=12, long_eval_every=6)
BEGIN, END = "<!-- frontier-study:begin -->", "<!-- frontier-study:end -->"


# =============================================================================
# Runs
# =============================================================================

def run_dir(out: Path, spec: dict) -> Path:
    if spec["method"] == "base":
        return out / "base" / spec["split"] / f"seed{spec['seed']}"
    return out / spec["phase"] / spec["method"] / f"lr{spec['lr']:g}-clip{spec['clip']:g}" / f"seed{spec['seed']}"


def run_one(spec: dict, plan: dict, ctx: dict) -> dict:
    """Train and evaluate one spec (or only evaluate the base); writes result.json atomically and returns it."""
    path = run_dir(Path(plan["out"]), spec)
    if (path / "result.json").exists():
        return json.loads((path / "result.json").read_text())
    path.mkdir(parents=True, exist_ok=True)
    start, stopped, trajectory = time.time(), None, []
    base, tokenizer, splits = ctx["base"], ctx["tokenizer"], ctx["splits"]
    if spec["method"] == "base":
        cfg = lab.parse_config([*plan["flags"], "--seed", str(spec["seed"]), "--methods", ""])
        trajectory = [{"step": 0, **rm.evaluate(cfg, base, tokenizer, splits[spec["split"]], f"base seed{spec['seed']}")}]
    else:
        method, extra = METHODS[spec["method"]]
        cfg = lab.parse_config([*lab.STUDY_PINS, *plan["flags"], *extra, "--method", method, "--seed", str(spec["seed"]),
                                "--lr", str(spec["lr"]), "--grad-clip", str(spec["clip"]),
                                "--steps", str(spec.get("steps", plan["steps"])),
                                "--eval-every", str(spec["eval_every"]), "--out", str(path)])
        torch.manual_seed(spec["seed"])
        model = copy.deepcopy(base).requires_grad_(True)
        try:
            lab.train_rl(cfg, method, model, base, tokenizer, splits["train"], path, splits[spec["split"]], on_step)
        except SystemExit as exc:  # reco_mini stops before a non-finite gradient reaches the weights
            stopped = str(exc.code)
        trajectory = read_jsonl(path / "trajectory.jsonl")
    result = {"spec": spec, "stopped": stopped, "trajectory": trajectory, "wall_time_s": round(time.time() - start, 1),
              "torch_threads": torch.get_num_threads()}
    (path / "result.json.tmp").write_text(json.dumps(finite_or_none(result)))
    (path / "result.json.tmp").replace(path / "result.json")  # atomic: an interrupted run is redone, never half-read
    return result


_CTX: dict = {}  # per worker process: the base, tokenizer and splits, loaded once


def load_context(flags: list[str]) -> dict:
    cfg = lab.parse_config([*flags, "--seed", "0"])
    splits, tokenizer = make_splits(cfg), char_tokenizer()
    base = load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"])).requires_grad_(False)
    return {"splits": splits, "tokenizer": tokenizer, "base": base}


def _init_worker(flags: list[str], threads: int) -> None:
    torch.set_num_threads(threads)
    _CTX.update(load_context(flags))


def _run(spec: dict, plan: dict) -> dict:
    return run_one(spec, plan, _CTX)


def run_all(specs: list[dict], plan: dict, jobs: int, threads: int, desc: str) -> None:
    """Run the unfinished specs, in this process or in `jobs` worker processes (longest first)."""
    todo = [s for s in specs if not (run_dir(Path(plan["out"]), s) / "result.json").exists()]
    if not todo:
        return
    todo.sort(key=lambda s: s["method"] == "base")
    bar = tqdm(total=len(todo), desc=desc)
    if jobs == 1:
        previous = torch.get_num_threads()
        _init_worker(plan["flags"], threads)
        for spec in todo:
            _run(spec, plan)
            bar.update()
        torch.set_num_threads(previous)
    else:
        load_context(plan["flags"])  # train and cache the SFT base once, here, before the workers start
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_init_worker,
                                 initargs=(plan["flags"], threads)) as pool:
            for future in as_completed([pool.submit(_run, s, plan) for s in todo]):
                future.result()
                bar.update()
    bar.close()


def load_results(specs: list[dict], plan: dict) -> list[dict]:
    paths = [run_dir(Path(plan["out"]), s) / "result.json" for s in specs]
    return [json.loads(p.read_text()) for p in paths if p.exists()]


# =============================================================================
# The phases' specs and the selection
# =============================================================================

def select_specs(plan: dict) -> list[dict]:
    return [{"phase": "select", "method": m, "lr": lr, "clip": clip, "seed": s, "split": "val",
             "eval_every": plan["eval_every"]}
            for m in plan["methods"] for lr in plan["lrs"] for clip in plan["clips"] for s in plan["select"]]


def base_specs(plan: dict) -> list[dict]:
    return ([{"phase": "base", "method": "base", "split": "val", "seed": s} for s in plan["select"]]
            + [{"phase": "base", "method": "base", "split": "test", "seed": s} for s in plan["confirm"]]
            + [{"phase": "base", "method": "base", "split": "val", "seed": s} for s in plan["long"]])


def confirm_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "confirm", "method": m, **choices[m], "seed": s, "split": "test", "eval_every": plan["eval_every"]}
            for m in plan["methods"] for s in plan["confirm"]]


def stress_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "stress", "method": m, "lr": choices[m]["lr"] * f, "clip": choices[m]["clip"], "factor": f,
             "seed": s, "split": "val", "eval_every": plan["steps"]}
            for m in plan["stress_methods"] for f in plan["stress_factors"] for s in plan["stress"]]


def long_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "long", "method": m, **choices[m], "seed": s, "split": "val", "steps": plan["long_steps"],
             "eval_every": plan["long_eval_every"]} for m in plan["long_methods"] for s in plan["long"]]


def final(result: dict) -> dict:
    return result["trajectory"][-1] if result["trajectory"] else None


def diverged(result: dict, plan: dict) -> dict:
    log = read_jsonl(run_dir(Path(plan["out"]), result["spec"]) / "log.jsonl")
    return divergence(log, result["stopped"], KL_LIMIT)


def selection(results: list[dict], plan: dict) -> dict:
    """SELECTION_RULE applied to the finished selection runs: every setting's scores and each method's choice."""
    scores, choices = [], {}
    for m in plan["methods"]:
        rows = []
        for lr in plan["lrs"]:
            for clip in plan["clips"]:
                runs = [r for r in results if r["spec"]["method"] == m and r["spec"]["lr"] == lr
                        and r["spec"]["clip"] == clip]
                ends = [final(r) for r in runs]
                finished = [e is not None and e["step"] == plan["steps"] for e in ends]  # False: stopped early
                row = {"method": m, "lr": lr, "clip": clip, "seeds": [r["spec"]["seed"] for r in runs],
                       "complete": len(runs) == len(plan["select"]),
                       "diverged": not all(finished) or any(diverged(r, plan)["diverged"] for r in runs)}
                if row["complete"] and all(finished):
                    row["val_pass_at_1"] = sum(e["pass_at_k"]["1"] for e in ends) / len(ends)
                    row["val_pass_at_256"] = sum(e["pass_at_k"][top_k(e)] for e in ends) / len(ends)
                rows.append(row)
        scores += rows
        eligible = [r for r in rows if r["complete"] and not r["diverged"] and "val_pass_at_1" in r]
        if len(eligible) and all(r["complete"] for r in rows):
            best = max(r["val_pass_at_1"] for r in eligible)
            tied = [r for r in eligible if r["val_pass_at_1"] >= best - TIE]
            pick = max(tied, key=lambda r: r["val_pass_at_256"])
            choices[m] = {"lr": pick["lr"], "clip": pick["clip"]}
    return {"rule": SELECTION_RULE, "scores": scores, "choices": choices}


def top_k(row: dict) -> str:
    return str(max(int(k) for k in row["pass_at_k"]))


# =============================================================================
# Trajectories, the frontier and the hypotheses
# =============================================================================

def curve(result: dict, base: dict | None) -> list[tuple[int, float, float]]:
    """(step, Pass@1, Pass@n) along a run, from the base at step 0."""
    rows = ([base] if base else []) + result["trajectory"]
    return [(r["step"], r["pass_at_k"]["1"], r["pass_at_k"][top_k(r)]) for r in rows]


def crossing(points: list[tuple[int, float, float]], level: float) -> tuple[float, float] | None:
    """(step, Pass@n) where Pass@1 first reaches `level` along the trajectory, linearly interpolated; None if never."""
    for i, (step, p1, pn) in enumerate(points):
        if p1 >= level:
            if i == 0:
                return step, pn
            step_prev, p1_prev, pn_prev = points[i - 1]
            t = (level - p1_prev) / (p1 - p1_prev)
            return step_prev + t * (step - step_prev), pn_prev + t * (pn - pn_prev)
    return None


def at_level(points: list[tuple[int, float, float]], level: float) -> float | None:
    """Pass@n where Pass@1 first reaches `level` (see crossing)."""
    hit = crossing(points, level)
    return None if hit is None else hit[1]


def matched_level(results: list[dict], bases: dict, choices: dict) -> float | None:
    """The highest LEVELS value that every selection run at its method's chosen setting reaches."""
    chosen = [r for r in results if choices.get(r["spec"]["method"]) == {"lr": r["spec"]["lr"], "clip": r["spec"]["clip"]}]
    reached = [lv for lv in LEVELS if chosen and all(at_level(curve(r, bases.get(r["spec"]["seed"])), lv) is not None
                                                       for r in chosen)]
    return max(reached) if reached else None


def paired(a: dict[int, float | None], b: dict[int, float | None]) -> tuple[list[int], list[float]]:
    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None)
    return seeds, [a[s] - b[s] for s in seeds]


def hypotheses(per_method: dict, level: float | None) -> list[dict]:
    out = []
    for name, statement, method, kind in HYPOTHESES:
        row = {"name": name, "statement": statement, "method": method, "reference": REFERENCE}
        if method not in per_method or REFERENCE not in per_method:
            out.append({**row, "estimate": None, "ci_low": None, "ci_high": None, "p": None, "n": 0})
            continue
        if kind == "frontier":
            key = f"{level:.2f}" if level is not None else None
            seeds, diffs = paired(per_method[method]["at_level"].get(key, {}), per_method[REFERENCE]["at_level"].get(key, {}))
            test, p_key = paired_test(diffs) if len(diffs) >= 2 else {}, "p_greater"
            row["level"] = level
        else:
            seeds, diffs = paired(per_method[method]["final_p1"], per_method[REFERENCE]["final_p1"])
            test, p_key = equivalence_test(diffs, EQUIVALENCE_MARGIN) if len(diffs) >= 2 else {}, "p_equivalent"
            row["margin"] = EQUIVALENCE_MARGIN
        ci = test.get("ci95")
        out.append({**row, "seeds": seeds, "n": len(diffs), "estimate": test.get("mean"),
                    "ci_low": None if ci is None else test["mean"] - ci, "ci_high": None if ci is None else test["mean"] + ci,
                    "p": test.get(p_key)})
    for row, adjusted in zip(out, holm([r["p"] for r in out])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
    return out


# =============================================================================
# The mechanism: solution forms of the correct samples
# =============================================================================

def form_stats(row: dict, rare_only: list[bool]) -> dict:
    """Share of correct samples per form (pooled over problems), their entropy in bits, and the share of rare-only
    problems solved at least once."""
    totals = [sum(col) for col in zip(*row["forms"])]
    n = sum(totals)
    shares = [t / n if n else 0.0 for t in totals]
    entropy = -sum(p * math.log2(p) for p in shares if p > 0)
    solved = [c > 0 for c, rare in zip(row["counts"], rare_only) if rare]
    return {"shares": shares, "entropy_bits": entropy, "rare_coverage": sum(solved) / len(solved) if solved else None}


# =============================================================================
# Aggregation
# =============================================================================

def aggregate(plan: dict, ctx_splits: dict, wall_time_s: float) -> dict:
    sel_results = load_results(select_specs(plan), plan)
    bases = {(r["spec"]["split"], r["spec"]["seed"]): final(r) for r in load_results(base_specs(plan), plan)}
    sel = selection(sel_results, plan)
    choices = sel["choices"]
    level = matched_level(sel_results, {s: bases.get(("val", s)) for s in plan["select"]}, choices)
    complete = {"select": all(s["complete"] for s in sel["scores"]) and len(choices) == len(plan["methods"])}
    methods, per_method, forms, stress = {}, {}, {}, {}
    rare_only = [solving_forms(p) <= RARE_FORMS for p in ctx_splits["test"]]
    confirm = load_results(confirm_specs(plan, choices), plan) if complete["select"] else []
    complete["confirm"] = complete["select"] and len(confirm) == len(plan["methods"]) * len(plan["confirm"])
    for m in plan["methods"]:
        runs = sorted((r for r in confirm if r["spec"]["method"] == m), key=lambda r: r["spec"]["seed"])
        if not runs:
            continue
        curves = {r["spec"]["seed"]: curve(r, bases.get(("test", r["spec"]["seed"]))) for r in runs}
        ends = {r["spec"]["seed"]: final(r) for r in runs}
        methods[m] = {
            "setting": choices[m], "seeds": [r["spec"]["seed"] for r in runs],
            "final": {"step": [ends[s]["step"] for s in curves],
                      "pass_at_1": [ends[s]["pass_at_k"]["1"] for s in curves],
                      "pass_at_256": [ends[s]["pass_at_k"][top_k(ends[s])] for s in curves],
                      "distinct_correct": [ends[s]["distinct_correct"] for s in curves]},
            "trajectory": [[{"step": st, "pass_at_1": p1, "pass_at_256": pn} for st, p1, pn in curves[s]] for s in curves],
            "at_level": {f"{lv:.2f}": [at_level(curves[s], lv) for s in curves] for lv in LEVELS},
            "step_at_level": {f"{lv:.2f}": [(crossing(curves[s], lv) or (None,))[0] for s in curves] for lv in LEVELS},
            "stopped": [r["stopped"] for r in runs],
        }
        per_method[m] = {"final_p1": {s: ends[s]["pass_at_k"]["1"] for s in curves},
                         "final_pn": {s: ends[s]["pass_at_k"][top_k(ends[s])] for s in curves},
                         "at_level": {f"{lv:.2f}": dict(zip(curves, methods[m]["at_level"][f"{lv:.2f}"])) for lv in LEVELS}}
        by_step: dict[int, list[dict]] = {}
        for r in runs:
            for row in r["trajectory"]:
                by_step.setdefault(row["step"], []).append(form_stats(row, rare_only))
        forms[m] = {str(st): _form_summary(rows) for st, rows in sorted(by_step.items())}
    test_bases = [bases[("test", s)] for s in plan["confirm"] if bases.get(("test", s))]
    if test_bases:
        methods["base"] = {"seeds": [s for s in plan["confirm"] if bases.get(("test", s))],
                           "final": {"pass_at_1": [b["pass_at_k"]["1"] for b in test_bases],
                                     "pass_at_256": [b["pass_at_k"][top_k(b)] for b in test_bases],
                                     "distinct_correct": [b["distinct_correct"] for b in test_bases]}}
        forms["base"] = {"0": _form_summary([form_stats(b, rare_only) for b in test_bases])}
    frontier = {}
    for lv in LEVELS:
        key = f"{lv:.2f}"
        frontier[key] = {m: _stats([v for v in per_method[m]["at_level"][key].values() if v is not None],
                                   len(per_method[m]["at_level"][key])) for m in per_method}
        for m in (m for m in per_method if REFERENCE in per_method and m != REFERENCE):
            diffs = paired(per_method[m]["at_level"][key], per_method[REFERENCE]["at_level"][key])[1]
            if len(diffs) >= 2:
                frontier[key].setdefault("differences", {})[f"{m} - {REFERENCE}"] = paired_test(diffs)
    final_diffs = {}
    if REFERENCE in per_method:
        for m in per_method:
            if m != REFERENCE:
                final_diffs[f"{m} - {REFERENCE}"] = {
                    "pass_at_1": paired_test(paired(per_method[m]["final_p1"], per_method[REFERENCE]["final_p1"])[1]),
                    "pass_at_256": paired_test(paired(per_method[m]["final_pn"], per_method[REFERENCE]["final_pn"])[1])}
    stress_results = load_results(stress_specs(plan, choices), plan) if complete["select"] else []
    complete["stress"] = complete["select"] and len(stress_results) == len(stress_specs(plan, choices))
    for r in stress_results:
        key = f"{r['spec']['method']} x{r['spec']['factor']}"
        log = read_jsonl(run_dir(Path(plan["out"]), r["spec"]) / "log.jsonl")
        flags = diverged(r, plan)
        entry = stress.setdefault(key, {"method": r["spec"]["method"], "factor": r["spec"]["factor"], "lr": r["spec"]["lr"],
                                        "clip": r["spec"]["clip"], "runs": []})
        entry["runs"].append({
            "seed": r["spec"]["seed"], **{k: flags[k] for k in ("diverged", "non_finite", "reward_collapse", "kl_too_high")},
            "stopped": r["stopped"], "kl_base_last_window": flags["kl_base_last_window"],
            "rho_max": max((row["rho_max"] for row in log if "rho_max" in row), default=None),
            "clip_frac_low": _mean([row["clip_frac_low"] for row in log]),
            "clip_frac_high": _mean([row["clip_frac_high"] for row in log]),
            "grad_norm_mean": _mean([row["grad_norm"] for row in log]),
            "final_val_pass_at_1": final(r)["pass_at_k"]["1"] if final(r) else None})
    for entry in stress.values():
        entry["divergence_rate"] = sum(x["diverged"] for x in entry["runs"]) / len(entry["runs"])
    long_results = load_results(long_specs(plan, choices), plan) if complete["select"] else []
    complete["long"] = complete["select"] and len(long_results) == len(long_specs(plan, choices))
    all_runs = sel_results + confirm + stress_results + long_results + load_results(base_specs(plan), plan)
    return finite_or_none({
        "partial": not all(complete.values()), "complete": complete,
        "design": {"steps": plan["steps"], "eval_every": plan["eval_every"], "n_eval": lab.parse_config(plan["flags"]).n_eval,
                   "methods": {m: METHODS[m] for m in plan["methods"]}, "reference": REFERENCE,
                   "select_seeds": list(plan["select"]), "confirm_seeds": list(plan["confirm"]),
                   "stress_seeds": list(plan["stress"]), "levels": list(LEVELS), "alpha": ALPHA,
                   "kl_limit": KL_LIMIT, "rare_forms": sorted(RARE_FORMS), "flags": plan["flags"],
                   "base": "one SFT base for every run: reco_mini's cached base for seed 0 (runs/cache)"},
        "selection": sel, "matched_level": level, "methods": methods, "frontier": frontier, "final_differences": final_diffs,
        "hypotheses": hypotheses(per_method, level),
        "forms": {"forms": FORMS, "rare_forms": sorted(RARE_FORMS), "rare_only_problems": sum(rare_only),
                  "test_problems": len(rare_only), "by_method": forms},
        "stress": stress,
        "long": long_training(long_results, {s: bases.get(("val", s)) for s in plan["long"]}, plan),
        "compute": {"runs": len(all_runs), "run_time_s": round(sum(r["wall_time_s"] for r in all_runs), 1),
                    "this_invocation_wall_s": round(wall_time_s, 1)},
    })


def long_training(results: list[dict], bases: dict, plan: dict) -> dict:
    """Exploratory: validation Pass@1 along a longer run (the plateau), and Pass@256 at matched Pass@1 levels that
    the confirmatory runs do not reach, paired by seed against the reference."""
    out = {"exploratory": True, "steps": plan["long_steps"], "eval_every": plan["long_eval_every"], "split": "val",
           "seeds": list(plan["long"]), "levels": list(LONG_LEVELS), "methods": {}, "frontier": {}}
    at: dict[str, dict] = {}
    for m in plan["long_methods"]:
        runs = sorted((r for r in results if r["spec"]["method"] == m), key=lambda r: r["spec"]["seed"])
        if not runs:
            continue
        curves = {r["spec"]["seed"]: curve(r, bases.get(r["spec"]["seed"])) for r in runs}
        steps = sorted({st for c in curves.values() for st, _, _ in c})
        out["methods"][m] = {
            "seeds": list(curves), "stopped": [r["stopped"] for r in runs],
            "pass_at_1_by_step": {str(st): summarize([p1 for c in curves.values() for s2, p1, _ in c if s2 == st])
                                  for st in steps},
            "pass_at_256_by_step": {str(st): summarize([pn for c in curves.values() for s2, _, pn in c if s2 == st])
                                    for st in steps}}
        at[m] = {f"{lv:.2f}": {s: at_level(c, lv) for s, c in curves.items()} for lv in LONG_LEVELS}
    for lv in (f"{x:.2f}" for x in LONG_LEVELS):
        row = {m: {"n": sum(v is not None for v in at[m][lv].values()), "values": list(at[m][lv].values())} for m in at}
        for m in (m for m in at if REFERENCE in at and m != REFERENCE):
            diffs = paired(at[m][lv], at[REFERENCE][lv])[1]
            if len(diffs) >= 2:
                row.setdefault("differences", {})[f"{m} - {REFERENCE}"] = paired_test(diffs)
        out["frontier"][lv] = row
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _stats(values: list[float], n_seeds: int) -> dict:
    return {**(summarize(values) if values else {"n": 0, "values": []}), "n_seeds": n_seeds}


def _form_summary(rows: list[dict]) -> dict:
    rare = [r["rare_coverage"] for r in rows if r["rare_coverage"] is not None]
    return {"shares": [_mean(col) for col in zip(*(r["shares"] for r in rows))],
            "entropy_bits": summarize([r["entropy_bits"] for r in rows]),
            "rare_coverage": summarize(rare) if rare else None}


# =============================================================================
# Plot and README
# =============================================================================

def plot(summary: dict, path: Path) -> None:
    """The frontier (Pass@256 against Pass@1, mean and 95% band over seeds at each matched level), Pass@1 and
    Pass@256 along training, and the coverage of problems only the rarest forms solve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    methods = {m: v for m, v in summary["methods"].items() if m != "base"}
    base = summary["methods"].get("base", {}).get("final")
    start = _mean(base["pass_at_1"]) if base else 0.0  # below the base's Pass@1 every curve is the base itself
    grid = [lv for lv in (round(0.05 + 0.01 * i, 2) for i in range(31)) if lv >= start]
    for m, v in methods.items():
        curves = [[(p["step"], p["pass_at_1"], p["pass_at_256"]) for p in t] for t in v["trajectory"]]
        xs, ys, lo, hi = [], [], [], []
        for lv in grid:
            vals = [y for y in (at_level(c, lv) for c in curves) if y is not None]
            if len(vals) * 2 >= len(curves) and len(vals) >= 2:
                s = summarize(vals)
                xs.append(lv), ys.append(s["mean"]), lo.append(s["mean"] - s["ci95"]), hi.append(s["mean"] + s["ci95"])
        line = axes[0, 0].plot(xs, ys, label=f"{m} (lr {v['setting']['lr']:g}, clip {v['setting']['clip']:g})")[0]
        axes[0, 0].fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        steps = [p[0] for p in curves[0]]
        for ax, col in ((axes[0, 1], 1), (axes[1, 0], 2)):
            per_step = [summarize([c[i][col] for c in curves if i < len(c)]) for i in range(len(steps))]
            ax.plot(steps, [s["mean"] for s in per_step], marker="o", ms=3, color=line.get_color(), label=m)
            ax.fill_between(steps, [s["mean"] - (s["ci95"] or 0) for s in per_step],
                            [s["mean"] + (s["ci95"] or 0) for s in per_step], color=line.get_color(), alpha=0.15)
        rare = summary["forms"]["by_method"].get(m, {})
        ax_steps = sorted(int(st) for st in rare if rare[st]["rare_coverage"])
        axes[1, 1].plot(ax_steps, [rare[str(st)]["rare_coverage"]["mean"] for st in ax_steps], marker="o", ms=3,
                        color=line.get_color(), label=m)
    if base:
        axes[0, 0].scatter([start], [_mean(base["pass_at_256"])], color="k", marker="*", s=120, label="base")
        base_rare = summary["forms"]["by_method"]["base"]["0"]["rare_coverage"]
        if base_rare:
            axes[1, 1].scatter([0], [base_rare["mean"]], color="k", marker="*", s=120, label="base")
    for lv in LEVELS:
        axes[0, 0].axvline(lv, color="grey", lw=0.5, ls=":")
    titles = [("matched frontier (test): Pass@256 at the step where Pass@1 first reaches x", "Pass@1", "Pass@256"),
              ("Pass@1 along training (test)", "RL step", "Pass@1"), ("Pass@256 along training (test)", "RL step", "Pass@256"),
              ("problems only the two rarest SFT forms solve: share solved (test)", "RL step", "share solved in 256")]
    for ax, (title, xl, yl) in zip(axes.flat, titles):
        ax.set(title=title, xlabel=xl, ylabel=yl)
        ax.title.set_fontsize(9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(s: dict | None, digits: int = 3) -> str:
    if not s or s.get("mean") is None:
        return "–"
    ci = f" ± {s['ci95']:.{digits}f}" if s.get("ci95") is not None else ""
    return f"{s['mean']:+.{digits}f}{ci}" if s.get("signed") else f"{s['mean']:.{digits}f}{ci}"


def _signed(s: dict | None) -> str:
    return _ci({**s, "signed": True}) if s else "–"


def _interval(t: dict | None) -> str:
    if not t or t.get("mean") is None:
        return "–"
    return f"{t['mean']:+.3f} ± {t['ci95']:.3f}" if t.get("ci95") is not None else f"{t['mean']:+.3f}"


def _excludes_zero(t: dict | None) -> int:
    """+1 / -1 when a paired difference's 95% CI lies above / below zero, else 0."""
    if not t or t.get("mean") is None or t.get("ci95") is None:
        return 0
    return 1 if t["mean"] - t["ci95"] > 0 else -1 if t["mean"] + t["ci95"] < 0 else 0


def claims(summary: dict) -> list[str]:
    """The study's results in plain sentences, each decided by a rule on the JSON (so nulls are said, not hidden)."""
    out, level = [], summary["matched_level"]
    for h in summary["hypotheses"]:
        if h["estimate"] is None:
            out.append(f"{h['name']} ({h['statement']}): not testable, no paired seeds.")
            continue
        ci = f"({h['ci_low']:+.3f}, {h['ci_high']:+.3f})" if h["ci_low"] is not None else "(no CI)"
        verdict = "**confirmed**" if h["confirmed"] else "**not confirmed**"
        out.append(f"{h['name']} ({h['statement']}{f', L* = {level}' if 'level' in h else ''}): {verdict}; "
                   f"estimate {h['estimate']:+.3f}, 95% CI {ci}, Holm-adjusted p = {h['p_holm']:.3g}.")
    fd, front = summary["final_differences"], summary["frontier"]
    for m in (m for m in summary["methods"] if m not in ("base", REFERENCE)):
        key = f"{m} - {REFERENCE}"
        final = fd.get(key, {})
        matched = [(lv, row["differences"][key]) for lv, row in front.items() if key in row.get("differences", {})]
        text = (f"{m} − {REFERENCE} at the final checkpoint: Pass@1 {_interval(final.get('pass_at_1'))}, Pass@256 "
                f"{_interval(final.get('pass_at_256'))}; at matched Pass@1: "
                + (", ".join(f"{_interval(t)} at {lv}" for lv, t in matched) or "no level reached by both") + ".")
        p1, pn = _excludes_zero(final.get("pass_at_1")), _excludes_zero(final.get("pass_at_256"))
        above = [lv for lv, t in matched if _excludes_zero(t) > 0]
        if pn > 0:
            text += (" Its final coverage gain comes with a lower Pass@1, the trade-off of a less-trained policy"
                     if p1 < 0 else " Its final coverage gain comes without a measurable Pass@1 cost")
            if not above:
                text += ("; at matched Pass@1 the gain is above zero at no level, so this study cannot separate it from "
                         "training progress.")
            elif len(above) < len(matched):
                text += (f"; at matched Pass@1 the gain is above zero at {', '.join(above)} but not at "
                         f"{', '.join(lv for lv, _ in matched if lv not in above)}.")
            else:
                text += "; at matched Pass@1 the gain is above zero at every level both reach."
        elif not above:
            text += f" No coverage gain over {REFERENCE} is measurable, at the final checkpoint or at matched Pass@1."
        if m in PEER_REPORTED:
            text += f" For scale, {PEER_REPORTED[m]}."
        out.append(text)
    if summary["stress"]:
        runs = [r for e in summary["stress"].values() for r in e["runs"]]
        by_factor = {}
        for e in summary["stress"].values():
            by_factor.setdefault(e["factor"], []).append(
                f"{e['method']} {sum(r['diverged'] for r in e['runs'])}/{len(e['runs'])} (lr {e['lr']:g})")
        rho = [r["rho_max"] for r in runs if r["rho_max"] is not None]
        out.append(f"Stress: {sum(r['non_finite'] for r in runs)} of {len(runs)} runs produced a non-finite value; "
                   "diverged runs: " + "; ".join(f"at {f}× the chosen lr {', '.join(v)}" for f, v in by_factor.items())
                   + (f". The largest ρ under stress was {max(rho):.2f} (the cap is {rm.LossConfig().variance_cap:g})."
                      if rho else "."))
    forms = summary["forms"]["by_method"]
    if "base" in forms and forms.get(REFERENCE):
        last = {m: v[max(v, key=int)] for m, v in forms.items() if m != "base"}
        base = forms["base"]["0"]
        ent = ", ".join(f"{m} {v['entropy_bits']['mean']:.2f}" for m, v in last.items())
        rare = ", ".join(f"{m} {v['rare_coverage']['mean']:.3f}" for m, v in last.items() if v["rare_coverage"])
        base_rare = f"{base['rare_coverage']['mean']:.3f}" if base["rare_coverage"] else "–"
        ref = last[REFERENCE]["shares"]
        gain = max(range(len(FORMS)), key=lambda f: ref[f] - base["shares"][f])
        name = FORMS[gain].replace("{", "").replace("}", "")
        out.append(f"Mechanism: {REFERENCE} moves its correct samples toward the form {name} (SFT prior "
                   f"{SFT_FORM_PRIOR[gain]:.3f}): its share of correct samples is {base['shares'][gain]:.2f} at the base "
                   "and, at the final checkpoint, " + ", ".join(f"{m} {v['shares'][gain]:.2f}" for m, v in last.items())
                   + ".")
        out.append(f"Mechanism: the entropy over solution forms of the correct samples is {base['entropy_bits']['mean']:.2f} "
                   f"bits at the base and, at the final checkpoint, {ent}; the share of rare-form-only problems solved "
                   f"is {base_rare} at the base and {rare or '–'} at the final checkpoint.")
    return out


def render_readme(summary: dict, results_path: str, png: str) -> str:
    d, out = summary["design"], []
    out.append(f"_Generated from `{results_path}` by `python experiments/frontier_study.py --aggregate-only "
               "--write-readme docs/results.md`; rerun it rather than editing._")
    if summary["partial"]:
        done = ", ".join(p for p, ok in summary["complete"].items() if ok) or "none"
        out.append(f"\n**PARTIAL: the study has not finished.** Phases complete: {done}. Numbers below cover only the runs "
                   "that have finished and will change.")
    methods = [m for m in summary["methods"] if m != "base"]
    out.append(f"\nCountdown, one SFT base; RL {d['steps']} steps, evaluated every {d['eval_every']} steps on "
               f"{summary['forms']['test_problems']} held-out problems × {d['n_eval']} samples. Confirmatory seeds "
               f"{d['confirm_seeds'][0]}–{d['confirm_seeds'][-1]} on the test split; settings chosen on the validation "
               f"split (seeds {', '.join(map(str, d['select_seeds']))}). "
               "Cells are mean ± 95% CI over seeds (t); differences are paired by seed.")
    if methods:
        out.append(f"\n![The matched frontier and the training trajectories]({png})")
    if methods:
        level = summary["matched_level"]
        out.append("\n**What the study shows** (sentences generated from the JSON by `claims()`):\n")
        out += [f"- {c}" for c in claims(summary)]
        out.append(f"\n**Pass@256 at matched Pass@1** (interpolated where each run's Pass@1 first reaches the level; "
                   f"n = seeds that reach it; step = the mean interpolated RL step where they reach it). "
                   f"L* = {level if level is not None else '–'} was fixed from the selection runs.\n")
        diffs = [m for m in methods if m != REFERENCE]
        out.append("| Pass@1 level | " + " | ".join(methods) + " | " + " | ".join(f"{m} − {REFERENCE}" for m in diffs) + " |")
        out.append("|---" * (1 + len(methods) + len(diffs)) + "|")
        for key, row in summary["frontier"].items():
            steps = {m: _mean([x for x in summary["methods"][m]["step_at_level"][key] if x is not None]) for m in methods}
            cells = [f"{_ci(row[m])} (n={row[m]['n']}" + (f", step {steps[m]:.0f})" if steps[m] is not None else ")")
                     for m in methods]
            cells += [_signed(row.get("differences", {}).get(f"{m} - {REFERENCE}")) for m in diffs]
            out.append(f"| {key} | " + " | ".join(cells) + " |")
        out.append("\n**Final checkpoint** (step " + str(d["steps"]) + "):\n")
        out.append("| method | setting | Pass@1 | Pass@256 | distinct correct | Pass@1 − grpo | Pass@256 − grpo |")
        out.append("|---|---|---|---|---|---|---|")
        for m, v in summary["methods"].items():
            f = v["final"]
            fd = summary["final_differences"].get(f"{m} - {REFERENCE}", {})
            setting = f"lr {v['setting']['lr']:g}, clip {v['setting']['clip']:g}" if "setting" in v else "–"
            out.append(f"| {m} | {setting} | {_ci(summarize(f['pass_at_1']))} | {_ci(summarize(f['pass_at_256']))} | "
                       f"{_ci(summarize(f['distinct_correct']), 2)} | {_signed(fd.get('pass_at_1'))} | "
                       f"{_signed(fd.get('pass_at_256'))} |")
    out.append(f"\n**Hypotheses** (declared before the confirmatory run; one-sided paired t-tests, H2 a TOST equivalence "
               f"test with margin {EQUIVALENCE_MARGIN}; Holm over the family at α = {summary['design']['alpha']}):\n")
    out.append("| | hypothesis | estimate (95% CI) | n | p | p (Holm) | confirmed |")
    out.append("|---|---|---|---|---|---|---|")
    for h in summary["hypotheses"]:
        est = "–" if h["estimate"] is None else f"{h['estimate']:+.3f} ({h['ci_low']:+.3f}, {h['ci_high']:+.3f})" \
            if h["ci_low"] is not None else f"{h['estimate']:+.3f}"
        p = "–" if h["p"] is None else f"{h['p']:.3g}"
        ph = "–" if h["p_holm"] is None else f"{h['p_holm']:.3g}"
        out.append(f"| {h['name']} | {h['statement']} | {est} | {h['n']} | {p} | {ph} | "
                   f"{'yes' if h['confirmed'] else 'no'} |")
    sel = summary["selection"]
    out.append(f"\n**Selection** (validation split). Rule: {sel['rule']}\n")
    out.append("| method | lr | grad clip | val Pass@1 | val Pass@256 | diverged | chosen |")
    out.append("|---|---|---|---|---|---|---|")
    for s in sel["scores"]:
        chosen = sel["choices"].get(s["method"]) == {"lr": s["lr"], "clip": s["clip"]}
        v1 = f"{s['val_pass_at_1']:.3f}" if "val_pass_at_1" in s else "–"
        vn = f"{s['val_pass_at_256']:.3f}" if "val_pass_at_256" in s else "–"
        out.append(f"| {s['method']} | {s['lr']:g} | {s['clip']:g} | {v1} | {vn} | {'yes' if s['diverged'] else 'no'} | "
                   f"{'**yes**' if chosen else ''} |")
    fm = summary["forms"]
    if fm["by_method"]:
        out.append(f"\n**Mechanism: solution forms of the correct samples** (test split; {fm['rare_only_problems']} of "
                   f"{fm['test_problems']} problems can only be solved by the two rarest SFT forms, "
                   f"{', '.join(FORMS[i].replace('{', '').replace('}', '') for i in fm['rare_forms'])}):\n")
        out.append("| method | step | " + " | ".join(f.replace("{", "").replace("}", "") for f in FORMS)
                   + " | entropy (bits) | rare-only problems solved |")
        out.append("|---" * (4 + len(FORMS)) + "|")
        for m, by_step in fm["by_method"].items():
            for st in (s for s in (min(by_step, key=int), max(by_step, key=int)) if s in by_step):
                row = by_step[st]
                shares = " | ".join(f"{x:.2f}" for x in row["shares"][: len(FORMS)])
                out.append(f"| {m} | {st} | {shares} | {_ci(row['entropy_bits'], 2)} | {_ci(row['rare_coverage'])} |")
                if m == "base":
                    break
    if summary["stress"]:
        out.append(f"\n**Stress** (validation; a run diverged if a value was non-finite, its last-{10}-step reward fell "
                   f"below half its best, or its last-10-step KL to the base exceeded {summary['design']['kl_limit']}):\n")
        out.append("| method × lr factor | lr | diverged | max ρ | clip frac low / high | grad norm | final val Pass@1 |")
        out.append("|---|---|---|---|---|---|---|")
        for key, e in summary["stress"].items():
            runs = e["runs"]
            rho = [r["rho_max"] for r in runs if r["rho_max"] is not None]
            p1 = [r["final_val_pass_at_1"] for r in runs if r["final_val_pass_at_1"] is not None]
            clip = f"{_mean([r['clip_frac_low'] for r in runs]):.3f} / {_mean([r['clip_frac_high'] for r in runs]):.3f}"
            out.append(f"| {key} | {e['lr']:g} | {sum(r['diverged'] for r in runs)}/{len(runs)} | "
                       f"{f'{max(rho):.2f}' if rho else '–'} | {clip} | {_mean([r['grad_norm_mean'] for r in runs]):.2f} | "
                       f"{_ci(summarize(p1)) if p1 else '–'} |")
    lt = summary.get("long", {})
    if lt.get("methods"):
        steps = sorted({int(st) for v in lt["methods"].values() for st in v["pass_at_1_by_step"]})
        shown = [st for st in steps if st % 120 == 0 or st == steps[-1]]
        out.append(f"\n**Exploratory, added after the confirmatory run: longer training** ({lt['steps']} steps, "
                   f"validation split, seeds {', '.join(map(str, lt['seeds']))}, each method at its chosen setting; "
                   "not part of the tested hypotheses). Does Pass@1 plateau by step 120, and what does the frontier "
                   "look like at levels that 120 steps do not reach?\n")
        out.append("| method | " + " | ".join(f"Pass@1 at {st}" for st in shown) + " | "
                   + " | ".join(f"Pass@256 at Pass@1 {lv} (n)" for lv in lt["frontier"]) + " |")
        out.append("|---" * (1 + len(shown) + len(lt["frontier"])) + "|")
        for m, v in lt["methods"].items():
            cells = [_ci(v["pass_at_1_by_step"].get(str(st))) for st in shown]
            for row in lt["frontier"].values():
                vals = [x for x in row[m]["values"] if x is not None]
                cells.append(f"{_ci(summarize(vals)) if vals else '–'} ({row[m]['n']})")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
        diffs = [f"{key} at Pass@1 {lv}: {_interval(t)} (n = {t['n']})" for lv, row in lt["frontier"].items()
                 for key, t in row.get("differences", {}).items()]
        if diffs:
            out.append("\nPaired differences at matched Pass@1 (validation): " + "; ".join(diffs) + ".")
    c = summary["compute"]
    out.append(f"\nCompute: {c['runs']} runs, {c['run_time_s'] / 3600:.1f} h summed over the runs' own wall times "
               "(runs overlap under --jobs).")
    return "\n".join(out)


def write_readme(path: Path, block: str) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: {path} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    path.write_text(head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1])


# =============================================================================
# main
# =============================================================================

def make_plan(args: argparse.Namespace) -> dict:
    plan = {"out": args.out, "quick": args.quick, "flags": [], "steps": STEPS, "eval_every": EVAL_EVERY, "lrs": LRS,
            "clips": CLIPS, "methods": list(METHODS), "select": SELECT_SEEDS, "confirm": CONFIRM_SEEDS,
            "stress": STRESS_SEEDS, "stress_methods": STRESS_METHODS, "stress_factors": STRESS_FACTORS,
            "long": LONG_SEEDS, "long_methods": LONG_METHODS, "long_steps": LONG_STEPS, "long_eval_every": LONG_EVAL_EVERY}
    return plan | (QUICK if args.quick else {})


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="select,confirm,stress,long", help="comma-separated phases to run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/frontier, runs/frontier_quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/frontier_study.json; "
                                                       "with --quick, <out>/frontier_study.json)")
    parser.add_argument("--write-readme", default="", help="page to fill between the frontier-study markers "
                                                            "(docs/results.md)")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and grid")
    args = parser.parse_args(argv)
    args.out = args.out or ("runs/frontier_quick" if args.quick else "runs/frontier")
    results = Path(args.results or (f"{args.out}/frontier_study.json" if args.quick else "results/frontier_study.json"))
    plan, start = make_plan(args), time.time()
    phases = set(args.phases.split(","))
    ctx = load_context(plan["flags"])
    if not args.aggregate_only:
        if "select" in phases:
            run_all(select_specs(plan) + base_specs(plan)[: len(plan["select"])], plan, args.jobs, args.threads, "select")
        choices = selection(load_results(select_specs(plan), plan), plan)["choices"]
        if len(choices) == len(plan["methods"]):
            if "confirm" in phases:
                run_all(confirm_specs(plan, choices) + base_specs(plan), plan, args.jobs, args.threads, "confirm")
            if "stress" in phases:
                run_all(stress_specs(plan, choices), plan, args.jobs, args.threads, "stress")
            if "long" in phases:
                run_all(long_specs(plan, choices) + base_specs(plan)[-len(plan["long"]):], plan, args.jobs, args.threads,
                        "long")
    summary = aggregate(plan, ctx["splits"], time.time() - start)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    png = results.with_suffix(".png")
    if summary["methods"]:
        plot(summary, png)
    if args.write_readme:
        image = Path(os.path.relpath(png, Path(args.write_readme).resolve().parent)).as_posix()  # relative to the page
        write_readme(Path(args.write_readme), render_readme(summary, str(results), image))
    print(f"wrote {results}" + (f" and {png}" if summary["methods"] else "") + (" (partial)" if summary["partial"] else ""))
    return summary


if __name__ == "__main__":  # bad input (a malformed or missing file, a bad reco_mini flag): one line, exit code 2
    from reco import cli

    cli.run_entry_point("frontier_study.py", main, (rm.ConfigError, json.JSONDecodeError, FileNotFoundError))
