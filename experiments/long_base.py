"""experiments/long_base.py: is the countdown-long SFT base in the concentration regime?

Trains (or loads from runs/cache) reco_mini's countdown-long base for seed 0 and evaluates it on the validation split
(never the test split): Pass@k for k = 1..n, and the exact and canonical duplicate rates among 8 samples per prompt.
The SFT form skew is reco.tasks.countdown.LONG_SFT_FORM_PRIOR; --prior overrides it for tuning (validation only).

  python experiments/long_base.py                        # the committed prior
  python experiments/long_base.py --prior 0.6,0.25,0.1,0.035,0.015 --sft-steps 600 > runs/tune/x.json
  python experiments/long_base.py --collect runs/tune --out results/long_base_tuning.json   # CHOICE_RULE over them
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
import reco_mini as rm  # noqa: E402
from reco.tasks import TASKS  # noqa: E402
from reco.tasks import countdown as rc  # noqa: E402


def check_base(flags: list[str], groups: int = 64, group_size: int = 8) -> dict:
    """The base's validation Pass@k, its mean response length, and duplicate rates over `groups` prompts."""
    cfg = rm.parse_config(["--task", "countdown-long", "--seed", "0", *flags])
    splits, tokenizer = rc.make_splits(cfg), rc.char_tokenizer(cfg.task)
    start = time.time()
    base = rc.load_base(cfg, tokenizer, set(splits["test"]) | set(splits["val"])).requires_grad_(False)
    sft_s = time.time() - start
    result = rm.evaluate(cfg, base, tokenizer, splits["val"], "base val")
    gen = torch.Generator(cfg.device).manual_seed(12345)
    problems = splits["val"][:groups]
    r = rm.rollout(cfg, base, tokenizer, problems, group_size, gen)
    task = TASKS[cfg.task]
    keys = task.canonical_keys(problems, group_size, r["texts"])
    labels = task.token_labels(problems, group_size, r["texts"], r["resp"], r["mask"], tokenizer)
    responses = [tuple(row[m.bool()].tolist()) for row, m in zip(r["resp"], r["mask"])]
    tokens = [x for row in labels for x in row]
    return {"prior": rc.LONG_SFT_FORM_PRIOR, "flags": flags, "sft_steps": cfg.sft_steps, "sft_or_load_s": round(sft_s, 1),
            "val_pass_at_k": result["pass_at_k"], "val_mean_accuracy": result["mean_accuracy"],
            "response_tokens_mean": r["mask"].sum(-1).float().mean().item(),
            "dup_exact": rc.duplicate_rate([responses[i: i + group_size] for i in range(0, len(responses), group_size)]),
            "dup_canonical": rc.duplicate_rate([keys[i: i + group_size] for i in range(0, len(keys), group_size)]),
            "token_classes": {c: tokens.count(c) / len(tokens) for c in rc.TOKEN_CLASSES},
            "sft_data": rc.sft_duplicate_rate(0), "wall_s": round(time.time() - start, 1)}


CHOICE_RULE = ("among the candidates (validation split only) with Pass@256 >= 0.9, the one whose Pass@1 is closest to "
               "0.1 (the concentration regime of the Countdown base: Pass@1 about 0.1, Pass@256 >= 0.9)")


def choose(candidates: list[dict]) -> dict | None:
    """CHOICE_RULE: the base for the long study, or None if no candidate has the coverage."""
    covered = [c for c in candidates if c["val_pass_at_k"]["256"] >= 0.9]
    return min(covered, key=lambda c: abs(c["val_pass_at_k"]["1"] - 0.1)) if covered else None


def collect(folder: Path) -> dict:
    """Every candidate this script printed into `folder` (one JSON per file), and CHOICE_RULE's choice."""
    candidates = sorted((json.loads(f.read_text()) for f in sorted(folder.glob("*.json")) if f.stat().st_size),
                        key=lambda c: (c["prior"], c["sft_steps"]))
    return {"rule": CHOICE_RULE, "candidates": candidates, "chosen": choose(candidates)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prior", default="", help="comma-separated SFT form prior (tuning only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--collect", default="", help="a folder of this script's outputs: apply CHOICE_RULE to them")
    parser.add_argument("--out", default="", help="with --collect: write the candidates and the choice here")
    args, flags = parser.parse_known_args(argv)
    if args.collect:
        out = collect(Path(args.collect))
        Path(args.out).write_text(json.dumps(out, indent=1)) if args.out else print(json.dumps(out, indent=1))
        return out
    torch.set_num_threads(args.threads)
    if args.prior:
        rc.LONG_SFT_FORM_PRIOR[:] = [float(x) for x in args.prior.split(",")]
    out = check_base(flags)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
