"""reco_data.py: math problems from JSONL or parquet files, and the math prompt templates.

The bottom floor of the project, beside reco_grader: reco_mini (its `--task math`) and reco_scaled both read
problems and build prompts with this module, and it imports nothing of either.

``load_problems`` returns ``list[dict]`` whose dicts hold ``"problem"`` and ``"answer"`` (strings) and ``"id"``
(a string, unique within the file), plus the row's other fields unchanged. Bad input never gets dropped
silently: it raises :class:`DataError` naming the file, the line (JSONL) or row (parquet), and the field.
The benchmark registry (which files, which hub ids) stays in ``reco_scaled.data``.
"""
from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
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
