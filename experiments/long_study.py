"""experiments/long_study.py: does ReCo act in the paper's regime? (issue 19; pre-registration in docs/long_study.md)

Countdown-long (reco.tasks.countdown: a derivation of >= 48 tokens with >= 20 bits of reward-irrelevant surface choices,
so exact duplicates vanish), one SFT base (reco_mini's cached countdown-long base for seed 0), six arms (ARMS), all
through experiments/lab.py. Two phases:

  select   per arm, lr in LRS, seeds SELECT_SEEDS, trajectories on the validation split; each arm's lr is chosen by
           SELECTION_RULE (fixed before any run)
  confirm  each arm at its chosen lr on fresh seeds CONFIRM_SEEDS, trajectories on the test split (every EVAL_EVERY
           steps, N_EVAL samples per problem, evaluation seeds EVAL_SEED_BASE + seed, disjoint from every RL seed);
           HYPOTHESES tested as one Holm family, with a TOST against +-EQUIVALENCE_MARGIN for "no effect"

Every (phase, arm, lr, seed) writes <out>/.../result.json atomically; a rerun reuses finished runs and redoes the rest,
so the study can be stopped and resumed. Every summary also writes the finished runs to an archive beside it
(results/long_study_runs.jsonl.gz), and a start restores the archived runs of the same design into <out>: a fresh
checkout resumes where the last committed summary stopped. The summary goes to --results (JSON, and a PNG beside it) and, with
--write-docs, to the block between the long-study markers. A summary of an unfinished study says "partial": true.

  python experiments/long_study.py --timing              # 5 RL steps per arm and one evaluation: the budget's inputs
  python experiments/long_study.py --jobs 2              # the study (BUDGET states the projected compute)
  python experiments/long_study.py --quick               # smoke test: tiny model and budget, under a minute
  python experiments/long_study.py --aggregate-only --write-docs docs/results.md
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import math
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
import lab  # noqa: E402
from analysis import divergence, finite_or_none, holm, read_jsonl, summarize, t_cdf  # noqa: E402
from diagnostics import on_step as long_diagnostics  # noqa: E402
from protocol import EQUIVALENCE_MARGIN, compare, measured_curve, write_block  # noqa: E402

import reco_mini as rm  # noqa: E402
from reco.tasks import TASKS  # noqa: E402
from reco.tasks.countdown import LONG_SFT_FORM_PRIOR, TOKEN_CLASSES, base_cache_path, char_tokenizer, load_base, make_splits  # noqa: E402

ARMS = {  # arm -> (reco_mini method, extra flags)
    "grpo": ("grpo", []),
    "reco": ("reco", []),
    "reco-token": ("reco-token", []),
    "reco-canonical": ("reco", ["--occurrence", "canonical"]),
    "reco-canonical-positive": ("reco", ["--occurrence", "canonical", "--occurrence-apply", "positive"]),
    "f-grpo": ("f-grpo", []),
}
REFERENCE = "grpo"
TASK_FLAGS = ["--task", "countdown-long", "--sft-steps", "650"]  # the base chosen by experiments/long_base.py
LRS, SELECT_SEEDS, CONFIRM_SEEDS = (1e-4, 2e-4), (20, 21), tuple(range(400, 408))
STEPS, EVAL_EVERY, N_EVAL, K = 120, 20, 128, "64"  # K: the Pass@k of the primary statistic, fixed in advance
# Amendment 1, fixed before any of its runs (docs/long_study.md): the original SFT base (sha256 54662208...) was lost
# with a session's runs/, and retraining it on another machine gave other weights. The confirmation runs not yet done,
# reco-canonical seeds 402-407, and the base's own test evaluation run on the replacement base below (its weights are
# committed, results/long_study_base.pt), each paired with a grpo run of the same seed on that base; pairs never
# cross bases.
AMENDMENT = {"base_sha256": "2ca2c4f58f6aa82adb6a2b1448230f29f1aeeb8b4ec5cda726640e2538d56742",
             "arms": {"reco-canonical": tuple(range(402, 408))}}
AMENDMENT_WHY = ("the original SFT base (sha256 54662208300a) was lost with a session's run directory, and the same recipe "
                 "retrained on another machine gave other weights; the runs not yet done moved to that retrained base, each "
                 "paired with a grpo run of the same seed on it")
EVAL_SEED_BASE = 1_000_000  # evaluation generator seed = EVAL_SEED_BASE + RL seed: never an RL seed
TIE, KL_LIMIT, ALPHA, INERT, INERT_SHARE = 0.01, 2.0, 0.05, 1e-3, 0.99
SELECTION_RULE = (
    f"Per arm, over lr in {list(LRS)}, {len(SELECT_SEEDS)} seeds each, on the validation split: drop every lr with a "
    f"diverged seed (a non-finite value, a reward collapse below half its best 10-step mean, or a last-10-step KL to the "
    f"base above {KL_LIMIT}); choose the highest validation Pass@1 at the final checkpoint (step {STEPS}), averaged over "
    f"seeds; lrs within {TIE} of that best are tied, and the tie goes to the highest mean validation Pass@{K}. If every "
    f"lr diverged, the arm takes the lower lr, {min(LRS)}, and the summary says so.")
HYPOTHESES = [  # name, statement, kind, arm
    ("H1", "sequence is inert: max |w - 1| of the sequence mode < 1e-3 on >= 99% of steps (so reco behaves as "
           "reco-token)", "inert", "reco"),
    ("H2", f"the canonical response term beats GRPO on the primary statistic (mean Pass@{K} gap over the common Pass@1 "
           "range)", "primary", "reco-canonical"),
    ("H3", f"reco-token beats GRPO on the primary statistic (mean Pass@{K} gap over the common Pass@1 range)", "primary",
     "reco-token"),
    ("H4", "the variance ratio raises the fork share of the update above GRPO's (reco-token - grpo, per seed the mean "
           "fork share of sum |w rho A| over steps)", "fork_share", "reco-token"),
]
FAMILY = ("H2", "H3", "H4")  # one Holm family; H1 is descriptive (a quantile, no test)
QUICK = dict(flags=["--quick", "--sft-steps", "30", "--sft-batch", "32", "--n-test", "8", "--prompts-per-step", "4",
                   "--hidden", "32", "--layers", "1", "--max-new-tokens", "40"], steps=2, eval_every=1,
             lrs=(2e-4,), select=(20,), confirm=(400, 401), arms=["grpo", "reco-canonical", "reco-token"], k="8")
BEGIN, END = "<!-- long-study:begin -->", "<!-- long-study:end -->"
DIAGNOSTICS = [f"w_dev_{m.replace('-', '_')}" for m in rm.OCCURRENCES] + ["dup_exact", "dup_canonical", "tokens_other"] \
    + [f"v_old_{c}" for c in TOKEN_CLASSES] + [f"share_{c}" for c in TOKEN_CLASSES]


# =============================================================================
# Runs
# =============================================================================

def run_dir(out: Path, spec: dict) -> Path:
    out = out / f"base-{spec['base']}" if "base" in spec else out  # a run of the amendment's replacement base
    if spec["arm"] == "base":  # a second evaluation of the same base (the fork study's check) gets its own directory
        return out / "base" / (spec["split"] + ("-rerun" if spec.get("rerun") else ""))
    return out / spec["phase"] / spec["arm"] / f"lr{spec['lr']:g}" / f"seed{spec['seed']}"


def run_one(spec: dict, plan: dict, ctx: dict, arms: dict | None = None, on_step=long_diagnostics,
            diagnostics: list[str] | None = None) -> dict:
    """Train and evaluate one spec (or only evaluate the base); writes result.json atomically and returns it. Another
    study passes its own `arms` (arm -> method, flags), lab.train_rl's per-step hook `on_step` and the `diagnostics` it
    keeps (default: this study's ARMS, diagnostics.on_step, DIAGNOSTICS)."""
    path = run_dir(Path(plan["out"]), spec)
    if (path / "result.json").exists():
        return json.loads((path / "result.json").read_text())
    path.mkdir(parents=True, exist_ok=True)
    start, stopped, log = time.time(), None, []
    base, tokenizer, splits = ctx["base"], ctx["tokenizer"], ctx["splits"]
    common = [*plan.get("task_flags", TASK_FLAGS), *plan["flags"], "--n-eval", str(plan["n_eval"]), "--eval-seed",
              str(EVAL_SEED_BASE + spec["seed"])]
    if spec["arm"] == "base":
        cfg = lab.parse_config([*common, "--seed", str(spec["seed"]), "--methods", ""])
        trajectory = [{"step": 0, **rm.evaluate(cfg, base, tokenizer, splits[spec["split"]], "base")}]
    else:
        method, extra = (arms or ARMS)[spec["arm"]]
        cfg = lab.parse_config([*lab.STUDY_PINS, *common, *extra, "--method", method, "--seed", str(spec["seed"]),
                                "--lr", str(spec["lr"]), "--steps", str(plan["steps"]), "--eval-every", str(plan["eval_every"]),
                                "--out", str(path)])
        torch.manual_seed(spec["seed"])
        model = copy.deepcopy(base).requires_grad_(True)
        try:
            lab.train_rl(cfg, method, model, base, tokenizer, splits["train"], path, splits[spec["split"]], on_step=on_step)
        except SystemExit as exc:  # reco_mini stops before a non-finite gradient reaches the weights
            stopped = str(exc.code)
        trajectory, log = read_jsonl(path / "trajectory.jsonl"), read_jsonl(path / "log.jsonl")
    keep = ("step", "pass_at_k", "counts", "mean_accuracy", "distinct_correct")
    result = {"spec": spec, "stopped": stopped, "trajectory": [{k: row[k] for k in keep} for row in trajectory],
              "diagnostics": {name: [row.get(name) for row in log] for name in diagnostics or DIAGNOSTICS},
              "divergence": divergence(log, stopped, KL_LIMIT) if log else None,
              "wall_time_s": round(time.time() - start, 1), "torch_threads": torch.get_num_threads()}
    return save_result(path, result)


def save_result(path: Path, result: dict) -> dict:
    """Write result.json into `path` atomically, unless one appeared meanwhile; returns the one that stands."""
    if (path / "result.json").exists():  # finished or restored meanwhile, by another process: that one stands
        return json.loads((path / "result.json").read_text())
    (path / "result.json.tmp").write_text(json.dumps(finite_or_none(result)))
    (path / "result.json.tmp").replace(path / "result.json")  # atomic: an interrupted run is redone, never half-read
    return result


_CTX: dict = {}
# glibc serves every tensor over its mmap threshold with a fresh mmap and returns it with munmap, so each step faults
# its pages in again (a fifth of a worker's CPU time in the kernel here). These settings keep freed memory in the heap;
# the numbers stay the same bit for bit (benchmarks/long_study_malloc.py measures both).
WORKER_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}


def load_context(flags: list[str], base_file: Path | None = None, task_flags: list[str] = TASK_FLAGS) -> dict:
    """Splits, tokenizer and SFT base; a committed `base_file` replaces the cached base, so that every machine runs on
    the same weights (a retrained base differs from machine to machine). Another study passes its `task_flags`."""
    cfg = lab.parse_config([*task_flags, *flags, "--seed", "0"])
    if cfg.task == "code-tiny":  # its own problems, tokenizer, base and cache (reco.tasks.CodeTiny)
        from reco.tasks import code_tiny as tiny
        task, cache = TASKS[cfg.task], tiny.base_cache_path(cfg)
        splits = task.splits(cfg)
        _copy_base(base_file, cache)
        tokenizer, base = task.tiny_base(cfg, splits)
        return {"splits": splits, "tokenizer": tokenizer, "base": base.requires_grad_(False)}
    splits, tokenizer = make_splits(cfg), char_tokenizer(cfg.task)
    _copy_base(base_file, base_cache_path(cfg))
    base = load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"])).requires_grad_(False)
    return {"splits": splits, "tokenizer": tokenizer, "base": base}


def _copy_base(base_file: Path | None, cache: Path) -> None:
    if base_file is not None and base_file.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base_file, cache)


def die_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies, so a worker of a stopped study never goes on to finish
    a run and write it over a result restored since (it did once: `pkill -f long_study.py` spares the workers)."""
    if sys.platform == "linux":
        import ctypes
        import multiprocessing
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the parent died before the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)


def _init_worker(flags: list[str], threads: int, task_flags: list[str] = TASK_FLAGS) -> None:
    torch.set_num_threads(threads)
    _CTX.update(load_context(flags, task_flags=task_flags))


def _init_pool_worker(flags: list[str], threads: int, task_flags: list[str] = TASK_FLAGS) -> None:
    die_with_parent()  # a pool worker only: a --jobs 1 study under nohup must outlive the shell that started it
    _init_worker(flags, threads, task_flags)


def _run(spec: dict, plan: dict) -> dict:
    return run_one(spec, plan, _CTX)


def run_all(specs: list[dict], plan: dict, jobs: int, threads: int, run=None) -> int:
    """Run the unfinished specs (in `jobs` worker processes) with `run(spec, plan)`, a module-level function (default:
    this study's run_one); returns how many ran."""
    run = run or _run
    todo = [s for s in specs if not (run_dir(Path(plan["out"]), s) / "result.json").exists()]
    if jobs == 1 or len(todo) <= 1:
        previous = torch.get_num_threads()
        if todo:
            _init_worker(plan["flags"], threads, plan.get("task_flags", TASK_FLAGS))
        for spec in todo:
            run(spec, plan)
        torch.set_num_threads(previous)
    else:
        for name, value in WORKER_MALLOC.items():  # read by glibc when a worker starts; the caller's settings win
            os.environ.setdefault(name, value)
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_init_pool_worker,
                                 initargs=(plan["flags"], threads, plan.get("task_flags", TASK_FLAGS))) as pool:
            for future in as_completed([pool.submit(run, s, plan) for s in todo]):
                future.result()
    return len(todo)


def fingerprint(plan: dict) -> dict:
    """What a finished run depends on besides its spec: an archived run is restored only into the same design."""
    return {"task_flags": plan.get("task_flags", TASK_FLAGS),
            "sft_form_prior": list(plan.get("sft_form_prior", LONG_SFT_FORM_PRIOR)), "flags": plan["flags"],
            "steps": plan["steps"], "eval_every": plan.get("eval_every"), "n_eval": plan["n_eval"],
            **({"eval_steps": list(plan["eval_steps"]), "where_steps": list(plan["where_steps"])}
               if "eval_steps" in plan else {})}


def base_sha256(base) -> str:
    """A digest of the base's weights (a model or its state dict): archived runs are restored only onto a base the
    design knows, and a run starts only on its own."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted((base if isinstance(base, dict) else base.state_dict()).items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def write_archive(path: Path, plan: dict, specs: list[dict], partial: bool, base: str | None,
                  what: str = "finished runs of experiments/long_study.py (raw results; restored by its next start)") -> int:
    """The finished runs of `specs`, one JSON line each after a header line (gzip, no timestamp): what a fresh
    checkout needs to resume the study; archived runs of the same design that are not on disk stay in it. Returns how
    many runs it holds."""
    results = load_results(specs, plan)
    if path.exists():
        with gzip.open(path, "rt") as f:
            if json.loads(f.readline())["fingerprint"] == fingerprint(plan):
                on_disk = {json.dumps(r["spec"], sort_keys=True) for r in results}
                results += [r for r in map(json.loads, f) if json.dumps(r["spec"], sort_keys=True) not in on_disk]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        header = {"what": what, "partial": partial, "fingerprint": fingerprint(plan), "base_sha256": base, "runs": len(results)}
        f.write((json.dumps(header) + "\n").encode())
        for result in results:
            f.write((json.dumps(result) + "\n").encode())
    tmp.replace(path)
    return len(results)


def restore_archive(path: Path, plan: dict, base: str | None = None, keep=None) -> int:
    """Write each archived run of this design back to its run directory where that has none; given `base`, only if
    the design knows that base (the archive's own, or its amendment's); given `keep(result)`, only the runs it keeps.
    Returns how many."""
    if not path.exists():
        return 0
    with gzip.open(path, "rt") as f:
        header = json.loads(f.readline())
        if header["fingerprint"] != fingerprint(plan):
            print(f"{path}: archived runs of another design ({header['fingerprint']}): not restored")
            return 0
        if base is not None and header.get("base_sha256") is not None and base not in known_bases(plan, header["base_sha256"]):
            print(f"{path}: archived runs of another SFT base (sha256 {header['base_sha256'][:12]}, this one "
                  f"{base[:12]}): not restored")
            return 0
        restored = 0
        for line in f:
            result = json.loads(line)
            target = run_dir(Path(plan["out"]), result["spec"]) / "result.json"
            if not target.exists() and (keep is None or keep(result)):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.with_suffix(".tmp").write_text(line.rstrip("\n"))
                target.with_suffix(".tmp").replace(target)
                restored += 1
    return restored


def archived_base(path: Path) -> str | None:
    if not path.exists():
        return None
    with gzip.open(path, "rt") as f:
        return json.loads(f.readline()).get("base_sha256")


def load_results(specs: list[dict], plan: dict) -> list[dict]:
    paths = [run_dir(Path(plan["out"]), s) / "result.json" for s in specs]
    return [json.loads(p.read_text()) for p in paths if p.exists()]


def select_specs(plan: dict) -> list[dict]:
    return [{"phase": "select", "arm": a, "lr": lr, "seed": s, "split": "val"}
            for a in plan["arms"] for lr in plan["lrs"] for s in plan["select"]]


def confirm_specs(plan: dict, choices: dict) -> list[dict]:
    return [{"phase": "confirm", "arm": a, "lr": choices[a], "seed": s, "split": "test"}
            for a in plan["arms"] for s in plan["confirm"]]


def base_specs() -> list[dict]:
    return [{"phase": "base", "arm": "base", "split": "test", "seed": 0}]


def amendment_specs(plan: dict, choices: dict) -> list[dict]:
    """The amendment's confirmation runs on its base: each replaced (arm, seed) and grpo's run of that seed."""
    tag = {"base": plan["amendment"]["base_sha256"][:12]}
    return [{"phase": "confirm", "arm": a, "lr": choices[a], "seed": s, "split": "test"} | tag
            for arm, seeds in plan["amendment"]["arms"].items() for s in seeds for a in (REFERENCE, arm)]


def study_confirm_specs(plan: dict, choices: dict) -> list[dict]:
    """The confirmation runs: the design's, less those an amendment replaced, then the amendment's."""
    if not plan.get("amendment"):
        return confirm_specs(plan, choices)
    replaced = {(a, s) for a, seeds in plan["amendment"]["arms"].items() for s in seeds}
    return [s for s in confirm_specs(plan, choices) if (s["arm"], s["seed"]) not in replaced] + amendment_specs(plan, choices)


def study_base_specs(plan: dict) -> list[dict]:
    """The base's test evaluation: on the amendment's base where there is one (the original was never evaluated)."""
    tag = {"base": plan["amendment"]["base_sha256"][:12]} if plan.get("amendment") else {}
    return [spec | tag for spec in base_specs()]


def confirm_runs_planned(plan: dict) -> int:
    """Every arm's confirmation seeds, and grpo's runs of the replaced seeds on the amendment's base."""
    replaced = (plan.get("amendment") or {"arms": {}})["arms"]
    return len(plan["arms"]) * len(plan["confirm"]) + sum(len(seeds) for seeds in replaced.values())


def known_bases(plan: dict, original: str) -> set[str]:
    return {original} | ({plan["amendment"]["base_sha256"]} if plan.get("amendment") else set())


def on_base(specs: list[dict], plan: dict, base: str, original: str) -> list[dict]:
    """The specs that may start on `base` (a tagged spec needs the amendment's base, the others the original); says how
    many unfinished runs need another base."""
    def needs(spec):
        return plan["amendment"]["base_sha256"] if "base" in spec else original
    waiting = [s for s in specs if needs(s) != base and not (run_dir(Path(plan["out"]), s) / "result.json").exists()]
    if waiting:
        print(f"{len(waiting)} unfinished runs need the SFT base {needs(waiting[0])[:12]}, not this one ({base[:12]}): "
              "not started")
    return [s for s in specs if needs(s) == base]


def pair_key(spec: dict) -> str:
    """Runs are paired across arms by seed, within one base: '402' on the original base, '402@<base>' on another."""
    return f"{spec['seed']}@{spec['base']}" if "base" in spec else str(spec["seed"])


# =============================================================================
# Selection, hypotheses, summaries
# =============================================================================

def selection(results: list[dict], plan: dict) -> dict:
    scores, choices, notes = [], {}, {}
    for a in plan["arms"]:
        rows = []
        for lr in plan["lrs"]:
            runs = [r for r in results if r["spec"]["arm"] == a and r["spec"]["lr"] == lr]
            ends = [r["trajectory"][-1] if r["trajectory"] else None for r in runs]
            finished = [e is not None and e["step"] == plan["steps"] for e in ends]
            row = {"arm": a, "lr": lr, "seeds": [r["spec"]["seed"] for r in runs], "complete": len(runs) == len(plan["select"]),
                   "diverged": not all(finished) or any(r["divergence"]["diverged"] for r in runs)}
            if row["complete"] and all(finished):
                row["val_pass_at_1"] = sum(e["pass_at_k"]["1"] for e in ends) / len(ends)
                row[f"val_pass_at_{plan['k']}"] = sum(e["pass_at_k"][plan["k"]] for e in ends) / len(ends)
            rows.append(row)
        scores += rows
        if not all(r["complete"] for r in rows):
            continue
        eligible = [r for r in rows if not r["diverged"] and "val_pass_at_1" in r]
        if not eligible:
            choices[a], notes[a] = min(plan["lrs"]), "every lr diverged: the lower lr by rule"
            continue
        best = max(r["val_pass_at_1"] for r in eligible)
        choices[a] = max((r for r in eligible if r["val_pass_at_1"] >= best - TIE),
                         key=lambda r: r[f"val_pass_at_{plan['k']}"])["lr"]
    return {"rule": SELECTION_RULE, "scores": scores, "choices": choices, "notes": notes}


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def quantiles(values: list[float]) -> dict:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"n": 0}
    q = {f"q{int(p * 100)}": xs[min(len(xs) - 1, int(math.ceil(p * len(xs))) - 1)] for p in (0.5, 0.9, 0.99)}
    return {"n": len(xs), **q, "max": xs[-1], f"share_below_{INERT:g}": sum(x < INERT for x in xs) / len(xs)}


def inert_verdict(confirm: list[dict], arm: str, planned: list[str]) -> dict:
    """H1 from the arm's own steps; from every arm's (all log w_dev_sequence) only when the budget dropped the arm.
    A planned arm without runs yet is not estimable, never read off another arm."""
    pooled = arm not in planned
    q = quantiles([x for r in confirm if pooled or r["spec"]["arm"] == arm for x in r["diagnostics"]["w_dev_sequence"]])
    share = q.get(f"share_below_{INERT:g}")
    return {"steps_from": "all arms" if pooled else arm, "share_of_steps_below": share, "threshold": INERT,
            "required_share": INERT_SHARE, "holds": None if share is None else share >= INERT_SHARE}


def aggregate(plan: dict, wall_s: float, timing: dict | None) -> dict:
    sel_results = load_results(select_specs(plan), plan)
    sel = selection(sel_results, plan)
    complete = {"select": len(sel["choices"]) == len(plan["arms"])}
    planned = study_confirm_specs(plan, sel["choices"]) if complete["select"] else []
    confirm = load_results(planned, plan)
    complete["confirm"] = complete["select"] and len(confirm) == len(planned)
    base = load_results(study_base_specs(plan), plan)
    k = plan["k"]
    arms, curves, fork = {}, {}, {}
    for a in plan["arms"]:
        runs = sorted((r for r in confirm if r["spec"]["arm"] == a), key=lambda r: r["spec"]["seed"])
        if not runs:
            continue
        seeds, keys = [r["spec"]["seed"] for r in runs], [pair_key(r["spec"]) for r in runs]
        curves[a] = {key: measured_curve(r["trajectory"], k) for key, r in zip(keys, runs)}
        fork[a] = {key: _mean(r["diagnostics"]["share_fork"]) for key, r in zip(keys, runs)}
        traj = []
        for r in runs:
            d, rows = r["diagnostics"], []
            for i, row in enumerate(r["trajectory"]):  # diagnostics: mean over the steps since the last checkpoint
                lo = r["trajectory"][i - 1]["step"] if i else 0
                rows.append({**row, "diagnostics": {n: _mean(v[lo: row["step"]]) for n, v in d.items()}})
            traj.append(rows)
        arms[a] = {"lr": sel["choices"][a], "seeds": seeds, "bases": [r["spec"].get("base") for r in runs],
                   "trajectory": traj, "stopped": [r["stopped"] for r in runs],
                   "final_pass_at_1": [r["trajectory"][-1]["pass_at_k"]["1"] if r["trajectory"] else None for r in runs]}
    comparisons = {a: compare(curves[a], curves[REFERENCE]) for a in curves if a != REFERENCE and REFERENCE in curves}
    inertness = {a: {m: quantiles([x for r in confirm if r["spec"]["arm"] == a
                                   for x in r["diagnostics"][f"w_dev_{m.replace('-', '_')}"]])
                     for m in rm.OCCURRENCES} for a in arms}
    update_share = {a: {c: summarize(vals) if (vals := [_mean(r["diagnostics"][f"share_{c}"]) for r in confirm
                                                        if r["spec"]["arm"] == a and r["diagnostics"][f"share_{c}"]])
                        and None not in vals else None for c in TOKEN_CLASSES} for a in arms}
    rows = []
    for name, statement, kind, arm in HYPOTHESES:
        row = {"name": name, "statement": statement, "arm": arm, "reference": REFERENCE}
        if kind == "inert":
            row |= inert_verdict(confirm, arm, plan["arms"])
        elif arm in comparisons or (kind == "fork_share" and arm in fork and REFERENCE in fork):
            if kind == "primary":
                stat = comparisons[arm]["primary"]
            else:
                seeds = sorted(s for s in set(fork[arm]) & set(fork[REFERENCE])
                               if fork[arm][s] is not None and fork[REFERENCE][s] is not None)
                stat = _fork_comparison({s: fork[arm][s] - fork[REFERENCE][s] for s in seeds})
            row |= {"per_seed": stat["per_seed"], "n": stat["n"], "mean": stat["mean"], "ci_low": stat["ci_low"],
                    "ci_high": stat["ci_high"], "p": stat["p_greater"], "p_tost": stat["p_tost"]}
        rows.append(row)
    family = [r for r in rows if r["name"] in FAMILY]
    for row, adjusted in zip(family, holm([r.get("p") for r in family])):
        row["p_holm"] = adjusted
        row["confirmed"] = adjusted is not None and adjusted < ALPHA
        row["equivalent"] = row.get("p_tost") is not None and row["p_tost"] < ALPHA
    base_eval = base[0]["trajectory"][0] if base else None
    runs_all = sel_results + confirm + base
    amendment = None
    if plan.get("amendment"):  # its pairs alone, beside the pooled comparison: does the base change the answer?
        tag = plan["amendment"]["base_sha256"][:12]
        amendment = {"base_sha256": plan["amendment"]["base_sha256"], "replaced": plan["amendment"]["arms"],
                     "why": AMENDMENT_WHY, "runs": sum(r["spec"].get("base") == tag for r in confirm),
                     "on_its_base_only": {a: compare({key: c for key, c in curves[a].items() if key.endswith("@" + tag)},
                                                     curves[REFERENCE])["primary"]
                                          for a in plan["amendment"]["arms"] if a in curves and REFERENCE in curves}}
    return finite_or_none({
        "partial": not all(complete.values()), "complete": complete,
        "design": {"arms": {a: ARMS[a] for a in plan["arms"]}, "reference": REFERENCE, "task_flags": TASK_FLAGS,
                   "flags": plan["flags"], "lrs": list(plan["lrs"]), "select_seeds": list(plan["select"]),
                   "confirm_seeds": list(plan["confirm"]), "confirm_runs_planned": confirm_runs_planned(plan),
                   "steps": plan["steps"], "eval_every": plan["eval_every"],
                   "n_eval": plan["n_eval"], "k": int(k), "eval_seed": f"{EVAL_SEED_BASE} + RL seed",
                   "alpha": ALPHA, "equivalence_margin": EQUIVALENCE_MARGIN, "family": list(FAMILY),
                   "base": "one SFT base for every run: reco_mini's cached countdown-long base for seed 0 (runs/cache)"
                           + ("; Amendment 1's pairs on a second, committed one (results/long_study_base.pt)"
                              if plan.get("amendment") else "")},
        "selection": sel, "arms": arms,
        "base": {"pass_at_k": base_eval["pass_at_k"], "counts": base_eval["counts"],
                 "sha256": plan["amendment"]["base_sha256"] if plan.get("amendment") else None} if base_eval else None,
        "amendment": amendment,
        "primary": rows,
        "comparisons": comparisons,
        "endpoint_matched": {a: c["endpoint"] for a, c in comparisons.items()},
        "inertness": inertness, "update_share": update_share,
        "compute": {"runs": len(runs_all),
                    "runs_planned": len(select_specs(plan)) + confirm_runs_planned(plan) + len(study_base_specs(plan)),
                    "run_time_s": round(sum(r["wall_time_s"] for r in runs_all), 1),
                    "projected_run_time_s": round(sum(projected_run_s(timing, r["spec"]["arm"], plan["n_eval"], plan)
                                                      for r in runs_all), 1) if timing else None,
                    "this_invocation_wall_s": round(wall_s, 1), "timing": timing, "budget": budget(timing, plan)
                    if timing else None},
    })


def _fork_comparison(per_seed: dict[int, float]) -> dict:
    from analysis import equivalence_test, paired_test
    values = list(per_seed.values())
    test = paired_test(values) if len(values) >= 2 else {"mean": _mean(values), "ci95": None}
    ci = test.get("ci95")
    return {"per_seed": {str(s): v for s, v in per_seed.items()}, "n": len(values), "mean": test.get("mean"),
            "ci_low": None if ci is None else test["mean"] - ci, "ci_high": None if ci is None else test["mean"] + ci,
            "p_greater": test.get("p_greater"),
            "p_tost": equivalence_test(values, EQUIVALENCE_MARGIN).get("p_equivalent") if len(values) >= 2 else None}


# =============================================================================
# Budget: the 5-step timing, the rule that fixes the design, and the minimum detectable effect
# =============================================================================

BUDGET_HOURS, BUDGET_JOBS = 6.0, 2
PLANNING_SD = 0.034  # per-seed sd of the primary statistic, borrowed from the frontier re-analysis (reco - grpo)
BUDGET_RULE = (
    f"With every arm, {len(LRS)} lrs x {len(SELECT_SEEDS)} selection seeds and {len(CONFIRM_SEEDS)} confirmation seeds, "
    f"{STEPS} steps and an evaluation every {EVAL_EVERY} steps: take n = 256 if the projected wall time at --jobs "
    f"{BUDGET_JOBS} (the measured seconds per RL step and per evaluation of each arm, summed over runs, divided by "
    f"{BUDGET_JOBS}) is within {BUDGET_HOURS:g} h, else n = 128; if n = 128 is still over, drop the exploratory arms "
    "reco-canonical-positive, then f-grpo, then reco, never the arms of H2-H4; the seeds stay at 8. If even that is "
    "over, the design does not fit (within_budget false) and the pre-registration must be amended, in writing, before "
    "any run.")


def timing_run(plan: dict, steps: int = 5, arms: dict | None = None, on_step=long_diagnostics) -> dict:
    """Seconds per RL step of each arm (mean over `steps` steps at the study's settings, from the base, on the
    training problems) and per evaluation of the validation split at n = 128 and at n = 256; another study passes
    its own `arms` and per-step hook."""
    ctx = load_context(plan["flags"])
    out = {"steps": steps, "threads": torch.get_num_threads(), "task_flags": TASK_FLAGS, "flags": plan["flags"], "arms": {}}
    tmp = Path(plan["out"]) / "timing"
    for a in plan["arms"]:
        method, extra = (arms or ARMS)[a]
        (tmp / a).mkdir(parents=True, exist_ok=True)
        cfg = lab.parse_config([*lab.STUDY_PINS, *TASK_FLAGS, *plan["flags"], *extra, "--method", method, "--steps",
                                str(steps), "--out", str(tmp / a)])
        model = copy.deepcopy(ctx["base"]).requires_grad_(True)
        start = time.time()
        lab.train_rl(cfg, method, model, ctx["base"], ctx["tokenizer"], ctx["splits"]["train"], tmp / a, on_step=on_step)
        log = read_jsonl(tmp / a / "log.jsonl")
        out["arms"][a] = {"s_per_step": (time.time() - start) / steps,
                          "response_tokens": _mean([row["response_length"] for row in log])}
    for n in (128, 256):
        cfg = lab.parse_config([*TASK_FLAGS, *plan["flags"], "--n-eval", str(n)])
        start = time.time()
        rm.evaluate(cfg, ctx["base"], ctx["tokenizer"], ctx["splits"]["val"], f"timing n={n}")
        out[f"s_per_eval_n{n}"] = time.time() - start
    return out


def runs_per_arm(plan: dict) -> int:
    return len(plan["lrs"]) * len(plan["select"]) + len(plan["confirm"])


def projected_run_s(timing: dict, arm: str, n: int, plan: dict) -> float:
    """One run's seconds by the timing: its RL steps and evaluations (the base: one evaluation)."""
    if arm == "base":
        return timing[f"s_per_eval_n{n}"]
    return plan["steps"] * timing["arms"][arm]["s_per_step"] + plan["steps"] // plan["eval_every"] * timing[f"s_per_eval_n{n}"]


def projected_hours(timing: dict, arms: list[str], n: int, plan: dict) -> float:
    return sum(runs_per_arm(plan) * projected_run_s(timing, a, n, plan) for a in arms) / BUDGET_JOBS / 3600


def t_quantile(p: float, df: int) -> float:
    lo, hi = -50.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def minimum_detectable_effect(seeds: int, sd: float = PLANNING_SD, alpha: float = ALPHA / len(FAMILY),
                              power: float = 0.8) -> float:
    """One-sided paired t-test at the Holm family's strictest level: (t_{1-alpha} + t_{power}) sd / sqrt(n)."""
    df = seeds - 1
    return (t_quantile(1 - alpha, df) + t_quantile(power, df)) * sd / math.sqrt(seeds)


def budget(timing: dict, plan: dict) -> dict:
    """BUDGET_RULE applied to a timing: the arms and n it fixes, its projected wall time and the MDE."""
    arms, drop = list(plan["arms"]), ["reco-canonical-positive", "f-grpo", "reco"]
    n = 256 if projected_hours(timing, arms, 256, plan) <= BUDGET_HOURS else 128
    while n == 128 and projected_hours(timing, arms, n, plan) > BUDGET_HOURS and any(a in arms for a in drop):
        arms.remove(next(a for a in drop if a in arms))
    hours = projected_hours(timing, arms, n, plan)
    return {"rule": BUDGET_RULE, "n_eval": n, "arms": arms, "projected_hours": hours, "within_budget": hours <= BUDGET_HOURS,
            "projected_hours_all_arms_n128": projected_hours(timing, list(plan["arms"]), 128, plan),
            "projected_hours_all_arms_n256": projected_hours(timing, list(plan["arms"]), 256, plan),
            "mde": minimum_detectable_effect(len(plan["confirm"])), "mde_planning_sd": PLANNING_SD,
            "mde_alpha": ALPHA / len(FAMILY), "mde_power": 0.8}


# =============================================================================
# Plot and the generated block
# =============================================================================

def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = summary["design"]["k"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (a, v) in enumerate(summary["arms"].items()):
        color = f"C{i}"
        for j, traj in enumerate(v["trajectory"]):
            xs = [row["pass_at_k"]["1"] for row in traj]
            ys = [row["pass_at_k"][str(k)] for row in traj]
            ax.plot(xs, ys, "-o", color=color, alpha=0.5, ms=2, lw=0.8, label=a if j == 0 else None)
    if summary.get("base"):
        ax.plot([summary["base"]["pass_at_k"]["1"]], [summary["base"]["pass_at_k"][str(k)]], "k*", ms=10,
                label="replacement base" if summary["base"].get("sha256") else "base")
    ax.set(xlabel="Pass@1 (test)", ylabel=f"Pass@{k} (test)", title="Frontier along each run (one line per seed)")
    ax.legend(fontsize=7)
    names = list(summary["update_share"])
    bottom = [0.0] * len(names)
    for c in TOKEN_CLASSES:
        vals = [(summary["update_share"][a][c] or {}).get("mean") or 0.0 for a in names]
        bx.bar(names, vals, bottom=bottom, label=c)
        bottom = [b + x for b, x in zip(bottom, vals)]
    bx.set(ylabel="share of sum |w rho A|", title="Update share by token class (mean over seeds and steps)")
    bx.tick_params(axis="x", rotation=30, labelsize=7)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _interval(row: dict) -> str:
    if row.get("mean") is None:
        return "–"
    ci = f" ({row['ci_low']:+.3f}, {row['ci_high']:+.3f})" if row.get("ci_low") is not None else ""
    return f"{row['mean']:+.3f}{ci}"


def arm_terms(arm: str) -> str:
    """Where an arm changes both the response weight and the token ratio, a clause saying its difference is the arm's,
    not one term's (the arm's estimate cannot be attributed to either term alone)."""
    if arm not in ARMS:
        return ""
    method, extra = ARMS[arm]
    occurrence, ratio, _ = rm.METHODS[method]
    occurrence = extra[extra.index("--occurrence") + 1] if "--occurrence" in extra else occurrence
    if occurrence == "none" or ratio == "is":
        return ""
    return (f", as a whole: it carries the {occurrence} response weights and the {ratio} token ratio together, so the "
            "difference is not attributable to either term alone")


def claims(summary: dict) -> list[str]:
    """Plain-language sentences, by rule, so that a null is reported as a null."""
    out = []
    for h in summary["primary"]:
        if "holds" in h:
            share = h.get("share_of_steps_below")
            source = "all arms'" if h["steps_from"] == "all arms" else f"{h['steps_from']}'s"
            out.append(f"{h['name']}: " + ("not estimable (no runs)." if share is None else
                       f"max |w - 1| of the sequence mode was below {h['threshold']:g} on {share:.1%} of {source} steps; "
                       + ("sequence is inert, as predicted." if h["holds"] else "sequence is not inert by the rule.")))
            continue
        if h.get("mean") is None:
            out.append(f"{h['name']}: not estimable (no paired seeds).")
            continue
        if h.get("confirmed"):
            reading = "confirmed (Holm p < 0.05)"
        elif h.get("equivalent"):
            reading = f"not confirmed; the effect is equivalent to zero within ±{EQUIVALENCE_MARGIN} (TOST)"
        elif h.get("ci_high") is not None and h["ci_high"] < 0:
            reading = (f"not confirmed: the effect goes the other way, its 95% CI lies below zero (the arm {h['arm']} is "
                       f"worse{arm_terms(h['arm'])}; two-sided, not Holm-corrected)")
        else:
            reading = "not confirmed, and not shown equivalent to zero: a null, not evidence of no effect"
        out.append(f"{h['name']}: {h['arm']} − {h['reference']} = {_interval(h)} over {h['n']} seeds; {reading}.")
    return out


def amendment_lines(summary: dict) -> list[str]:
    """The amendment: why, which runs, and its pairs alone beside the pooled comparison."""
    a = summary.get("amendment")
    if not a:
        return []
    replaced = "; ".join(f"{arm} seeds {min(seeds)}-{max(seeds)}" for arm, seeds in a["replaced"].items())
    alone = "; ".join(f"{arm} − {REFERENCE} on its base alone: {_interval(c)} over {c['n']} seeds"
                      for arm, c in a["on_its_base_only"].items() if c.get("n"))
    return [f"\n**Amendment 1** (fixed before any of its runs; [long_study.md](long_study.md#amendment-1-a-replacement-base)): "
            f"{a['why']}. Replaced: {replaced}. Runs on the replacement base (sha256 {a['base_sha256'][:12]}): "
            f"{a['runs']} finished." + (f" {alone}." if alone else "")]


def render_block(summary: dict, results_path: str, png: str) -> str:
    d, out = summary["design"], []
    out.append(f"_Generated from `{results_path}` by `python experiments/long_study.py --aggregate-only --write-docs "
               "<this file>`; rerun it rather than editing._")
    if summary["partial"]:
        done = ", ".join(p for p, ok in summary["complete"].items() if ok) or "none"
        selected = sum(len(row["seeds"]) for row in summary["selection"]["scores"])
        planned = len(d["arms"]) * len(d["lrs"]) * len(d["select_seeds"])
        confirmed = sum(len(a["seeds"]) for a in summary["arms"].values())
        out.append(f"\n**PARTIAL: the study has not finished.** Phases complete: {done}. Finished runs: selection "
                   f"{selected} of {planned}, confirmation {confirmed} of {d['confirm_runs_planned']}.")
    bases = "one SFT base, and a second for Amendment 1's pairs" if summary.get("amendment") else "one SFT base"
    out.append(f"\nCountdown-long, {bases}; RL {d['steps']} steps, evaluated every {d['eval_every']} steps, "
               f"n = {d['n_eval']}, primary k = {d['k']}; confirmation seeds {d['confirm_seeds']} on the test split.")
    out += amendment_lines(summary)
    if summary.get("base"):
        b, which = summary["base"]["pass_at_k"], "replacement base" if summary["base"].get("sha256") else "base"
        out.append(f"\nThe {which} before RL, test split: Pass@1 {b['1']:.3f}, Pass@{d['k']} {b[str(d['k'])]:.3f}.")
    if summary["arms"]:
        out.append(f"\n![Frontier and update share]({png})")
    out.append("\n**Hypotheses** (declared before the run; H2-H4 one Holm family at α = 0.05; TOST ±0.02):\n")
    out += [f"- {c}" for c in claims(summary)]
    if summary["arms"]:
        out.append(f"\n| arm | lr | runs | final Pass@1 | final Pass@{d['k']} | primary gap to {REFERENCE} | endpoint-matched | "
                   "fork share | style share | determined share | other share |")
        out.append("|---" * 11 + "|")
        for a, v in summary["arms"].items():
            c = summary["comparisons"].get(a, {})
            shares = [_interval({**s, "ci_low": None}) if (s := summary["update_share"][a][ch]) else "–"
                      for ch in TOKEN_CLASSES]
            final_k = _mean([t[-1]["pass_at_k"][str(d["k"])] for t in v["trajectory"] if t])
            out.append(f"| {a} | {v['lr']:g} | {len(v['seeds'])} | {_mean(v['final_pass_at_1']):.3f} | {final_k:.3f} | "
                       f"{_interval(c.get('primary', {}))} | {_interval(c.get('endpoint', {}))} | " + " | ".join(shares) + " |")
        out.append("\n**Inertness** (max |w − 1| per step, quantiles over steps and seeds):\n")
        out.append("| arm | mode | median | q99 | max | share of steps below 1e-3 |")
        out.append("|---|---|---|---|---|---|")
        for a, modes in summary["inertness"].items():
            for m, q in modes.items():
                if q.get("n"):
                    out.append(f"| {a} | {m} | {q['q50']:.2g} | {q['q99']:.2g} | {q['max']:.2g} | "
                               f"{q[f'share_below_{INERT:g}']:.3f} |")
    c = summary["compute"]
    out.append(f"\nCompute: {c['runs']} of {c['runs_planned']} runs, {c['run_time_s'] / 3600:.2f} h summed over the runs' "
               "own wall times" + (f", {c['run_time_s'] / c['projected_run_time_s']:.2f}x what the timing projected for "
                                   "the same runs" if c["projected_run_time_s"] else "") + ".")
    return "\n".join(out)


# =============================================================================
# main
# =============================================================================

def make_plan(args: argparse.Namespace, timing: dict | None) -> dict:
    """The study's settings; a timing of this base (same TASK_FLAGS) fixes n and the arms by BUDGET_RULE."""
    plan = {"out": args.out, "flags": [], "steps": STEPS, "eval_every": EVAL_EVERY, "lrs": LRS, "select": SELECT_SEEDS,
            "confirm": CONFIRM_SEEDS, "arms": list(ARMS), "k": K, "n_eval": N_EVAL, "amendment": AMENDMENT}
    if args.quick:
        return plan | QUICK | {"n_eval": 8, "amendment": None}
    if timing and timing.get("task_flags") == TASK_FLAGS and not args.timing:
        plan |= {"n_eval": timing["budget"]["n_eval"], "arms": timing["budget"]["arms"]}
    elif not args.timing:
        print(f"no timing of this base (TASK_FLAGS {TASK_FLAGS}): n = {N_EVAL} and every arm; run --timing first")
    return plan


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="select,confirm", help="comma-separated phases to run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (worker processes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--out", default="", help="run directory (default runs/long, runs/long_quick)")
    parser.add_argument("--results", default="", help="summary JSON (default results/long_study.json; with --quick, "
                                                       "<out>/long_study.json)")
    parser.add_argument("--write-docs", default="", help="markdown file to fill between the long-study markers")
    parser.add_argument("--aggregate-only", action="store_true", help="summarise the finished runs, run nothing")
    parser.add_argument("--timing", action="store_true", help="measure 5 RL steps per arm and an evaluation, then stop")
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny model, budget and grid")
    args = parser.parse_args(argv)
    args.out = args.out or ("runs/long_quick" if args.quick else "runs/long")
    results = Path(args.results or (f"{args.out}/long_study.json" if args.quick else "results/long_study.json"))
    timing_path = results.with_name(results.stem + "_timing.json")
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else None
    plan, start = make_plan(args, timing), time.time()
    if args.timing:
        torch.set_num_threads(args.threads)
        timing = timing_run(plan)
        timing_path.parent.mkdir(parents=True, exist_ok=True)
        timing_path.write_text(json.dumps(finite_or_none({**timing, "budget": budget(timing, plan)}), indent=1))
        print(f"wrote {timing_path}")
        return timing
    archive, base_file = results.with_name(results.stem + "_runs.jsonl.gz"), results.with_name(results.stem + "_base.pt")
    original = base = archived_base(archive)  # original: the base of the archived runs without a base tag
    if not args.aggregate_only:  # the SFT base: the committed one where there is one, else trained (1 thread) and cached
        torch.set_num_threads(args.threads)
        model = load_context(plan["flags"], base_file)["base"]
        base = base_sha256(model)
        if not base_file.exists() and base in known_bases(plan, original or base):  # kept for the next machine
            torch.save(model.state_dict(), base_file.with_suffix(".tmp"))
            base_file.with_suffix(".tmp").replace(base_file)
    original = original or base
    restored = restore_archive(archive, plan, base)
    if restored:
        print(f"restored {restored} finished runs from {archive}")
    phases, ran = set(args.phases.split(",")), 0
    if not args.aggregate_only:
        if "select" in phases:
            ran += run_all(on_base(select_specs(plan), plan, base, original), plan, args.jobs, args.threads)
        choices = selection(load_results(select_specs(plan), plan), plan)["choices"]
        if "confirm" in phases and len(choices) == len(plan["arms"]):
            ran += run_all(on_base(study_confirm_specs(plan, choices) + study_base_specs(plan), plan, base, original), plan,
                           args.jobs, args.threads)
    summary = aggregate(plan, time.time() - start, timing)
    summary["compute"]["runs_this_invocation"] = ran
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(summary, indent=1))
    choices = summary["selection"]["choices"]
    specs = select_specs(plan) + (study_confirm_specs(plan, choices) if len(choices) == len(plan["arms"]) else []) \
        + study_base_specs(plan)
    write_archive(archive, plan, specs, summary["partial"], original)
    png = results.with_suffix(".png")
    if summary["arms"]:
        plot(summary, png)
    if args.write_docs:
        docs = Path(args.write_docs)
        write_block(docs, render_block(summary, str(results), os.path.relpath(png, docs.parent)), BEGIN, END)
    print(f"wrote {results}" + (f" and {png}" if summary["arms"] else "") + (" (partial)" if summary["partial"] else "")
          + f"; {ran} runs this invocation")
    return summary


if __name__ == "__main__":
    main()
