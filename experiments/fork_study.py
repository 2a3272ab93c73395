"""experiments/fork_study.py: aim the variance ratio at forks, find forks without labels, isolate the response term,
and count stalls (issue 34; pre-registration in docs/fork_study.md, written before any run).

Countdown-long on the long study's committed replacement base (results/long_study_base.pt), the arms of
experiments/fork_arms.py, everything else as experiments/long_study.py runs it (its run_one, pool, archive). Phases:

  detect   one run: rollouts of the base and of a GRPO checkpoint (DETECT) on the validation split; every candidate of
           fork_detect.DETECTORS scored against the labels; the detector chosen by fork_detect.SELECTION_RULE. If it does
           not qualify, the detected arm is dropped and the table is the finding
  base     the base's evaluation on the validation and test splits (the stall rule's reference)
  select   per arm, lr in LRS x SELECT_SEEDS on the validation split; SELECTION_RULE picks each arm's lr
  confirm  each arm at its lr on CONFIRM_SEEDS, test split; HYPOTHESES as one Holm family, TOST +-0.02; stalls
           (STALL_RULE) per arm with Fisher's exact test against grpo. grpo runs of the long study on the same base and
           design are reused (restored from its archive) wherever the chosen lr and the seed match

Every run writes <out>/base-<sha12>/.../result.json atomically; the summary also writes every finished run to
results/fork_study_runs.jsonl.gz, which the next start restores: the study stops and resumes across sessions.

  python experiments/fork_study.py --timing          # 5 RL steps per arm and an evaluation: the budget's inputs
  nohup python experiments/fork_study.py --jobs 2 > runs/fork_study.log 2>&1 &   # start or resume
  python experiments/fork_study.py --status          # runs done / planned and the projected hours, runs nothing
  python experiments/fork_study.py --aggregate-only --write-docs docs/results.md
  python experiments/fork_study.py --quick           # smoke test: tiny model and budget
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import fork_arms  # noqa: E402  (registers the arms in reco_mini before any parse_config)
import fork_detect  # noqa: E402
import lab  # noqa: E402
import long_study as ls  # noqa: E402
from analysis import finite_or_none, holm, summarize  # noqa: E402
from protocol import EQUIVALENCE_MARGIN, compare, covered, measured_curve, write_block  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks import TASKS  # noqa: E402
from reco.tasks.countdown import TOKEN_CLASSES  # noqa: E402

ARMS = {  # arm -> (reco_mini method, extra flags)
    "grpo": ("grpo", []),
    "reco-token": ("reco-token", []),
    "reco-token-fork-oracle": ("reco-token-fork-oracle", []),
    "reco-response-canonical": ("reco-response-canonical", []),
    "reco-response-canonical-positive": ("reco-response-canonical", ["--occurrence-apply", "positive"]),
    "entropy-top20": ("entropy-top20", []),
    "reco-token-fork-detected": ("reco-token-fork-detected", []),
}
DETECTED, REFERENCE = "reco-token-fork-detected", "grpo"
DROP_ORDER = ("reco-response-canonical-positive", "entropy-top20", DETECTED)  # the budget rule drops these, in order
BASE_SHA256 = ls.AMENDMENT["base_sha256"]  # the long study's replacement base, committed as results/long_study_base.pt
LRS, SELECT_SEEDS, CONFIRM_SEEDS = (5e-5, 1e-4, 2e-4), (20, 21), tuple(range(402, 410))
STEPS, EVAL_EVERY, N_EVAL, K = ls.STEPS, ls.EVAL_EVERY, 128, ls.K
DETECT = {"steps": 60, "lr": 1e-4, "seed": 19}  # the GRPO checkpoint of the detector table (seed 19: no other run's)
STALL_AFTER, STALL_MARGIN, ALPHA = 40, 0.02, 0.05
STALL_RULE = (f"A run stalls if it has a checkpoint at step >= {STALL_AFTER} and its Pass@1 at every such checkpoint is at "
              f"most the base's Pass@1 on the same split (same n) + {STALL_MARGIN}. A run stopped for a non-finite value "
              "is counted as diverged, not stalled.")
_STALL_CLAUSE = "a" + STALL_RULE.split(". ")[0][1:]  # its first sentence: not split at the decimal point
SELECTION_RULE = (
    f"Per arm, over lr in {list(LRS)}, {len(SELECT_SEEDS)} seeds each, on the validation split: drop every lr with a "
    f"diverged seed (the long study's rule: a non-finite value, a reward collapse below half its best 10-step mean, or a "
    f"last-10-step KL to the base above {ls.KL_LIMIT}) or a stalled seed ({_STALL_CLAUSE}); choose "
    f"the highest validation Pass@1 at the final checkpoint (step {STEPS}), averaged over seeds; lrs within {ls.TIE} of "
    f"that best are tied, and the tie goes to the highest mean validation Pass@{K}. If every lr is dropped, the arm takes "
    f"the lowest lr, {min(LRS)}, and the summary says so.")
HYPOTHESES = [  # name, statement, arm, reference
    ("H1", "the oracle arm beats GRPO on the primary statistic", "reco-token-fork-oracle", "grpo"),
    ("H2", "the oracle arm beats reco-token on the primary statistic", "reco-token-fork-oracle", "reco-token"),
    ("H3", "the response term alone beats GRPO on the primary statistic", "reco-response-canonical", "grpo"),
    ("H4", "the detected arm beats GRPO on the primary statistic (tested only if the detector qualifies)", DETECTED, "grpo"),
]
PRIMARY = f"the mean Pass@{K} gap over the Pass@1 range both runs' measured checkpoints cover (experiments/protocol.py)"
BUDGET_HOURS, BUDGET_JOBS = 16.0, 2
BUDGET_RULE = (
    f"Project the summed run time of every planned run (the detect run, the base's two evaluations, {len(LRS)} lrs x "
    f"{len(SELECT_SEEDS)} selection seeds and {len(CONFIRM_SEEDS)} confirmation seeds per arm at n = {N_EVAL}, less the "
    f"grpo runs reused from the long study) from the timing (--timing: seconds per RL step of each arm and per "
    f"evaluation). If it is over {BUDGET_HOURS:g} h (about {BUDGET_HOURS / BUDGET_JOBS:g} h of wall time at --jobs "
    f"{BUDGET_JOBS}), drop {', then '.join(DROP_ORDER)} until it fits; never the arms of H1-H3. If even that is over, "
    "the design does not fit (within_budget false) and this pre-registration is amended in writing before any run.")
LONG_ARCHIVE = ROOT / "results" / "long_study_runs.jsonl.gz"
ARCHIVE_WHAT = "finished runs of experiments/fork_study.py (raw results; restored by its next start)"
DIAGNOSTICS = ls.DIAGNOSTICS + [f"arm_share_{c}" for c in TOKEN_CLASSES] + ["select_share", "select_precision",
                                                                            "select_recall"]
QUICK = dict(flags=ls.QUICK["flags"], steps=2, eval_every=1, lrs=(2e-4,), select=(20,), confirm=(402, 403), k="8",
             n_eval=8, arms=["grpo", "reco-token", "reco-token-fork-oracle", "entropy-top20", DETECTED],
             detect={"steps": 2, "lr": 2e-4, "seed": 19}, stall_after=1, base_sha256=None, reuse=None,
             matched_lrs=(4e-4, 2e-4))
BEGIN, END = "<!-- fork-study:begin -->", "<!-- fork-study:end -->"
# Written after the confirmatory runs and before any of these (issue 42; docs/fork_study.md, "Correction"): H2 compared
# the oracle arm at its selected lr 5e-5 with reco-token at its selected 1e-4, and grpo alone moves between those lrs.
# Exploratory, outside the family: every arm of H1-H2 at each of MATCHED_LRS on the confirmation seeds (runs that exist,
# selected or reused, are not rerun; 1e-4 first), the contrasts below at one lr, and the base's test evaluation run again.
MATCHED_LRS, MATCHED_ARMS = (1e-4, 5e-5), ("grpo", "reco-token", "reco-token-fork-oracle")
MATCHED_CONTRASTS = (("reco-token-fork-oracle", "reco-token"), ("reco-token-fork-oracle", "grpo"), ("reco-token", "grpo"))


# =============================================================================
# Specs and runs
# =============================================================================

def tag(plan: dict) -> dict:
    return {"base": plan["base_sha256"][:12]}


def detect_spec(plan: dict) -> dict:
    d = plan["detect"]
    return {"phase": "detect", "arm": "detector", "lr": d["lr"], "seed": d["seed"], "split": "val", "steps": d["steps"]} \
        | tag(plan)


def base_specs(plan: dict) -> list[dict]:
    return [{"phase": "base", "arm": "base", "split": split, "seed": 0} | tag(plan) for split in ("val", "test")]


def select_specs(plan: dict, arms: list[str]) -> list[dict]:
    return [{"phase": "select", "arm": a, "lr": lr, "seed": s, "split": "val"} | tag(plan)
            for a in arms for lr in plan["lrs"] for s in plan["select"]]


def confirm_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "confirm", "arm": a, "lr": choices[a], "seed": s, "split": "test"} | tag(plan)
            for a in choices for s in plan["confirm"]]


def matched_specs(plan: dict) -> list[dict]:
    """The lr-matched comparison's runs: MATCHED_ARMS at each matched lr on the confirmation seeds (the confirmation
    design at a fixed lr; a selected or reused run of the same spec is that run)."""
    return [{"phase": "confirm", "arm": a, "lr": lr, "seed": s, "split": "test"} | tag(plan)
            for lr in plan["matched_lrs"] for a in MATCHED_ARMS for s in plan["confirm"]]


def base_rerun_spec(plan: dict) -> dict:
    """The base's test evaluation done again by this study (the one in the block was reused from the long study)."""
    return base_specs(plan)[1] | {"rerun": True}


def rollout_step(cfg, model, tokenizer, problems: list, seed: int) -> lab.Step:
    """One rollout batch of `model` on `problems` (cfg.group_size each), with its old statistics, as a lab.Step."""
    gen = torch.Generator(cfg.device).manual_seed(seed)
    r = rm.rollout(cfg, model, tokenizer, problems, cfg.group_size, gen)
    A = rm.group_advantages(r["rewards"]).flatten().to(cfg.device)
    old_logp, v_old, entropy = rm.old_stats(cfg, model, (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"]))
    mask = r["mask"].float()
    responses = [row[m.bool()].tolist() for row, m in zip(r["resp"], r["mask"])]
    return lab.Step(problems=problems, group_size=cfg.group_size, texts=r["texts"], resp=r["resp"], mask=mask,
                    responses=responses, rewards=r["rewards"], advantages=A, old_logp=old_logp, v_old=v_old,
                    v_old_mean=(v_old * mask).sum() / mask.sum(), entropy=entropy, weights=torch.ones(len(A)),
                    loss_cfg=lab.loss_config(cfg, "grpo"), task=TASKS["countdown-long"], tokenizer=tokenizer)


def run_detect(spec: dict, plan: dict, ctx: dict) -> dict:
    """The detector table: rollouts of the base and of a GRPO checkpoint (spec's lr, seed and steps from the base) on
    the validation split, one group of the training group size per problem; the rule's choice."""
    path = ls.run_dir(Path(plan["out"]), spec)
    if (path / "result.json").exists():
        return json.loads((path / "result.json").read_text())
    path.mkdir(parents=True, exist_ok=True)
    start, base, tokenizer, splits = time.time(), ctx["base"], ctx["tokenizer"], ctx["splits"]
    cfg = lab.parse_config([*ls.TASK_FLAGS, *plan["flags"], "--method", "grpo", "--seed", str(spec["seed"]), "--lr",
                            str(spec["lr"]), "--steps", str(spec["steps"]), "--out", str(path)])
    seed = ls.EVAL_SEED_BASE + spec["seed"]
    with torch.no_grad():
        sets = {"base": rollout_step(cfg, base, tokenizer, splits["val"], seed)}
    torch.manual_seed(spec["seed"])
    model = copy.deepcopy(base).requires_grad_(True)
    lab.train_rl(cfg, "grpo", model, base, tokenizer, splits["train"], path)
    with torch.no_grad():
        sets[f"grpo step {spec['steps']}"] = rollout_step(cfg, model, tokenizer, splits["val"], seed)
    table = fork_detect.detector_table(sets)
    result = {"spec": spec, "table": table, "choice": fork_detect.choose_detector(table),
              "wall_time_s": round(time.time() - start, 1), "torch_threads": torch.get_num_threads()}
    return ls.save_result(path, finite_or_none(result))


def _run(spec: dict, plan: dict) -> dict:
    """One spec in a worker (long_study's context: splits, tokenizer, base)."""
    if spec["phase"] == "detect":
        return run_detect(spec, plan, ls._CTX)
    if spec["arm"] == DETECTED:
        fork_arms.use_detector(plan["detector"]["chosen"], plan["detector"]["share"])
    return ls.run_one(spec, plan, ls._CTX, arms=ARMS, on_step=fork_arms.on_step, diagnostics=DIAGNOSTICS)


def load_one(spec: dict, plan: dict) -> dict | None:
    results = ls.load_results([spec], plan)
    return results[0] if results else None


# =============================================================================
# Stalls, selection, statistics
# =============================================================================

def stalled(trajectory: list[dict], base_pass_at_1: float, after: int = STALL_AFTER, stopped: str | None = None) -> bool:
    """STALL_RULE on one run's trajectory; a run stopped for a non-finite value (`stopped`) is diverged, never stalled."""
    if stopped:
        return False
    late = [row["pass_at_k"]["1"] for row in trajectory if row["step"] >= after]
    return bool(late) and max(late) <= base_pass_at_1 + STALL_MARGIN


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p of Fisher's exact test on [[a, b], [c, d]]: the probability, under the hypergeometric law with the
    margins fixed, of every table no more probable than the observed one (relative tolerance 1e-7)."""
    row, col, n = a + b, a + c, a + b + c + d

    def pmf(x: int) -> float:
        return math.comb(col, x) * math.comb(n - col, row - x) / math.comb(n, row)
    observed = pmf(a)
    return min(1.0, sum(p for x in range(max(0, row + col - n), min(row, col) + 1)
                        if (p := pmf(x)) <= observed * (1 + 1e-7)))


def selection(results: list[dict], plan: dict, base_val: float | None, arms: list[str]) -> dict:
    """SELECTION_RULE: the long study's rule with a stalled seed counted as a diverged one."""
    marked = []
    for r in results:
        stall = base_val is not None and stalled(r["trajectory"], base_val, plan["stall_after"], r.get("stopped"))
        marked.append(r | {"divergence": r["divergence"] | {"diverged": r["divergence"]["diverged"] or stall}})
    sel = ls.selection(marked, plan | {"arms": arms})
    sel["notes"] = {a: "every lr diverged or stalled: the lowest lr by rule" for a in sel["notes"]}
    return sel | {"rule": SELECTION_RULE}


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def weighted_gap(curves: dict, refs: dict) -> dict:
    """Secondary: each seed's primary gap weighted by the width of its common Pass@1 range; the widths; the pairs
    without any common range (reported, never dropped silently)."""
    from protocol import mean_gap
    widths, gaps, no_overlap = {}, {}, []
    for s in sorted(set(curves) & set(refs)):
        a, b = covered(curves[s]), covered(refs[s])
        gap = mean_gap(curves[s], refs[s])
        if gap is None:
            no_overlap.append(s)
            continue
        widths[s], gaps[s] = min(a[1], b[1]) - max(a[0], b[0]), gap
    total = sum(widths.values())
    return {"widths": widths, "no_overlap": no_overlap,
            "mean": sum(widths[s] * gaps[s] for s in gaps) / total if total > 0 else None}


def comparison(curves: dict, a: str, ref: str, stalls: dict) -> dict:
    """protocol.compare of arm `a` against `ref`, with and without the pairs in which either run stalled, and the
    width-weighted gap."""
    keep = {s for s in curves[a] if not stalls[a].get(s) and not stalls[ref].get(s)}
    return {**compare(curves[a], curves[ref]),
            "without_stalls": compare({s: c for s, c in curves[a].items() if s in keep}, curves[ref])["primary"],
            "width_weighted": weighted_gap(curves[a], curves[ref])}


# =============================================================================
# The correction (issue 42): H2 and the learning rate, the lr-matched runs, the deviations of the code from the text
# =============================================================================

def key(arm: str, lr: float) -> str:
    return f"{arm}@{lr:g}"


def single_point_seeds(curves: dict, refs: dict) -> list[int]:
    """Seeds whose common Pass@1 range is one point: the primary statistic is then a single gap, at full weight."""
    out = []
    for s in sorted(set(curves) & set(refs)):
        a, b = covered(curves[s]), covered(refs[s])
        if a and b and max(a[0], b[0]) == min(a[1], b[1]):
            out.append(s)
    return out


def lr_matched(plan: dict, base_test: float | None) -> dict:
    """MATCHED_CONTRASTS at each matched lr, and each arm's own change between the two lrs (exploratory, unadjusted)."""
    specs = matched_specs(plan)
    runs = ls.load_results(specs, plan)
    curves, stalls = {}, {}
    for r in runs:
        at = key(r["spec"]["arm"], r["spec"]["lr"])
        curves.setdefault(at, {})[r["spec"]["seed"]] = measured_curve(r["trajectory"], plan["k"])
        stalls.setdefault(at, []).append(base_test is not None and stalled(r["trajectory"], base_test, plan["stall_after"],
                                                                          r["stopped"]))

    def contrast(a: str, ref: str) -> dict | None:
        if a not in curves or ref not in curves:
            return None
        c = compare(curves[a], curves[ref])
        return {"primary": c["primary"], "final": c["final"], "single_point_seeds": single_point_seeds(curves[a], curves[ref])}
    contrasts = {f"{key(a, lr)} - {key(ref, lr)}": contrast(key(a, lr), key(ref, lr))
                 for lr in plan["matched_lrs"] for a, ref in MATCHED_CONTRASTS}
    low, high = min(plan["matched_lrs"]), max(plan["matched_lrs"])
    lr_effect = {a: contrast(key(a, low), key(a, high)) for a in MATCHED_ARMS}
    return {"lrs": list(plan["matched_lrs"]), "arms": list(MATCHED_ARMS), "runs": len(runs), "runs_planned": len(specs),
            "partial": len(runs) < len(specs), "seeds": {k2: sorted(v) for k2, v in curves.items()},
            "stalled": {k2: sum(v) for k2, v in stalls.items()},
            "contrasts": {k2: v for k2, v in contrasts.items() if v}, "lr_effect": {k2: v for k2, v in lr_effect.items() if v}}


def deviations(plan: dict, rows: list[dict], curves: dict, detector: dict | None, base: dict, runs: list[dict]) -> list[dict]:
    """Where the code that produced the committed results differs from docs/fork_study.md, and whether each difference
    could change a verdict, computed from the runs (found by an independent recomputation; issue 42)."""
    out = []
    rerun = load_one(base_rerun_spec(plan), plan)
    reused = base.get("test")
    same = None if rerun is None or reused is None else rerun["trajectory"][0]["counts"] == reused["counts"]
    out.append({"name": "base evaluation reused",
                "text": "the base's test evaluation (the stall rule's reference for the confirmation runs) was restored from "
                        "the long study's archive, where the text says nothing is reused when grpo chooses another lr",
                "evidence": "not yet evaluated again" if same is None else
                            "this study evaluated the base on the test split again: " +
                            ("every per-problem count is identical" if same else "the counts differ"),
                "could_change_a_verdict": None if same is None else not same})
    family = [r for r in rows if r["tested"] and r.get("p_greater") is not None]
    for r in family:
        r["single_point_seeds"] = single_point_seeds(curves.get(r["arm"], {}), curves.get(r["reference"], {}))
    drop = {r["name"]: compare({s: c for s, c in curves[r["arm"]].items() if s not in r["single_point_seeds"]},
                               curves[r["reference"]])["primary"] for r in family if r["single_point_seeds"]}
    p = [drop[r["name"]]["p_greater"] if r["name"] in drop else r["p_greater"] for r in family]
    changed = [r["name"] for r, q in zip(family, holm(p)) if (q is not None and q < ALPHA) != r.get("confirmed", False)]
    out.append({"name": "single-point pairs at full weight",
                "text": "a seed pair whose common Pass@1 range is a single point counts as much as any other in the mean",
                "evidence": "; ".join(f"{r['name']}: seeds {r['single_point_seeds']} ({_interval(drop[r['name']])} without "
                                      f"them, {_seeds(drop[r['name']]['n'])})" for r in family if r["single_point_seeds"])
                            or "no pair has a single-point range",
                "without_single_point_pairs": drop, "verdicts_that_change": changed,
                "could_change_a_verdict": bool(changed)})
    if detector is not None:
        # Flagging among every response token instead of the in-grammar ones (whose forks the labels give) can only add
        # non-fork tokens to the pool: recall R can only fall, and F1 = 2PR / (P + R) <= 2R / (1 + R) since P <= 1.
        bound = {d: sum(2 * (x := detector["table"][s]["detectors"][d]["recall"] or 0.0) / (1 + x) for s in detector["table"])
                 / len(detector["table"]) for d in detector["mean_f1"]}
        could = not detector["qualifies"] and max(bound.values()) >= fork_detect.QUALIFY_F1
        out.append({"name": "detectors flag among in-grammar tokens",
                    "text": "the detectors flag tokens only among in-grammar responses, which are known from the labels",
                    "evidence": f"on every response token, a detector's recall can only fall, so its mean F1 is at most "
                                f"mean 2R/(1+R) over the two sets: at most {max(bound.values()):.3f} (best candidate), below "
                                f"{fork_detect.QUALIFY_F1}", "f1_upper_bound": bound, "could_change_a_verdict": could})
    stopped = sum(bool(r.get("stopped")) for r in runs)
    out.append({"name": "stall rule and non-finite stops",
                "text": "the stall rule did not exempt a run stopped for a non-finite value, as the text says (fixed since: "
                        "stalled() now returns False for such a run)",
                "evidence": f"{stopped} of the study's {len(runs)} runs stopped for a non-finite value",
                "could_change_a_verdict": stopped > 0})
    return out


# =============================================================================
# Summary
# =============================================================================

def planned_arms(plan: dict, detector: dict | None) -> list[str]:
    """The plan's arms, less the detected arm once the detect phase found no qualifying detector."""
    return [a for a in plan["arms"] if not (a == DETECTED and detector is not None and not detector["qualifies"])]


def aggregate(plan: dict, wall_s: float, timing: dict | None) -> dict:
    detect = load_one(detect_spec(plan), plan)
    detector = detect["choice"] if detect else None
    arms = planned_arms(plan, detector)
    base = {s["split"]: r["trajectory"][0] for s in base_specs(plan) if (r := load_one(s, plan))}
    base_val = base["val"]["pass_at_k"]["1"] if "val" in base else None
    sel_results = ls.load_results(select_specs(plan, arms), plan)
    sel = selection(sel_results, plan, base_val, arms)
    ready = detect is not None and len(sel["choices"]) == len(arms)
    planned = confirm_specs(plan, sel["choices"]) if ready else []
    confirm = ls.load_results(planned, plan)
    complete = {"detect": detect is not None, "base": len(base) == 2, "select": ready,
                "confirm": ready and len(confirm) == len(planned)}
    k, base_test = plan["k"], base["test"]["pass_at_k"]["1"] if "test" in base else None
    per_arm, curves, stalls = {}, {}, {}
    for a in arms:
        runs = sorted((r for r in confirm if r["spec"]["arm"] == a), key=lambda r: r["spec"]["seed"])
        if not runs:
            continue
        curves[a] = {r["spec"]["seed"]: measured_curve(r["trajectory"], k) for r in runs}
        stalls[a] = {r["spec"]["seed"]: base_test is not None and stalled(r["trajectory"], base_test, plan["stall_after"],
                                                                           r["stopped"]) for r in runs}
        shares = {c: [_mean(r["diagnostics"].get(f"arm_share_{c}") or r["diagnostics"][f"share_{c}"]) for r in runs]
                  for c in TOKEN_CLASSES}
        per_arm[a] = {"lr": sel["choices"][a], "seeds": [r["spec"]["seed"] for r in runs],
                      "trajectory": [r["trajectory"] for r in runs], "stopped": [r["stopped"] for r in runs],
                      "stalled": [stalls[a][r["spec"]["seed"]] for r in runs],
                      "final_pass_at_1": [r["trajectory"][-1]["pass_at_k"]["1"] if r["trajectory"] else None for r in runs],
                      "update_share": {c: summarize(v) if None not in v else None for c, v in shares.items()},
                      "select_precision": _mean([_mean(r["diagnostics"].get("select_precision") or []) for r in runs]),
                      "select_recall": _mean([_mean(r["diagnostics"].get("select_recall") or []) for r in runs]),
                      "wall_time_s": [r["wall_time_s"] for r in runs]}
    pairs = {(a, ref) for _, _, a, ref in HYPOTHESES} | {(a, REFERENCE) for a in per_arm if a != REFERENCE}
    comparisons = {f"{a} - {ref}": comparison(curves, a, ref, stalls) for a, ref in sorted(pairs)
                   if a in curves and ref in curves}
    rows = []
    for name, statement, a, ref in HYPOTHESES:
        row = {"name": name, "statement": statement, "arm": a, "reference": ref, "tested": a in arms}
        stat = comparisons.get(f"{a} - {ref}", {}).get("primary")
        if stat:
            row |= {k2: stat[k2] for k2 in ("per_seed", "n", "mean", "ci_low", "ci_high", "p_greater", "p_tost")}
        rows.append(row)
    family = [r for r in rows if r["tested"]]
    for row, adjusted in zip(family, holm([r.get("p_greater") for r in family])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    stall_table = {a: {"stalled": sum(v["stalled"]), "runs": len(v["stalled"])} for a, v in per_arm.items()}
    if REFERENCE in stall_table:
        g = stall_table[REFERENCE]
        for a, s in stall_table.items():
            if a != REFERENCE:
                s["fisher_p_vs_grpo"] = fisher_exact(s["stalled"], s["runs"] - s["stalled"], g["stalled"],
                                                     g["runs"] - g["stalled"])
    reused = reused_specs(plan)
    runs_all = ([detect] if detect else []) + [r for s in base_specs(plan) if (r := load_one(s, plan))] + sel_results + confirm
    matched = lr_matched(plan, base_test)
    correction = {"lr_of": {r["name"]: [per_arm[r["arm"]]["lr"], per_arm[r["reference"]]["lr"]] for r in rows
                            if r["arm"] in per_arm and r["reference"] in per_arm},
                  "lr_matched": matched,
                  "deviations": deviations(plan, rows, curves, detect["choice"] | {"table": detect["table"]} if detect else None,
                                           base, sel_results + confirm)}
    extra = [r for s in [*matched_specs(plan), base_rerun_spec(plan)] if (r := load_one(s, plan))
             and json.dumps(r["spec"], sort_keys=True) not in {json.dumps(x["spec"], sort_keys=True) for x in runs_all}]
    runs_planned = 1 + 2 + len(select_specs(plan, arms)) + len(arms) * len(plan["confirm"])
    return finite_or_none({
        "partial": not all(complete.values()), "complete": complete,
        "design": {"arms": {a: ARMS[a] for a in plan["arms"]}, "arms_run": arms, "reference": REFERENCE,
                   "task_flags": ls.TASK_FLAGS, "flags": plan["flags"], "base_sha256": plan["base_sha256"],
                   "lrs": list(plan["lrs"]), "select_seeds": list(plan["select"]), "confirm_seeds": list(plan["confirm"]),
                   "steps": plan["steps"], "eval_every": plan["eval_every"], "n_eval": plan["n_eval"], "k": int(k),
                   "primary": PRIMARY, "eval_seed": f"{ls.EVAL_SEED_BASE} + RL seed", "alpha": ALPHA,
                   "equivalence_margin": EQUIVALENCE_MARGIN, "stall_rule": STALL_RULE, "detect": plan["detect"]},
        "detector": {"table": detect["table"], **detect["choice"]} if detect else None,
        "base": base, "selection": sel, "arms": per_arm, "hypotheses": rows, "comparisons": comparisons,
        "stalls": stall_table, "correction": correction,
        "compute": {"runs": len(runs_all), "runs_planned": runs_planned,
                    "correction_runs": len([r for r in extra if json.dumps(r["spec"], sort_keys=True) not in reused]),
                    "correction_run_time_s": round(sum(r["wall_time_s"] for r in extra
                                                       if json.dumps(r["spec"], sort_keys=True) not in reused), 1),
                    "reused_from_long_study": sum(json.dumps(r["spec"], sort_keys=True) in reused for r in runs_all),
                    "run_time_s": round(sum(r["wall_time_s"] for r in runs_all), 1), "this_invocation_wall_s": round(wall_s, 1),
                    "timing": timing, "budget_hours": BUDGET_HOURS,
                    "projected_run_hours": ((timing or {}).get("budget") or {}).get("projected_run_hours")},
    })


# =============================================================================
# Reuse, budget, status
# =============================================================================

def reuse_filter(plan: dict):
    """The long study's runs that this design reuses: grpo's confirmation runs and the base's test evaluation on this
    base (the archive's fingerprint, checked by restore_archive, is the rest of the design)."""
    def keep(result: dict) -> bool:
        s = result["spec"]
        return s.get("base") == tag(plan)["base"] and not s.get("rerun") and (
            (s["arm"], s["phase"]) == (REFERENCE, "confirm") and s["seed"] in plan["confirm"]
            or (s["arm"], s["split"]) == ("base", "test"))
    return keep


def reused_specs(plan: dict) -> set[str]:
    import gzip
    if not plan.get("reuse") or not Path(plan["reuse"]).exists():
        return set()
    with gzip.open(plan["reuse"], "rt") as f:
        f.readline()
        keep = reuse_filter(plan)
        return {json.dumps(r["spec"], sort_keys=True) for r in map(json.loads, f) if keep(r)}


def restore(plan: dict, archive: Path, base: str | None) -> int:
    """This study's archive, then the long study's reusable runs (same fingerprint, same base)."""
    n = ls.restore_archive(archive, plan, base)
    if plan.get("reuse"):
        long_plan = plan | {"amendment": {"base_sha256": plan["base_sha256"], "arms": {}}}
        n += ls.restore_archive(Path(plan["reuse"]), long_plan, base, keep=reuse_filter(plan))
    return n


def run_seconds(timing: dict, arm: str, plan: dict) -> float:
    """One run's projected seconds: RL steps and evaluations (the base: one evaluation; detect: DETECT steps)."""
    evaluation = timing[f"s_per_eval_n{plan['n_eval']}"]
    if arm == "base":
        return evaluation
    if arm == "detector":
        # its GRPO steps and two rollout sets of 8 per problem (about 8 / n of an evaluation each)
        return plan["detect"]["steps"] * timing["arms"][REFERENCE]["s_per_step"] + 2 * evaluation * 8 / plan["n_eval"]
    return plan["steps"] * timing["arms"][arm]["s_per_step"] + plan["steps"] // plan["eval_every"] * evaluation


def projected_hours(timing: dict, arms: list[str], plan: dict, reused: int = 0) -> float:
    """Summed run hours of the design with `arms` (BUDGET_RULE), less `reused` grpo runs."""
    per_arm = len(plan["lrs"]) * len(plan["select"]) + len(plan["confirm"])
    total = run_seconds(timing, "detector", plan) + 2 * run_seconds(timing, "base", plan) \
        + sum(per_arm * run_seconds(timing, a, plan) for a in arms) - reused * run_seconds(timing, REFERENCE, plan)
    return total / 3600


def budget(timing: dict, plan: dict) -> dict:
    """BUDGET_RULE applied to a timing: the arms it keeps, the projected summed hours and the MDE."""
    arms, reused = list(plan["arms"]), sum(json.loads(s)["phase"] == "confirm" for s in reused_specs(plan))
    while projected_hours(timing, arms, plan, reused) > BUDGET_HOURS and any(a in arms for a in DROP_ORDER):
        arms.remove(next(a for a in DROP_ORDER if a in arms))
    hours = projected_hours(timing, arms, plan, reused)
    family = sum(1 for _, _, a, _ in HYPOTHESES if a in arms)
    sd = planning_sd()
    return {"rule": BUDGET_RULE, "arms": arms, "projected_run_hours": hours, "projected_wall_hours": hours / BUDGET_JOBS,
            "within_budget": hours <= BUDGET_HOURS, "reused_grpo_runs": reused,
            "projected_run_hours_all_arms": projected_hours(timing, list(plan["arms"]), plan, reused),
            "mde": ls.minimum_detectable_effect(len(plan["confirm"]), sd, ALPHA / family), "mde_planning_sd": sd,
            "mde_alpha": ALPHA / family, "mde_power": 0.8}


def planning_sd() -> float:
    """The per-seed sd of the primary statistic measured by the long study (reco-token - grpo, 8 seeds)."""
    per_seed = json.loads((ROOT / "results" / "long_study.json").read_text())["comparisons"]["reco-token"]["primary"]
    return summarize([v for v in per_seed["per_seed"].values() if v is not None])["std"]


def status(plan: dict, timing: dict | None) -> dict:
    """Runs done / planned per phase and the projected hours left (runs nothing; reads <out> after a restore)."""
    detect = load_one(detect_spec(plan), plan)
    arms = planned_arms(plan, detect["choice"] if detect else None)
    base = {s["split"]: r for s in base_specs(plan) if (r := load_one(s, plan))}
    base_val = base["val"]["trajectory"][0]["pass_at_k"]["1"] if "val" in base else None
    sel_specs = select_specs(plan, arms)
    choices = selection(ls.load_results(sel_specs, plan), plan, base_val, arms)["choices"]
    phases = {"detect": [detect_spec(plan)], "base": base_specs(plan), "select": sel_specs,
              "confirm": confirm_specs(plan, {a: choices.get(a, 1e-4) for a in arms}),  # lr unknown yet: 1e-4 stands in
              "matched": [base_rerun_spec(plan), *matched_specs(plan)]}
    out, left_s = {}, 0.0
    proxy = proxy_timing()
    timing = timing or (proxy if proxy and f"s_per_eval_n{plan['n_eval']}" in proxy else None)
    for name, specs in phases.items():
        todo = [s for s in specs if not (ls.run_dir(Path(plan["out"]), s) / "result.json").exists()]
        out[name] = {"done": len(specs) - len(todo), "planned": len(specs)}
        if timing:
            left_s += sum(run_seconds(timing, s["arm"], plan) for s in todo)
    out["projected_run_hours_left"] = left_s / 3600 if timing else None
    out["projected_wall_hours_left_at_jobs_2"] = left_s / 3600 / BUDGET_JOBS if timing else None
    out["projected_from"] = timing.get("source", "this study's --timing") if timing else None
    return out


def proxy_timing() -> dict | None:
    """Before this study's --timing: the long study's timing (results/long_study_timing.json), each arm at the cost of
    reco-token if its token term is not GRPO's ratio, else of grpo (a proxy, said so in --status)."""
    path = ROOT / "results" / "long_study_timing.json"
    if not path.exists():
        return None
    t = json.loads(path.read_text())
    cost = {a: t["arms"]["grpo" if rm.METHODS[m][1] == "is" else "reco-token"] for a, (m, _) in ARMS.items()}
    return {"arms": cost, "s_per_eval_n128": t["s_per_eval_n128"], "s_per_eval_n256": t["s_per_eval_n256"],
            "source": "proxy: results/long_study_timing.json (grpo's or reco-token's s_per_step per arm)"}


# =============================================================================
# Plot and the generated block
# =============================================================================

def frontier_band(curves: list, grid: int = 100) -> tuple[list, list, list, list]:
    """The mean frontier over seeds at each Pass@1 that at least two seeds reach, with its 95% CI clipped to [0, 1]
    (a Pass@k is a probability; with two or three seeds the t interval alone can leave it)."""
    from protocol import first_reach
    xs, mean, lo, hi = [], [], [], []
    for p in (i / grid for i in range(grid + 1)):
        ys = [y for c in curves if (y := first_reach(c, p)) is not None]
        if len(ys) >= 2:
            s = summarize(ys)
            xs.append(p), mean.append(s["mean"])
            lo.append(max(0.0, s["mean"] - s["ci95"])), hi.append(min(1.0, s["mean"] + s["ci95"]))
    return xs, mean, lo, hi


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = summary["design"]["k"]
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(16, 4.5))
    for i, (a, v) in enumerate(summary["arms"].items()):
        curves = [measured_curve(t, str(k)) for t in v["trajectory"]]
        xs, mean, lo, hi = frontier_band(curves)
        ax.plot(xs, mean, color=f"C{i}", label=f"{a} ({len(curves)} seeds)")
        ax.fill_between(xs, lo, hi, color=f"C{i}", alpha=0.15)
    ax.set(xlabel="Pass@1 (test)", ylabel=f"Pass@{k} (test)", title="Mean frontier per arm (band: 95% CI, clipped to [0, 1])")
    if summary["arms"]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no confirmation run yet", ha="center", transform=ax.transAxes)
    names = list(summary["arms"])
    bottom = [0.0] * len(names)
    for c in TOKEN_CLASSES:
        vals = [((summary["arms"][a]["update_share"][c] or {}).get("mean") or 0.0) for a in names]
        bx.bar(names, vals, bottom=bottom, label=c)
        bottom = [b + x for b, x in zip(bottom, vals)]
    bx.set(ylabel="share of sum |w scale A|", title="Update share by token class")
    bx.tick_params(axis="x", rotation=30, labelsize=6)
    if names:
        bx.legend(fontsize=7)
    else:
        bx.text(0.5, 0.5, "no confirmation run yet", ha="center", transform=bx.transAxes)
    if summary["detector"]:
        for j, (name, s) in enumerate(summary["detector"]["table"].items()):
            for i, (d, row) in enumerate(s["detectors"].items()):
                cx.scatter([row["recall"] or 0.0], [row["precision"] or 0.0], color=f"C{i}", marker="os"[j % 2],
                           label=f"{d} ({name})")
            share = s["fork_share"]
            cx.scatter([share], [share], color="black", marker="x^"[j % 2], label=f"chance ({name})")
    q = fork_detect.QUALIFY_F1
    recall = [q / 2 + 1e-3 + i * (1 - q / 2) / 100 for i in range(101)]
    cx.plot(recall, [min(1.0, q * r / (2 * r - q)) for r in recall], "k--", lw=0.8, label=f"F1 = {q} (qualifies)")
    cx.set(xlabel="recall (fork tokens)", ylabel="precision", xlim=(0, 1), ylim=(0, 1), title="Fork detectors")
    cx.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _interval(s: dict) -> str:
    if s.get("mean") is None:
        return "–"
    ci = f" ({s['ci_low']:+.3f}, {s['ci_high']:+.3f})" if s.get("ci_low") is not None else ""
    return f"{s['mean']:+.3f}{ci}"


def claims(summary: dict) -> list[str]:
    """Plain-language sentences, by rule: a null reads as a null, an untested hypothesis as untested."""
    out = []
    for h in summary["hypotheses"]:
        if not h["tested"] and h["arm"] == DETECTED and summary["detector"] and not summary["detector"]["qualifies"]:
            out.append(f"{h['name']}: not tested: no detector qualified (best mean F1 {summary['detector']['f1']:.3f}, "
                       f"below {fork_detect.QUALIFY_F1}), so the detected arm was dropped by the pre-stated rule.")
        elif not h["tested"]:
            out.append(f"{h['name']}: not tested: {h['arm']} is not among the arms run.")
        elif h.get("mean") is None:
            out.append(f"{h['name']}: not estimable (no paired seeds).")
        else:
            if h.get("confirmed"):
                reading = "confirmed (Holm p < 0.05)"
            elif h.get("equivalent"):
                reading = f"not confirmed; the effect is equivalent to zero within ±{EQUIVALENCE_MARGIN} (TOST)"
            elif h.get("ci_high") is not None and h["ci_high"] < 0:
                reading = (f"not confirmed: the effect goes the other way, its 95% CI lies below zero (the arm {h['arm']} "
                           "is worse; two-sided, not Holm-corrected)")
            else:
                reading = "not confirmed, and not shown equivalent to zero: a null, not evidence of no effect"
            out.append(f"{h['name']}: {h['arm']} − {h['reference']} = {_interval(h)} over {h['n']} seeds; {reading}."
                       + confound_clause(summary, h))
    return out


def _matched_text(c: dict | None, lr: float) -> str:
    if not c or c["primary"].get("mean") is None:
        return f"not yet measured at lr {lr:g}"
    return f"{_interval(c['primary'])} at lr {lr:g} ({_seeds(c['primary']['n'])})"


def confound_clause(summary: dict, h: dict) -> str:
    """For a hypothesis whose two arms ran at different selected lrs: that it is confounded with the lr, grpo's own change
    between those lrs, and the same contrast at one lr (exploratory, from the correction's runs)."""
    corr = summary.get("correction") or {}
    lrs = corr.get("lr_of", {}).get(h["name"])
    if not lrs or lrs[0] == lrs[1]:
        return ""
    m = corr["lr_matched"]
    grpo = m["lr_effect"].get(REFERENCE)
    moves = (f"; grpo alone moves {_interval(grpo['primary'])} ({_seeds(grpo['primary']['n'])}) from lr {max(m['lrs']):g} to "
             f"{min(m['lrs']):g}" if grpo and grpo["primary"].get("mean") is not None else "")
    at_one = "; ".join(_matched_text(m["contrasts"].get(f"{key(h['arm'], lr)} - {key(h['reference'], lr)}"), lr)
                       for lr in m["lrs"])
    return (f" **Confounded with the learning rate:** {h['arm']} ran at lr {lrs[0]:g} and {h['reference']} at {lrs[1]:g}"
            f"{moves}. The same contrast at one lr (exploratory{', PARTIAL' if m['partial'] else ''}): {at_one}.")


def correction_lines(summary: dict) -> list[str]:
    """The correction's section of the block: the lr-matched contrasts and the code's deviations from the text."""
    corr = summary.get("correction")
    if not corr:
        return []
    m = corr["lr_matched"]
    out = ["\n**Correction, written after the runs** (issue 42; "
           "[fork_study.md](fork_study.md#correction-written-after-the-runs)): H2 compared arms at different selected "
           "learning rates. Every arm of H1 and H2 at each lr of "
           f"{m['lrs']} on the confirmation seeds, exploratory and outside the Holm family: {m['runs']} of "
           f"{m['runs_planned']} runs" + (" (**PARTIAL**: the lr-matched runs have not all finished)" if m["partial"] else "")
           + ".\n", "| contrast | gap over the common Pass@1 range | final-checkpoint gap | single-point pairs |",
           "|---|---|---|---|"]
    for name, c in [*m["contrasts"].items(), *((f"{a}: lr {min(m['lrs']):g} − lr {max(m['lrs']):g}", c)
                                                for a, c in m["lr_effect"].items())]:
        out.append(f"| {name.replace(' - ', ' − ')} | {_interval(c['primary'])} ({_seeds(c['primary']['n'])}) | "
                   f"{_interval(c['final'])} | {', '.join(map(str, c['single_point_seeds'])) or 'none'} |")
    out.append("\nWhere the code that produced the hypotheses differs from the pre-registered text:\n")
    for d in corr["deviations"]:
        verdict = {True: "yes", False: "no", None: "not yet known"}[d["could_change_a_verdict"]]
        out.append(f"- {d['name'][0].upper() + d['name'][1:]}: {d['text']}. {d['evidence'][0].upper() + d['evidence'][1:]}. "
                   f"Could it change a verdict: {verdict}.")
    return out


def detector_lines(summary: dict) -> list[str]:
    det = summary["detector"]
    if det is None:
        return ["\nFork detectors: the detect phase has not run yet."]
    sets = list(det["table"])
    out = ["\n**Fork detectors** (validation split, flagged as many tokens as there are forks; rule: "
           "[fork_study.md](fork_study.md#detector-selection-rule)):\n",
           "| detector | " + " | ".join(f"{s}: precision / recall / F1" for s in sets) + " | mean F1 |",
           "|---" * (len(sets) + 2) + "|"]
    for d in det["mean_f1"]:
        cells = [" / ".join("–" if (x := det["table"][s]["detectors"][d][m]) is None else f"{x:.3f}"
                            for m in ("precision", "recall", "f1")) for s in sets]
        out.append(f"| {d} | " + " | ".join(cells) + f" | {det['mean_f1'][d]:.3f} |")
    shares = ", ".join(f"{s} {det['table'][s]['fork_share']:.3f} of {det['table'][s]['tokens']} tokens" for s in sets)
    out.append(f"\nFork share of in-grammar response tokens: {shares}; flagging as many tokens at random gives precision "
               f"and recall equal to that share (chance). Chosen: {det['chosen']} (mean F1 {det['f1']:.3f}); "
               + ("it qualifies, and the detected arm runs." if det["qualifies"] else
                  f"no candidate reaches F1 {fork_detect.QUALIFY_F1}: the detected arm is dropped and this table is the "
                  "finding."))
    return out


def render_block(summary: dict, results_path: str, png: str) -> str:
    d, out = summary["design"], []
    out.append(f"_Generated from `{results_path}` by `python experiments/fork_study.py --aggregate-only --write-docs "
               "<this file>`; rerun it rather than editing._")
    c = summary["compute"]
    if summary["partial"]:
        done = ", ".join(p for p, ok in summary["complete"].items() if ok) or "none"
        out.append(f"\n**PARTIAL: the study has not finished.** Phases complete: {done}. Finished runs: {c['runs']} of "
                   f"{c['runs_planned']}; no finding is drawn from it until it finishes.")
    out.append(f"\nCountdown-long on the replacement base (sha256 {d['base_sha256'][:12] if d['base_sha256'] else '–'}); RL "
               f"{d['steps']} steps, evaluated every {d['eval_every']} steps, n = {d['n_eval']}, primary k = {d['k']}; "
               f"confirmation seeds {d['confirm_seeds']} on the test split; arms run: {', '.join(d['arms_run'])}.")
    out += detector_lines(summary)
    if summary["arms"]:
        out.append(f"\n![Frontier, update share and detectors]({png})")
    out.append("\n**Hypotheses** (declared before the runs; one Holm family at α = 0.05; TOST ±0.02):\n")
    out += [f"- {line}" for line in claims(summary)]
    if summary["arms"]:
        out.append("\n| arm | lr | runs | stalled | Fisher p vs grpo | final Pass@1 | gap to grpo | without stalls | "
                   "width-weighted | no overlap | " + " | ".join(f"{ch} share" for ch in TOKEN_CLASSES) + " |")
        out.append("|---" * (10 + len(TOKEN_CLASSES)) + "|")
        for a, v in summary["arms"].items():
            comp, s = summary["comparisons"].get(f"{a} - {REFERENCE}", {}), summary["stalls"][a]
            fisher = "–" if s.get("fisher_p_vs_grpo") is None else f"{s['fisher_p_vs_grpo']:.3g}"
            weighted = (comp.get("width_weighted") or {}).get("mean")
            shares = [_interval({**x, "ci_low": None}) if (x := v["update_share"][ch]) else "–" for ch in TOKEN_CLASSES]
            out.append(f"| {a} | {v['lr']:g} | {len(v['seeds'])} | {s['stalled']} | {fisher} | "
                       f"{_mean(v['final_pass_at_1']):.3f} | {_interval(comp.get('primary', {}))} | "
                       f"{_interval(comp.get('without_stalls', {}))} | {'–' if weighted is None else f'{weighted:+.3f}'} | "
                       f"{', '.join(map(str, (comp.get('width_weighted') or {}).get('no_overlap', []))) or 'none'} | "
                       + " | ".join(shares) + " |")
    out += correction_lines(summary)
    out.append("\n" + compute_line(c))
    return "\n".join(out)


def compute_line(c: dict) -> str:
    """The compute sentence: runs, summed run time, and that time against the budget and the pre-run projection."""
    hours, projected = c["run_time_s"] / 3600, c.get("projected_run_hours")
    line = (f"Compute: {c['runs']} of {c['runs_planned']} runs ({c['reused_from_long_study']} reused from the long "
            f"study), {hours:.2f} h summed over the runs' own wall times")
    if c.get("correction_runs"):
        line += (f"; the correction's {c['correction_runs']} further runs took {c['correction_run_time_s'] / 3600:.2f} h "
                 "(outside the budget)")
    if projected is None:
        return line + "."
    verdict = f"over it by {hours - c['budget_hours']:.2f} h" if hours > c["budget_hours"] else "within it"
    return line + (f", against a budget of {c['budget_hours']:g} h ({verdict}; projected {projected:.2f} h "
                   f"before the runs).")


# =============================================================================
# main
# =============================================================================

def make_plan(args: argparse.Namespace, timing: dict | None) -> dict:
    plan = {"out": args.out, "flags": [], "steps": STEPS, "eval_every": EVAL_EVERY, "lrs": LRS, "select": SELECT_SEEDS,
            "confirm": CONFIRM_SEEDS, "arms": list(ARMS), "k": K, "n_eval": N_EVAL, "detect": DETECT,
            "stall_after": STALL_AFTER, "base_sha256": BASE_SHA256, "reuse": str(LONG_ARCHIVE), "amendment": None,
            "matched_lrs": MATCHED_LRS}
    if args.quick:
        return plan | QUICK | {"reuse": args.reuse or None}
    if timing and timing.get("task_flags") == ls.TASK_FLAGS and not args.timing:
        plan["arms"] = timing["budget"]["arms"]
    elif not args.timing:
        print(f"no timing of this base (TASK_FLAGS {ls.TASK_FLAGS}): every arm; run --timing first")
    return plan


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="detect,base,select,confirm,matched",
                        help="comma-separated phases to run (matched: the exploratory lr-matched runs of the correction)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/fork, runs/fork_quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/fork_study.json; with --quick, "
                                                       "<out>/fork_study.json)")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the fork-study markers")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--status", action="store_true", help="print runs done / planned and the projected hours, run nothing")
    parser.add_argument("--timing", action="store_true", help="measure 5 RL steps per arm and an evaluation, then stop")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and grid")
    parser.add_argument("--reuse", default="", help="with --quick: an archive whose grpo runs are reused (a test's)")
    args = parser.parse_args(argv)
    args.out = args.out or ("runs/fork_quick" if args.quick else "runs/fork")
    results = Path(args.results or (f"{args.out}/fork_study.json" if args.quick else "results/fork_study.json"))
    timing_path = results.with_name(results.stem + "_timing.json")
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else None
    plan, start = make_plan(args, timing), time.time()
    archive = results.with_name(results.stem + "_runs.jsonl.gz")
    if args.timing:
        torch.set_num_threads(args.threads)
        fork_arms.use_detector("entropy", 0.2)  # a stand-in until the detect phase chooses: the cost is the same
        ls.load_context(plan["flags"], ROOT / "results" / "long_study_base.pt")  # installs the committed base in the cache
        timing = ls.timing_run(plan, arms={a: ARMS[a] for a in plan["arms"]}, on_step=fork_arms.on_step)
        timing_path.parent.mkdir(parents=True, exist_ok=True)
        timing_path.write_text(json.dumps(finite_or_none({**timing, "budget": budget(timing, plan)}), indent=1))
        print(f"wrote {timing_path}")
        return timing
    base = None
    if not (args.aggregate_only or args.status):
        torch.set_num_threads(args.threads)
        model = ls.load_context(plan["flags"], None if args.quick else ROOT / "results" / "long_study_base.pt")["base"]
        base = ls.base_sha256(model)
        if plan["base_sha256"] is None:
            plan["base_sha256"] = base
        elif base != plan["base_sha256"]:
            raise SystemExit(f"error: results/long_study_base.pt has sha256 {base[:12]}, the design needs "
                             f"{plan['base_sha256'][:12]}")
    elif plan["base_sha256"] is None:
        plan["base_sha256"] = ls.archived_base(archive) or "0" * 64
    restored = restore(plan, archive, base)
    if restored:
        print(f"restored {restored} finished runs")
    if args.status:
        report = status(plan, timing)
        print(json.dumps(report, indent=1))
        return report
    phases, ran = set(args.phases.split(",")), 0
    if not args.aggregate_only:
        run = [s for p, specs in (("detect", [detect_spec(plan)]), ("base", base_specs(plan))) if p in phases for s in specs]
        ran += ls.run_all(run, plan, args.jobs, args.threads, run=_run)
        detect = load_one(detect_spec(plan), plan)
        if detect:
            plan["detector"] = detect["choice"]
            arms = planned_arms(plan, detect["choice"])
            base_val = load_one(base_specs(plan)[0], plan)
            if "select" in phases:
                ran += ls.run_all(select_specs(plan, arms), plan, args.jobs, args.threads, run=_run)
            choices = selection(ls.load_results(select_specs(plan, arms), plan), plan,
                                base_val["trajectory"][0]["pass_at_k"]["1"] if base_val else None, arms)["choices"]
            if "confirm" in phases and len(choices) == len(arms) and base_val:
                ran += ls.run_all(confirm_specs(plan, choices), plan, args.jobs, args.threads, run=_run)
            if "matched" in phases and len(choices) == len(arms):
                ran += ls.run_all([base_rerun_spec(plan), *matched_specs(plan)], plan, args.jobs, args.threads, run=_run)
    summary = aggregate(plan, time.time() - start, timing)
    summary["compute"]["runs_this_invocation"] = ran
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    arms, reused = summary["design"]["arms_run"], reused_specs(plan)  # the long study's archive restores what it reused
    specs = [detect_spec(plan), *base_specs(plan), *select_specs(plan, arms),
             *confirm_specs(plan, summary["selection"]["choices"] if summary["complete"]["select"] else {}),
             base_rerun_spec(plan), *[s for s in matched_specs(plan) if json.dumps(s, sort_keys=True) not in reused]]
    specs = list({json.dumps(s, sort_keys=True): s for s in specs}.values())  # a matched run may be a confirmation run
    ls.write_archive(archive, plan, specs, summary["partial"], plan["base_sha256"], what=ARCHIVE_WHAT)
    png = results.with_suffix(".png")
    if summary["arms"] or summary["detector"]:
        plot(summary, png)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_block(docs, render_block(summary, str(results), os.path.relpath(png, docs.parent)), BEGIN, END)
    print(f"wrote {results}" + (" (partial)" if summary["partial"] else "") + f"; {ran} runs this invocation")
    return summary


if __name__ == "__main__":
    main()
