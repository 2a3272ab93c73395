"""Math problems: the benchmark registry, over reco_data's JSONL/parquet loading and prompt templates.

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
from dataclasses import dataclass
from pathlib import Path

# Loading and prompts live on the bottom floor (reco_data), which reco_mini uses without reco_scaled.
from reco_data import SYSTEM_PROMPT, TEMPLATES, DataError, Keys, _problem, build_prompt, load_problems  # noqa: F401

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
