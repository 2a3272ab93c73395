"""The import boundary: the bottom floor (reco_mini and its helper modules) never imports reco_scaled.

reco_mini.py is meant to be read and run alone, with reco_scaled built on top of it (docs/design.md section 1).
The check reads each bottom-floor module's AST, so imports inside functions, `import reco_scaled.x as y` and
`from reco_scaled import x` all count; `importlib.import_module("reco_scaled...")` is caught as a string too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOTTOM_FLOOR = ["reco_mini.py", "reco_task.py", "reco_countdown.py", "reco_io.py", "reco_variants.py", "reco_grader.py",
               "reco_data.py", "reco_code.py", "reco_code_sandbox.py", "reco_code_data.py", "reco_code_task.py",
               "reco_code_tiny.py"]
FORBIDDEN = "reco_scaled"


def forbidden_imports(source: str, name: str = "<string>") -> list[str]:
    """'name:line: import ...' for every import of reco_scaled anywhere in `source` (module level or nested)."""
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
        found += [f"{name}:{node.lineno}: imports {m}" for m in mods if m == FORBIDDEN or m.startswith(FORBIDDEN + ".")]
    return found


@pytest.mark.parametrize("source", [
    "import reco_scaled",
    "import reco_scaled.data as d",
    "from reco_scaled.data import build_prompt",
    "from reco_scaled import data",
    "def f():\n    if True:\n        from reco_scaled.data import load_problems\n",
    "class A:\n    def g(self):\n        import torch, reco_scaled.kernels\n",
    "import importlib\nimportlib.import_module('reco_scaled.trainer')",
])
def test_the_checker_finds_every_form_of_import(source):
    assert len(forbidden_imports(source)) == 1


@pytest.mark.parametrize("source", [
    "import reco_io\nfrom reco_data import load_problems",
    "import reco_scaled_extra",  # another package that merely shares the prefix
    "# from reco_scaled.data import build_prompt\ns = 'import reco_scaled'",  # comments and strings are not imports
    "from . import reco_scaled",  # a relative import is the package's own module
])
def test_the_checker_ignores_what_is_not_an_import_of_reco_scaled(source):
    assert forbidden_imports(source) == []


def test_a_nested_import_added_to_reco_mini_is_caught():
    """The real file with one import of reco_scaled appended inside a function must fail the check."""
    source = (ROOT / "reco_mini.py").read_text()
    assert forbidden_imports(source) == []
    head = "def rollout(cfg: Config, model, tokenizer, problems: list, n: int, gen: torch.Generator) -> dict:\n"
    broken = source.replace(head, head + "    from reco_scaled.data import build_prompt\n", 1)
    assert broken != source and len(forbidden_imports(broken)) == 1


@pytest.mark.parametrize("module", BOTTOM_FLOOR)
def test_the_bottom_floor_never_imports_reco_scaled(module):
    path = ROOT / module
    found = forbidden_imports(path.read_text(), module)
    assert not found, "the bottom floor must not import reco_scaled:\n" + "\n".join(found)


def test_every_bottom_floor_module_is_installed():
    text = (ROOT / "pyproject.toml").read_text()
    assert all(f'"{m.removesuffix(".py")}"' in text for m in BOTTOM_FLOOR)
