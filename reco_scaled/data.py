"""Math problems: JSONL/parquet loading, prompt templates and the benchmark registry.

Every loader returns ``list[dict]`` whose dicts hold ``"problem"`` and ``"answer"`` (strings) and ``"id"``
(a string, unique within the file), plus the row's other fields unchanged. Bad input never gets dropped
silently: it raises :class:`DataError` naming the file, the line (JSONL) or row (parquet), and the field.

Benchmarks (``load_benchmark``) are read from ``<data_dir>/<name>.jsonl`` or ``<data_dir>/<name>.parquet``.
No dataset is committed; export each one once from the Hugging Face hub, on a machine that reaches it::

    from datasets import load_dataset
    load_dataset("HuggingFaceH4/MATH-500", split="test").to_json("data/math500.jsonl")
    load_dataset("HuggingFaceH4/aime_2024", split="train").to_json("data/aime24.jsonl")
    load_dataset("math-ai/amc23", split="test").to_json("data/amc23.jsonl")
    load_dataset("math-ai/minervamath", split="test").to_json("data/minerva.jsonl")
    load_dataset("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", split="train").to_json("data/olympiadbench.jsonl")

(500, 30, 40, 272 and 675 problems.) The ``test.jsonl`` files of the Qwen2.5-Math evaluation suite
(``evaluation/data/<set>/test.jsonl``) work too, renamed to the names above: the registry accepts both
field layouts (for example Minerva's ``problem``/``solution``, whose gold answer is the solution's last
``\\boxed{}``, which ``reco_mini.grade_answer`` extracts). When no local file exists and ``datasets`` is
installed, ``load_benchmark`` tries the hub id above before giving up.
"""
from __future__ import annotations

import importlib.util
import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

Keys = str | Sequence[str]

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("qwen-boxed", "chat", "plain")


class DataError(ValueError):
    """Malformed problem data; the message starts with ``path:line:``."""


# -- loading ----------------------------------------------------------------------------------------

def _as_text(value: object) -> str | None:
    """A problem/answer value as a string: strings and numbers as they are, a non-empty list of them
    (OlympiadBench's ``final_answer``) joined by ", "; anything else (None, bool, dict, ...) is None."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
        parts = [_as_text(v) for v in value]
        if None not in parts:
            return ", ".join(parts)
    return None


def _pick(row: dict, keys: Keys) -> str | None:
    """The first of `keys` present in `row` (one name or several alternatives)."""
    for key in [keys] if isinstance(keys, str) else keys:
        if key in row:
            return key
    return None


def _describe(keys: Keys) -> str:
    return f"'{keys}'" if isinstance(keys, str) else " or ".join(f"'{k}'" for k in keys)


def _problem(row: object, where: str, problem_key: Keys, answer_key: Keys, index: int) -> dict:
    """Validate one raw row and return it normalised; `where` is "path:line" for messages."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    out = dict(row)
    for keys, field in ((problem_key, "problem"), (answer_key, "answer")):
        key = _pick(row, keys)
        if key is None:
            raise DataError(f"{where}: missing field {_describe(keys)}")
        text = _as_text(row[key])
        if text is None or not text.strip():
            got = "an empty string" if text is not None else f"{type(row[key]).__name__} {str(row[key])[:40]}"
            raise DataError(f"{where}: field '{key}' must be a non-empty string, number or list of them, got {got}")
        out.pop(key)
        out[field] = text
    out["id"] = str(row["id"]) if row.get("id") is not None else str(index)
    return out


def _jsonl_rows(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed value) for every non-blank line."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append((lineno, json.loads(line)))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    return rows


def _parquet_rows(path: Path) -> list[tuple[int, object]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow), or convert the file to JSONL") from None
    return list(enumerate(pq.read_table(path).to_pylist(), 1))


def load_problems(path: str | Path, problem_key: Keys = "problem", answer_key: Keys = "answer") -> list[dict]:
    """Problems from a JSONL (one object per line) or ``.parquet`` file.

    `problem_key`/`answer_key` name the source fields; a sequence of names means "the first one present".
    Ids come from an ``id`` field when there is one, else the 0-based row index; they must be unique.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    parquet = path.suffix == ".parquet"
    raw = _parquet_rows(path) if parquet else _jsonl_rows(path)
    if not raw:
        raise DataError(f"{path}: no problems (the file is empty)")
    problems, seen = [], {}
    for index, (lineno, row) in enumerate(raw):
        where = f"{path}:row {lineno}" if parquet else f"{path}:{lineno}"
        p = _problem(row, where, problem_key, answer_key, index)
        if p["id"] in seen:
            raise DataError(f"{where}: duplicate id {p['id']!r} (first at {seen[p['id']]})")
        seen[p["id"]] = where
        problems.append(p)
    return problems


# -- prompts ----------------------------------------------------------------------------------------

def build_prompt(tokenizer, problem_text: str, template: str = "qwen-boxed") -> str:
    """The prompt text for one problem.

    - ``qwen-boxed``: the Qwen2.5-Math boxed chat template, written out (needs no tokenizer template);
    - ``chat``: ``tokenizer.apply_chat_template`` with the same system message (instruct models, e.g. Llama);
    - ``plain``: a plain-text question/answer prompt for base models without a chat format.
    """
    if template == "qwen-boxed":
        return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
                f"<|im_start|>user\n{problem_text}<|im_end|>\n<|im_start|>assistant\n")
    if template == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("template 'chat' needs a tokenizer with a chat template; use 'qwen-boxed' or 'plain'")
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem_text}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if template == "plain":
        return f"Question: {problem_text}\n{SYSTEM_PROMPT}\nAnswer:"
    raise ValueError(f"unknown prompt template {template!r}; choose one of {', '.join(TEMPLATES)}")


# -- benchmarks -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark lives: a local file name under the data dir, its fields, and its hub source."""

    name: str
    problem_key: tuple[str, ...]
    answer_key: tuple[str, ...]
    hf_id: str
    hf_split: str
    hf_config: str | None = None
    size: int = 0  # problems in the published set (documentation only)


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in [
    Benchmark("math500", ("problem",), ("answer",), "HuggingFaceH4/MATH-500", "test", size=500),
    Benchmark("aime24", ("problem", "Problem"), ("answer", "Answer"), "HuggingFaceH4/aime_2024", "train", size=30),
    Benchmark("amc23", ("question", "problem"), ("answer",), "math-ai/amc23", "test", size=40),
    Benchmark("minerva", ("question", "problem"), ("answer", "solution"), "math-ai/minervamath", "test", size=272),
    Benchmark("olympiadbench", ("question", "problem"), ("final_answer", "answer"), "Hothan/OlympiadBench", "train",
              hf_config="OE_TO_maths_en_COMP", size=675),
]}


def _from_hub(spec: Benchmark) -> list[dict]:
    """The benchmark through ``datasets.load_dataset``; any failure (offline, missing id) is a DataError."""
    import datasets

    source = f"hf:{spec.hf_id}" + (f"/{spec.hf_config}" if spec.hf_config else "") + f"[{spec.hf_split}]"
    try:
        rows = list(datasets.load_dataset(spec.hf_id, spec.hf_config, split=spec.hf_split))
    except Exception as e:  # network, auth, renamed dataset: all mean "not available here"
        raise DataError(f"{source}: could not load from the hub ({type(e).__name__}: {e})") from e
    if not rows:
        raise DataError(f"{source}: no problems")
    return [_problem(row, f"{source}:row {i + 1}", spec.problem_key, spec.answer_key, i) for i, row in enumerate(rows)]


def load_benchmark(name: str, data_dir: str | Path = "data", hub: bool = True) -> list[dict]:
    """A registered benchmark from ``<data_dir>/<name>.jsonl`` or ``.parquet``, else (with `hub` and
    ``datasets`` installed) from the hub."""
    if name not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)} (use --files name=path for others)")
    spec = BENCHMARKS[name]
    for suffix in (".jsonl", ".parquet"):
        path = Path(data_dir) / f"{name}{suffix}"
        if path.is_file():
            return load_problems(path, spec.problem_key, spec.answer_key)
    missing = f"{Path(data_dir) / name}.jsonl (or .parquet) not found"
    if hub and importlib.util.find_spec("datasets") is not None:
        try:
            return _from_hub(spec)
        except DataError as e:
            raise DataError(f"{missing}, and {e}") from e
    config = f", {spec.hf_config!r}" if spec.hf_config else ""
    raise DataError(f"{missing}. Export it once where the hub is reachable: datasets.load_dataset("
                    f"{spec.hf_id!r}{config}, split={spec.hf_split!r}).to_json({str(Path(data_dir) / name)!r} + '.jsonl')")
