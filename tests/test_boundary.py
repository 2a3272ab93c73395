"""The import boundary (docs/design.md section 1): the package reco/ never imports reco_mini, reco_scaled or
experiments, and reco_mini.py, which stands on it, never imports reco_scaled or experiments.

reco_mini.py is meant to be read and run alone, with reco_scaled and the studies built on top of it; reco/ is the
library under it, so an import of reco_mini from reco/ would also load a second copy of reco_mini's registries when it
runs as a script (__main__). The check reads each file's AST, so imports inside functions, `import reco_scaled.x as y`
and `from reco_scaled import x` all count; `importlib.import_module("reco_scaled...")` is caught as a string too.
Above its `main`, reco_mini reaches the package for the task's interface (reco.tasks) and at most three other modules.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "reco").rglob("*.py"))
FLOOR = ["reco_mini.py", *PACKAGE]
ABOVE = ("reco_scaled", "experiments")  # what nothing on the floor imports
ALSO_ABOVE_THE_PACKAGE = ("reco_mini",)  # what reco/ may not import either


def forbidden_imports(source: str, name: str = "<string>", forbidden: tuple[str, ...] = ABOVE) -> list[str]:
    """'name:line: imports ...' for every import of a module in `forbidden` (or below it) anywhere in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""] if node.level == 0 else []
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in
              ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            mods = [str(node.args[0].value)]
        else:
            continue
        found += [f"{name}:{node.lineno}: imports {m}" for m in mods
                  if any(m == f or m.startswith(f + ".") for f in forbidden)]
    return found


@pytest.mark.parametrize("source", [
    "import reco_scaled",
    "import reco_scaled.data as d",
    "from reco_scaled.data import build_prompt",
    "from reco_scaled import data",
    "def f():\n    if True:\n        from reco_scaled.data import load_problems\n",
    "class A:\n    def g(self):\n        import torch, reco_scaled.kernels\n",
    "import importlib\nimportlib.import_module('reco_scaled.trainer')",
    "import experiments.lab",
    "from experiments import lab",
])
def test_the_checker_finds_every_form_of_import(source):
    assert len(forbidden_imports(source)) == 1


@pytest.mark.parametrize("source", [
    "from reco import cli\nfrom reco.data.math import load_problems\nimport reco.tasks",
    "import reco_scaled_extra",  # another package that merely shares the prefix
    "import experiments_old",
    "# from reco_scaled.data import build_prompt\ns = 'import reco_scaled'",  # comments and strings are not imports
    "from . import reco_scaled",  # a relative import is the package's own module
])
def test_the_checker_ignores_what_is_not_an_import_from_above(source):
    assert forbidden_imports(source, forbidden=ABOVE + ALSO_ABOVE_THE_PACKAGE) == []


def test_the_package_is_all_there():
    """The floor lists the package's files (a glob that found nothing would make the checks below vacuous)."""
    assert {"reco/__init__.py", "reco/cli.py", "reco/hf.py", "reco/log.py", "reco/tasks/__init__.py",
            "reco/rewards/sandbox.py", "reco/data/math.py"} <= set(PACKAGE)


def test_a_nested_import_added_to_reco_mini_is_caught():
    """The real file with one import of reco_scaled appended inside a function must fail the check."""
    source = (ROOT / "reco_mini.py").read_text()
    assert forbidden_imports(source) == []
    head = "def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:\n"
    broken = source.replace(head, head + "    from reco_scaled.data import build_prompt\n", 1)
    assert broken != source and len(forbidden_imports(broken)) == 1


def test_an_import_of_reco_mini_added_to_the_package_is_caught():
    """The same for reco/: one `import reco_mini` inside a function of the real reco/tasks/__init__.py."""
    source = (ROOT / "reco" / "tasks" / "__init__.py").read_text()
    head = "    def base(self, cfg, splits: dict[str, list]):\n"
    broken = source.replace(head, head + "        import reco_mini\n", 1)
    assert broken != source and len(forbidden_imports(broken, forbidden=ABOVE + ALSO_ABOVE_THE_PACKAGE)) == 1


@pytest.mark.parametrize("path", FLOOR)
def test_the_floor_never_imports_what_stands_on_it(path):
    forbidden = ABOVE if path == "reco_mini.py" else ABOVE + ALSO_ABOVE_THE_PACKAGE
    found = forbidden_imports((ROOT / path).read_text(), path, forbidden)
    assert not found, f"{path} must not import {', '.join(forbidden)}:\n" + "\n".join(found)


def package_modules_above_main(source: str) -> set[str]:
    """The modules of reco/ whose names reco_mini's code above `def main` uses (its imports excluded)."""
    tree = ast.parse(source)
    origin = {}  # local name -> the reco module it comes from
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "reco":
            for alias in node.names:
                module = node.module if node.module != "reco" else f"reco.{alias.name}"
                origin[alias.asname or alias.name] = module
    body = tree.body[:next(i for i, node in enumerate(tree.body) if getattr(node, "name", "") == "main")]
    used = {n.id for node in body if not isinstance(node, ast.Import | ast.ImportFrom)
            for n in ast.walk(node) if isinstance(n, ast.Name)}
    return {origin[name] for name in used if name in origin}


def test_above_main_reco_mini_reaches_the_tasks_and_at_most_three_other_modules():
    """Issue 54: a reader of train_rl opens the task's interface and at most three other files of the package (its
    flags and checks, the models and sampling, the run log); main may also call the package to report."""
    source = (ROOT / "reco_mini.py").read_text()
    reached = package_modules_above_main(source)
    assert "reco.tasks" in reached and len(reached - {"reco.tasks"}) <= 3, sorted(reached)
    head = "def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:\n"
    more = source.replace(head, head + "    report.write_results({}, cfg.out)\n", 1)  # a fourth module, above main
    assert more != source and len(package_modules_above_main(more) - {"reco.tasks"}) == 4


def package_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module of reco/ -> the modules of reco/ it imports anywhere in its file (inside functions too)."""
    modules = {p.removesuffix(".py").removesuffix("/__init__").replace("/", "."): p for p in PACKAGE}
    graph = {}
    for module, path in modules.items():
        graph[module] = set()
        for node in ast.walk(ast.parse((root / path).read_text(), filename=path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                         for a in node.names]
            else:
                continue
            graph[module] |= {n for n in names if n in modules and n != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle a -> b -> ... -> a of the graph, found by a depth-first walk from every module."""
    circles = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            module, path = stack.pop()
            for imported in sorted(graph[module]):
                if imported == start:
                    circles.append(path + [start])
                elif imported not in path and imported > start:  # each circle once, from its smallest module
                    stack.append((imported, path + [imported]))
    return circles


def test_the_circle_finder_finds_a_circle_inside_a_function():
    assert import_circles({"reco.cli": {"reco.data.math"}, "reco.data.math": {"reco.cli"}, "reco.log": set()}) == [
        ["reco.cli", "reco.data.math", "reco.cli"]]


def test_no_module_of_the_package_imports_itself_through_another():
    """reco/cli.py took missing_file from reco/data/math.py, which took fail from reco/cli.py (issue 60)."""
    graph = package_imports()
    assert graph["reco.cli"] and graph["reco.tasks"]  # the walk sees the package's imports
    assert import_circles(graph) == []
