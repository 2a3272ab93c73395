"""Check the tutorial's code blocks against the code, and refresh them from it.

Every fenced block in a chapter is one of these kinds (the words after the language say which):

  ```python include=FILE:NAME [start="TEXT"] [end="TEXT"]
      The source of the top-level function, class or assignment NAME of FILE, a path from the
      repository root such as reco_mini.py or reco/tasks/countdown.py (``Class.method`` works too),
      byte for byte. With start/end: only the lines from the first one containing `start` through the
      first later one containing `end`, dedented; the range must be whole statements (the body must
      parse as Python), never an expression cut in two. Never edit the body by hand: run --write.
  ```python run
      A snippet that is executed. The snippets of one chapter share a namespace and run in order,
      from the repository root, with the repository root and tutorial/ on sys.path.
  ```text output
      Directly after a `python run` block: exactly what that snippet printed. --write fills it in.
  ```bash cli
      Commands. Each line must be a command this script knows how to check: `python reco_mini.py ARGS`
      (the flags are parsed by reco_mini.parse_config), `python FILE.py ...` (FILE exists),
      `python -m pytest PATH...` (the paths exist), `python -m MODULE ...` (the module exists),
      `torchrun ... -m MODULE --config FILE [k=v ...]` (the module exists and
      reco_scaled.config.load_config accepts the file and overrides),
      `pip install -r FILE` (FILE exists). Lines starting with # are comments.
  ```text
      Pseudocode or a file layout: prose in a box, nothing to run.

Anything else (an unmarked ```python block, say) is an error: a block that nothing checks is a
block that drifts.

    python tutorial/chapters.py            # check every chapter (what tests/test_tutorial.py does)
    python tutorial/chapters.py 03 04      # check some chapters
    python tutorial/chapters.py --write    # rewrite include bodies and output blocks from the code
    python tutorial/chapters.py --words    # the reading path's words, file by file, against its budget
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import os
import shlex
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

TUTORIAL = Path(__file__).resolve().parent
ROOT = TUTORIAL.parent
CHAPTERS = ("01-grpo-from-scratch.md", "02-pass-at-k.md", "03-response-level-concentration.md",
            "04-token-level-concentration.md", "05-reco-end-to-end.md", "06-scaling-up.md")
FILES = (*CHAPTERS, "README.md")  # every Markdown file whose code blocks are checked
# the student's reading path (issue 54): what a newcomer reads before reco_scaled, at most WORD_BUDGET words
TEACHING_PATH = ("README.md", "tutorial/README.md", *(f"tutorial/{c}" for c in CHAPTERS[:5]), "reco_mini.py")
WORD_BUDGET = 18_000


@dataclass
class Block:
    """One fenced block: lines [open_line, close_line] of the chapter (0-based), body in between."""

    lang: str
    attrs: dict[str, str]
    flags: list[str]
    body: str
    open_line: int
    close_line: int

    @property
    def kind(self) -> str:
        if self.lang == "python" and "include" in self.attrs:
            return "include"
        if self.lang == "python" and self.flags == ["run"]:
            return "run"
        if self.lang == "text" and self.flags == ["output"]:
            return "output"
        if self.lang == "bash" and self.flags == ["cli"]:
            return "cli"
        if self.lang == "text" and not self.flags and not self.attrs:
            return "text"
        return "unknown"


@dataclass
class Report:
    chapter: str
    errors: list[str] = field(default_factory=list)
    snippets: int = 0
    includes: int = 0
    commands: int = 0
    outputs: int = 0

    def error(self, block: Block | None, message: str) -> None:
        where = f"{self.chapter}:{block.open_line + 1}" if block else self.chapter
        self.errors.append(f"{where}: {message}")


def parse_blocks(text: str) -> list[Block]:
    """The fenced blocks (``` fences at the start of a line) of a Markdown text."""
    lines, blocks, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            info = line[3:].strip()
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"line {i + 1}: code fence is never closed")
            words = shlex.split(info) if info else []
            lang = words[0] if words else ""
            attrs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            flags = [w for w in words[1:] if "=" not in w]
            blocks.append(Block(lang, attrs, flags, "\n".join(lines[i + 1: j]), i, j))
            i = j + 1
        else:
            i += 1
    return blocks


# --------------------------------------------------------------------------------------- includes

def source_of(path: str, name: str) -> str:
    """The exact source lines of top-level NAME (def, class or assignment; 'Class.method' too) in path."""
    text = (ROOT / path).read_text()
    body = ast.parse(text).body
    node = None
    for part in name.split("."):
        node = next((n for n in body if _defines(n, part)), None)
        if node is None:
            raise LookupError(f"{path} defines no {name!r}")
        body = getattr(node, "body", [])
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = text.split("\n")[start - 1: node.end_lineno]
    return textwrap.dedent("\n".join(lines))


def _defines(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def include_text(attrs: dict[str, str]) -> str:
    """What an include block's body must be."""
    path, sep, name = attrs["include"].partition(":")
    if not sep:
        raise ValueError(f"include={attrs['include']!r}: expected FILE:NAME")
    src = source_of(path, name)
    if "start" not in attrs and "end" not in attrs:
        return src
    lines = src.split("\n")
    first = next((i for i, s in enumerate(lines) if attrs.get("start", "") in s), None) if "start" in attrs else 0
    if first is None:
        raise LookupError(f"{name}: no line contains start={attrs['start']!r}")
    last = next((i for i in range(first, len(lines)) if attrs["end"] in lines[i]), None) if "end" in attrs \
        else len(lines) - 1
    if last is None:
        raise LookupError(f"{name}: no line after start contains end={attrs['end']!r}")
    return textwrap.dedent("\n".join(lines[first: last + 1]))


def unparsable(code: str) -> str | None:
    """None if `code` parses as Python (a statement such as `return` outside a function is fine), else why not."""
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    return None


# --------------------------------------------------------------------------------------- commands

def check_command(line: str) -> str | None:
    """None if the command checks out, else why not."""
    words = shlex.split(line)
    if words[:1] == ["python"] and words[1:3] == ["-m", "pytest"]:
        missing = [w.split("::")[0] for w in words[3:] if not w.startswith("-") and not (ROOT / w.split("::")[0]).exists()]
        return f"pytest paths not found: {missing}" if missing else None
    if words[:2] == ["python", "-m"] and len(words) > 2:
        return None if _module_exists(words[2]) else f"module {words[2]} not found"
    if words[:1] == ["python"] and len(words) > 1 and words[1].endswith(".py"):
        if not (ROOT / words[1]).exists():
            return f"{words[1]} not found"
        if words[1] == "reco_mini.py":
            return _check_reco_mini_args(words[2:])
        return None
    if words[:1] == ["torchrun"]:
        return _check_torchrun(words[1:])
    if words[:3] == ["pip", "install", "-r"]:
        return None if (ROOT / words[3]).exists() else f"{words[3]} not found"
    return "not a command this checker knows (see tutorial/chapters.py)"


def _check_reco_mini_args(args: list[str]) -> str | None:
    from reco_mini import parse_config

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse_config(args)
    except SystemExit:
        return f"reco_mini.py rejects the flags: {err.getvalue().strip()}"
    return None


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _check_torchrun(args: list[str]) -> str | None:
    if "-m" not in args:
        return "torchrun command without -m MODULE"
    module = args[args.index("-m") + 1]
    rest = args[args.index("-m") + 2:]
    if not _module_exists(module):
        return f"module {module} not found"
    if "--config" not in rest:
        return "torchrun command without --config FILE"
    path = rest[rest.index("--config") + 1]
    overrides = [w for w in rest[rest.index("--config") + 2:] if "=" in w]
    if not (ROOT / path).exists():
        return f"config {path} not found"
    from reco_scaled.config import ConfigError, load_config

    try:
        load_config(ROOT / path, overrides)
    except ConfigError as e:
        return f"config {path}: {e}"
    return None


# --------------------------------------------------------------------------------------- running

def run_snippet(code: str, namespace: dict, filename: str) -> str:
    """Execute code in namespace; return what it printed (stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the tutorial's own snippets
    return out.getvalue()


@contextlib.contextmanager
def _in_repo_root():
    old_cwd, old_path = os.getcwd(), list(sys.path)
    os.chdir(ROOT)
    sys.path[:0] = [str(ROOT), str(TUTORIAL)]  # snippets import reco_mini and make_figures
    try:
        yield
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path


def check_chapter(name: str, text: str | None = None, *, run: bool = True, write: bool = False) -> tuple[Report, str]:
    """Check one chapter; with write=True also return its text with includes and outputs refreshed."""
    report = Report(name)
    text = (TUTORIAL / name).read_text() if text is None else text
    try:
        blocks = parse_blocks(text)
    except ValueError as e:
        report.error(None, str(e))
        return report, text
    lines = text.split("\n")
    replacements: dict[int, tuple[int, str]] = {}  # open_line -> (close_line, new body)
    namespace: dict = {"__name__": f"tutorial_{name.split('-')[0]}"}
    last_run: Block | None = None
    last_stdout: str | None = None
    with _in_repo_root():
        for b in blocks:
            kind = b.kind
            follows_run = last_run is not None and all(not s.strip() for s in lines[last_run.close_line + 1: b.open_line])
            if kind == "unknown":
                report.error(b, f"unchecked code block ```{b.lang} {' '.join(b.flags)}```: mark it "
                                "include=FILE:NAME, run, output, cli, or make it ```text")
            elif kind == "include":
                report.includes += 1
                try:
                    want = include_text(b.attrs)
                except (LookupError, ValueError, OSError) as e:
                    report.error(b, str(e))
                else:
                    if (why := unparsable(want)) is not None:
                        report.error(b, f"include {b.attrs['include']} does not parse as Python ({why}): choose "
                                        "start/end lines that take whole statements")
                    if b.body != want:
                        if write:
                            replacements[b.open_line] = (b.close_line, want)
                        else:
                            report.error(b, f"include {b.attrs['include']} differs from the source "
                                            "(run python tutorial/chapters.py --write)")
            elif kind == "run" and run:
                report.snippets += 1
                try:
                    last_stdout = run_snippet(b.body, namespace, f"{name}:{b.open_line + 2}")
                except BaseException as e:  # noqa: BLE001 - a snippet's failure is a report, even SystemExit
                    import traceback

                    tb = traceback.format_exception(e)
                    report.error(b, "snippet failed:\n" + "".join(tb[-6:]))
                    last_stdout = None
                    if isinstance(e, KeyboardInterrupt):
                        raise
            elif kind == "output":
                report.outputs += 1
                if not follows_run:
                    report.error(b, "an output block must directly follow a `python run` block")
                elif run and last_stdout is not None:
                    want = last_stdout.rstrip("\n")
                    if b.body != want:
                        if write:
                            replacements[b.open_line] = (b.close_line, want)
                        else:
                            report.error(b, "printed output differs from the block:\n--- block\n"
                                            f"{b.body}\n--- printed\n{want}")
            elif kind == "cli":
                for line in b.body.split("\n"):
                    if line.strip() and not line.lstrip().startswith("#"):
                        report.commands += 1
                        if (why := check_command(line)) is not None:
                            report.error(b, f"`{line.strip()}`: {why}")
            if kind == "run":
                last_run = b
            elif kind != "output" or not follows_run:
                last_run, last_stdout = None, None
    if write and replacements:
        out, i = [], 0
        while i < len(lines):
            if i in replacements:
                close, body = replacements[i]
                out += [lines[i], *body.split("\n"), lines[close]]
                i = close + 1
            else:
                out.append(lines[i])
                i += 1
        text = "\n".join(out)
    return report, text


def teaching_path_words() -> dict[str, int]:
    """Words of each file of the reading path, counted as `wc -w` does (runs of non-whitespace)."""
    return {name: len((ROOT / name).read_text().split()) for name in TEACHING_PATH}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check (or refresh) the tutorial's code blocks.")
    parser.add_argument("chapters", nargs="*", help="chapter numbers or file names (default: all)")
    parser.add_argument("--write", action="store_true", help="rewrite include bodies and output blocks in place")
    parser.add_argument("--words", action="store_true", help="print the reading path's words, file by file")
    args = parser.parse_args(argv)
    if args.words:
        words = teaching_path_words()
        print("\n".join(f"{n:>7,}  {name}" for name, n in words.items()))
        print(f"{sum(words.values()):>7,}  in all (budget {WORD_BUDGET:,})")
        return 0 if sum(words.values()) <= WORD_BUDGET else 1
    names = [c for c in FILES if not args.chapters or any(c.startswith(a) or c == a for a in args.chapters)]
    failed = 0
    for name in names:
        report, text = check_chapter(name, write=args.write)
        if args.write:
            if text != (TUTORIAL / name).read_text():
                (TUTORIAL / name).write_text(text)
                print(f"{name}: rewritten")
            if report.errors:  # write, then check again: what is left is a real error
                report, _ = check_chapter(name)
        status = "ok" if not report.errors else "FAILED"
        print(f"{name}: {status} ({report.includes} includes, {report.snippets} snippets, "
              f"{report.outputs} outputs, {report.commands} commands)")
        for e in report.errors:
            print("  " + e.replace("\n", "\n    "))
        failed += bool(report.errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
