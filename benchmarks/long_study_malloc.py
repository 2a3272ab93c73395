"""Does experiments/long_study.py's WORKER_MALLOC make its workers faster, and leave their numbers unchanged?

    python benchmarks/long_study_malloc.py              # ~2 min with the cached base (training it first: ~15 min)
    python benchmarks/long_study_malloc.py --steps 2 --problems 4
    python benchmarks/long_study_malloc.py --smoke      # the whole path on the study's quick base, for CI (no measurement)

Two child processes run at once, as the study's two workers do, one with glibc's default allocator settings and one
with WORKER_MALLOC: each trains the study's SFT base with grpo for --steps RL steps (one thread, the study's flags)
and then evaluates the base on --problems validation problems at the study's n. It prints each child's seconds per
step, per evaluation and CPU time in the kernel, the ratios (default / tuned: above 1 means the settings help), and
whether the two children's per-step losses and Pass@k are identical. The two children run the same work, so the
machine's noise affects both alike; run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]


def child(out: str, steps: int, problems: int, smoke: bool) -> dict:
    import copy

    import long_study as ls
    import torch

    import reco_mini as rm

    torch.set_num_threads(1)
    quick = ls.QUICK["flags"] if smoke else []  # the study's quick base: SFT in seconds, cached under runs/cache
    ctx = ls.load_context(quick)
    cfg = rm.parse_config([*ls.TASK_FLAGS, *quick, "--method", "grpo", "--steps", str(steps), "--out", out,
                           "--seed", "3"])
    model = copy.deepcopy(ctx["base"]).requires_grad_(True)
    start = time.time()
    rm.train_rl(cfg, "grpo", model, ctx["base"], ctx["tokenizer"], ctx["splits"]["train"], Path(out))
    per_step = (time.time() - start) / steps
    cfg = rm.parse_config([*ls.TASK_FLAGS, *quick, "--n-eval", str(4 if smoke else ls.N_EVAL)])
    start = time.time()
    evaluation = rm.evaluate(cfg, ctx["base"], ctx["tokenizer"], ctx["splits"]["val"][:problems], "benchmark")
    per_eval = time.time() - start
    losses = [json.loads(line)["loss"] for line in open(Path(out) / "log.jsonl")]
    return {"s_per_step": per_step, "s_per_eval": per_eval, "kernel_s": resource.getrusage(resource.RUSAGE_SELF).ru_stime,
            "losses": losses, "pass_at_k": evaluation["pass_at_k"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="RL steps per child")
    parser.add_argument("--problems", type=int, default=16, help="validation problems in each child's evaluation")
    parser.add_argument("--smoke", action="store_true", help="1 step, 2 problems, n 4, on the study's quick base: "
                        "checks that the whole path runs, measures nothing")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.problems = 1, 2
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.problems, args.smoke)))
        return
    import long_study as ls

    with contextlib.chdir(ROOT):  # the base, trained once here if it is not cached yet, not by both children at once
        ls.load_context(ls.QUICK["flags"] if args.smoke else [])
    WORKER_MALLOC = ls.WORKER_MALLOC

    settings = {"default": {k: v for k, v in os.environ.items() if k not in WORKER_MALLOC},
                "tuned": {**os.environ, **WORKER_MALLOC}}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for name, env in settings.items():
            (Path(tmp) / name).mkdir()
            cmd = [sys.executable, __file__, "--child", str(Path(tmp) / name), "--steps", str(args.steps),
                   "--problems", str(args.problems), *(["--smoke"] if args.smoke else [])]
            procs[name] = subprocess.Popen(cmd, cwd=ROOT, env={**env, "TQDM_DISABLE": "1"}, stdout=subprocess.PIPE, text=True)
        out = {}
        for name, proc in procs.items():
            stdout, _ = proc.communicate()
            if proc.returncode:
                sys.exit(f"the {name} child failed with exit code {proc.returncode}")
            out[name] = json.loads(stdout.strip().splitlines()[-1])
    for name, r in out.items():
        print(f"{name:8s} {r['s_per_step']:6.2f} s/step  {r['s_per_eval']:6.2f} s/evaluation  "
              f"{r['kernel_s']:6.1f} s in the kernel")
    d, t = out["default"], out["tuned"]
    print(f"default / tuned: {d['s_per_step'] / t['s_per_step']:.2f}x per step, {d['s_per_eval'] / t['s_per_eval']:.2f}x "
          f"per evaluation")
    same = d["losses"] == t["losses"] and d["pass_at_k"] == t["pass_at_k"]
    print("losses and Pass@k identical" if same else "losses or Pass@k DIFFER")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
