"""reco_scaled.data: problem loading (JSONL, parquet), bad-input errors, prompt templates, the benchmark registry."""
import json
import sys
from pathlib import Path

import pytest

from reco.rewards import math_grader
from reco.tasks import countdown
from reco_scaled.data import BENCHMARKS, DataError, build_prompt, load_benchmark, load_problems

FIXTURE = Path(__file__).parent / "fixtures" / "math_small.jsonl"


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_fixture_loads_with_ids_and_strings():
    problems = load_problems(FIXTURE)
    assert len(problems) == 12
    assert all(isinstance(p["problem"], str) and isinstance(p["answer"], str) for p in problems)
    assert problems[2] == {"id": "frac-2", "problem": problems[2]["problem"], "answer": "\\frac{1}{2}"}
    assert len({p["id"] for p in problems}) == 12


def test_numbers_lists_alternative_keys_and_extra_fields_are_kept(tmp_path):
    path = write(tmp_path / "p.jsonl",
                 json.dumps({"question": "q0", "final_answer": ["$3$"], "level": 5}),
                 "",  # blank lines are skipped, but line numbers still count them
                 json.dumps({"problem": "q1", "final_answer": [1, "2"]}),
                 json.dumps({"question": "q2", "final_answer": 0.25}))
    problems = load_problems(path, ("question", "problem"), "final_answer")
    assert [p["problem"] for p in problems] == ["q0", "q1", "q2"]
    assert [p["answer"] for p in problems] == ["$3$", "1, 2", "0.25"]
    assert [p["id"] for p in problems] == ["0", "1", "2"]  # no id field: the row index
    assert problems[0]["level"] == 5 and "question" not in problems[0]


@pytest.mark.parametrize("lines, message", [
    (['{"problem": "a", "answer": "1"}', '{"problem": "b", "answer": '], ":2: not valid JSON"),
    (['{"problem": "a", "answer": "1"}', '', '{"problem": "b"}'], ":3: missing field 'answer'"),
    (['{"answer": "1"}'], ":1: missing field 'problem'"),
    (['{"problem": "a", "answer": {"value": 1}}'],
     ":1: field 'answer' must be a non-empty string, number or list of them, got dict {"),
    (['{"problem": "a", "answer": null}'], ":1: field 'answer' must be"),
    (['{"problem": "a", "answer": true}'], ":1: field 'answer' must be"),
    (['{"problem": "a", "answer": []}'], ":1: field 'answer' must be"),
    (['{"problem": "  ", "answer": "1"}'],
     ":1: field 'problem' must be a non-empty string, number or list of them, got an empty string"),
    (['["a", "1"]'], ":1: expected a JSON object, got list"),
    (['{"id": 7, "problem": "a", "answer": "1"}', '{"id": "7", "problem": "b", "answer": "2"}'], ":2: duplicate id '7'"),
])
def test_bad_input_names_file_line_and_field(tmp_path, lines, message):
    path = write(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(DataError) as err:
        load_problems(path)
    assert str(err.value).startswith(str(path) + ":")
    assert message in str(err.value)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_is_an_error(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match="empty.jsonl: no problems"):
        load_problems(path)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: no such file"):
        load_problems(tmp_path / "nope.jsonl")


def test_parquet_round_trip(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow (requirements.txt) is not installed")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "math.parquet")
    assert load_problems(tmp_path / "math.parquet") == load_problems(FIXTURE)

    # OlympiadBench-style list answers survive parquet too; bad rows name the row
    pq.write_table(pa.Table.from_pylist([{"question": "q", "final_answer": ["$2$", "$3$"]}]), tmp_path / "ob.parquet")
    assert load_problems(tmp_path / "ob.parquet", "question", "final_answer")[0]["answer"] == "$2$, $3$"
    pq.write_table(pa.Table.from_pylist([{"problem": "a", "answer": "1"}, {"problem": "b", "answer": None}]),
                   tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet:row 2: field 'answer' must be"):
        load_problems(tmp_path / "bad.parquet")


def test_parquet_without_pyarrow_says_so(tmp_path, monkeypatch):
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DataError, match=r"x\.parquet: reading parquet needs pyarrow"):
        load_problems(tmp_path / "x.parquet")


# -- prompts ----------------------------------------------------------------------------------------

def test_qwen_boxed_template_is_exact():
    assert build_prompt(None, "What is 1+1?") == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n")


def test_chat_and_plain_templates():
    tok = countdown.char_tokenizer()
    with pytest.raises(ValueError, match="chat template"):
        build_prompt(tok, "q", "chat")
    tok.chat_template = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}")
    assert build_prompt(tok, "What is 2+2?", "chat") == (
        "[system]Please reason step by step, and put your final answer within \\boxed{}.\n"
        "[user]What is 2+2?\n[assistant]")
    plain = build_prompt(tok, "What is 2+2?", "plain")
    assert plain.startswith("Question: What is 2+2?\n") and "\\boxed{}" in plain and plain.endswith("Answer:")
    with pytest.raises(ValueError, match="unknown prompt template"):
        build_prompt(tok, "q", "alpaca")


# -- benchmark registry -----------------------------------------------------------------------------

# One row per benchmark in its published field layout (see reco_scaled.data's docstring).
NATIVE_ROWS = {
    "math500": {"problem": "p", "answer": "\\frac{1}{2}", "unique_id": "test/algebra/1.json"},
    "aime24": {"id": 60, "problem": "p", "answer": "204"},
    "amc23": {"id": 0, "question": "p", "answer": 27.0},
    "minerva": {"question": "p", "answer": "0.3"},
    "olympiadbench": {"id": 1606, "question": "p", "final_answer": ["$\\frac{1}{3}$"], "is_multiple_answer": False},
}


def test_registry_reads_each_benchmark_in_its_native_layout(tmp_path):
    assert {n for n, b in BENCHMARKS.items() if not b.code} == set(NATIVE_ROWS)  # code: tests/test_code_data.py
    for name, row in NATIVE_ROWS.items():
        write(tmp_path / f"{name}.jsonl", json.dumps(row))
        [problem] = load_benchmark(name, tmp_path, hub=False)
        assert problem["problem"] == "p" and problem["answer"], name
    assert load_benchmark("olympiadbench", tmp_path)[0]["answer"] == "$\\frac{1}{3}$"
    assert load_benchmark("amc23", tmp_path)[0]["id"] == "0"
    # the Qwen2.5-Math layout of Minerva: the gold answer is the solution, whose last \boxed{} the grader reads
    write(tmp_path / "minerva.jsonl", json.dumps({"problem": "p", "solution": "so $x=\\boxed{0.3}$"}))
    gold = load_benchmark("minerva", tmp_path)[0]["answer"]
    assert math_grader.grade_answer("\\boxed{0.3}", gold) and not math_grader.grade_answer("\\boxed{0.4}", gold)


def test_registry_missing_file_without_datasets_says_where_to_get_it(tmp_path, monkeypatch):
    with pytest.raises(DataError, match="unknown benchmark 'gsm8k'"):
        load_benchmark("gsm8k", tmp_path)
    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(DataError) as err:
        load_benchmark("math500", tmp_path)
    assert "math500.jsonl (or .jsonl.gz, .parquet, a dataset directory) not found" in str(err.value)
    assert "HuggingFaceH4/MATH-500:test" in str(err.value) and "needs `datasets`" in str(err.value)


def test_registry_falls_back_to_the_hub_through_datasets(tmp_path, monkeypatch):
    """The real ``datasets.load_dataset`` runs; only the hub is stood in for (no hub here): a hub name is
    redirected to a local copy of the repository, saved in the benchmark's layout."""
    datasets = pytest.importorskip("datasets")
    real_load = datasets.load_dataset
    calls = []
    repos = {}

    def hub_from_local(name, config=None, split=None, **kwargs):
        calls.append((name, config, split))
        return real_load(str(repos[name]), config, split=split, cache_dir=str(tmp_path / "cache"), **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", hub_from_local)
    repos["Hothan/OlympiadBench"] = tmp_path / "ob"
    (tmp_path / "ob/OE_TO_maths_en_COMP").mkdir(parents=True)
    datasets.Dataset.from_list([NATIVE_ROWS["olympiadbench"]]).to_parquet(
        str(tmp_path / "ob/OE_TO_maths_en_COMP/train-00000-of-00001.parquet"))
    (tmp_path / "ob/README.md").write_text("---\nconfigs:\n- config_name: OE_TO_maths_en_COMP\n  data_files:\n"
                                            "  - split: train\n    path: OE_TO_maths_en_COMP/train-*\n---\n")
    [problem] = load_benchmark("olympiadbench", tmp_path / "data")
    assert problem["answer"] == "$\\frac{1}{3}$" and problem["id"] == "1606"
    assert calls == [("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")]

    repos["HuggingFaceH4/MATH-500"] = tmp_path / "m500"
    (tmp_path / "m500").mkdir()
    write(tmp_path / "m500/test.jsonl", json.dumps({"problem": "p", "unique_id": "x"}))
    with pytest.raises(DataError, match=r"math500.jsonl .* not found, and HuggingFaceH4/MATH-500:test:row 1: missing field "
                                        r"'answer' or .* \(its fields: problem, unique_id\)"):
        load_benchmark("math500", tmp_path / "data")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/aime_2024' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="aime24.jsonl .* not found, and HuggingFaceH4/aime_2024:train: not a file .*"
                                        "ConnectionError: Couldn't reach"):
        load_benchmark("aime24", tmp_path / "data")
