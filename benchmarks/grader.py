"""The math reward on the corpus of public test cases (tests/data/grader_corpus.jsonl): agreement per source, the
wrong answers each grader pays, the slowest call, and answers graded per second, single and batched, for the old
grader (reco_grader.py as of commit OLD_COMMIT, loaded from git history), the new one and math-verify alone.

    python benchmarks/grader.py            # agreement, wrong answers paid, slowest call, throughput
    python benchmarks/grader.py --quick    # agreement only, no throughput runs
    python benchmarks/grader.py --smoke    # the whole path on one case per project, for CI: no measurement

Batched means reco.rewards.math_grader.grade_many (the new grader's worker pool); the old grader had no batch call, so
its "batched" row is a thread pool of the same width over grade_answer (what a caller would have done).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from reco.rewards import math_grader  # noqa: E402

OLD_COMMIT = "b577fbf"  # the last commit with the hand-written whitelist parser
CORPUS = ROOT / "tests" / "data" / "grader_corpus.jsonl"


def load_corpus(path: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def old_grader():
    """reco_grader.py of OLD_COMMIT (the math grader, before it moved to reco/rewards/math_grader.py), as a module of
    its own; None where this clone's history lacks that commit."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:reco_grader.py"], capture_output=True,
                           text=True)
    if shown.returncode:
        return None
    source = shown.stdout
    path = Path(tempfile.mkdtemp()) / "reco_grader_old.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("reco_grader_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def math_verify_alone(response: str, gold: str) -> bool:
    """math-verify as TRL's and open-r1's rewards call it: default extraction (LaTeX and plain expressions)."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(gold if "\\boxed" in gold else f"${gold}$"), parse(response)))
    except Exception:  # noqa: BLE001 - its own timeouts raise
        return False


def project(source: str) -> str:
    return source.split(" ")[0]


def report(name: str, cases: list[dict], verdicts: list[bool], seconds: list[float] | None) -> None:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case, got in zip(cases, verdicts):
        per[project(case["source"])][0] += got == case["verdict"]
        per[project(case["source"])][1] += 1
    agree = sum(got == c["verdict"] for c, got in zip(cases, verdicts))
    print(f"\n{name}: agreement {agree}/{len(cases)} ({agree / len(cases):.1%})")
    for src, (ok, n) in sorted(per.items()):
        print(f"  {src:28} {ok:4}/{n:<4} ({ok / n:.1%})")
    paid = [c for c, got in zip(cases, verdicts) if got and not c["verdict"]]
    print(f"  wrong answers paid: {len(paid)}")
    for c in paid:
        print(f"    response={c['response'][:90]!r} gold={c['gold'][:60]!r} ({c['source']})")
    if seconds:
        k = max(range(len(seconds)), key=seconds.__getitem__)
        print(f"  slowest call: {seconds[k]:.3f} s on response={cases[k]['response'][:80]!r}")


def timed(fn, cases: list[dict]) -> tuple[list[bool], list[float]]:
    verdicts, seconds = [], []
    for c in cases:
        start = time.perf_counter()
        verdicts.append(fn(c["response"], c["gold"]))
        seconds.append(time.perf_counter() - start)
    return verdicts, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="agreement only, no throughput runs")
    parser.add_argument("--smoke", action="store_true", help="every step on one case per project: checks that it "
                        "runs, measures nothing")
    args = parser.parse_args()
    cases = load_corpus()
    if args.smoke:
        cases = list({project(c["source"]): c for c in cases}.values())
    responses, golds = [c["response"] for c in cases], [c["gold"] for c in cases]
    print(f"{len(cases)} cases from {len({project(c['source']) for c in cases})} projects ({CORPUS.name}); "
          f"new grader: {math_grader.WORKERS} workers, {math_grader.TIMEOUT_S} s per call")
    old = old_grader()
    n = math_grader.WORKERS
    math_grader.grade_many([rf"\boxed{{x_{k}}}" for k in range(2 * n)], ["y"] * (2 * n))  # every worker started
    old_name = "old grader (whitelist parser, " + OLD_COMMIT + ")"
    runs = {old_name: old.grade_answer} if old else {}
    if old is None:
        print(f"\n{old_name}: skipped, commit {OLD_COMMIT} is not in this clone's history (git fetch --unshallow)")
    runs |= {"new grader (math_grader)": math_grader.grade_answer, "math-verify alone (0.9 defaults)": math_verify_alone}
    throughput = []
    for name, fn in runs.items():
        verdicts, seconds = timed(fn, cases)
        report(name, cases, verdicts, seconds)
        throughput.append((name, len(cases) / sum(seconds)))
    if args.quick:
        return
    print("\nanswers graded per second on the corpus (single: one call at a time; batched: the whole corpus at once)")
    for name, single in throughput[:len(runs) - 1]:  # math-verify alone is not timed as a reward
        start = time.perf_counter()
        if name.startswith("old"):
            with ThreadPoolExecutor(math_grader.WORKERS) as pool:
                list(pool.map(old.grade_answer, responses, golds))
        else:
            math_grader.grade_many(responses, golds)
        batched = len(cases) / (time.perf_counter() - start)
        print(f"  {name:40} single {single:8.1f}/s   batched {batched:8.1f}/s")


if __name__ == "__main__":
    main()
