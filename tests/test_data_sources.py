"""reco.data.math.load_problems on dataset directories and hub names, through the real `datasets` library.

No hub is reachable here, so every dataset is built by the test in its source's published layout (columns as on
the hub, cited in reco.data.math's docstring) and saved locally: with ``save_to_disk``, or as a copy of the hub
repository (parquet/JSONL files and the README's ``configs``). The hub itself is offline for these tests.
"""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from reco.data.math import DataError, load_problems, parse_source
from reco.tasks import TASKS

datasets = pytest.importorskip("datasets", reason="datasets (requirements.txt) is not installed")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def offline_hub(tmp_path, monkeypatch):
    """No network attempt (an unreachable hub costs ~25 s of retries), and the Arrow cache under tmp_path."""
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{}\n\n"
               'Remember to put your answer on its own line after "Answer:".')

# source -> (rows in its published layout, the (problem, answer) pairs read by hand from those rows)
SOURCES = {
    "gsm8k": ([
        {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
         "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"},
        {"question": "A farm has 1,150 hens and 50 more. How many?", "answer": "1150+50 = 1200\n#### 1,200"},
        {"question": "What is 2 - 5?", "answer": "2-5 = -3\n#### -3"},
    ], [("Natalia sold 48 clips in April and half as many in May. How many in all?", "72"),
        ("A farm has 1,150 hens and 50 more. How many?", "1200"), ("What is 2 - 5?", "-3")]),
    "math": ([  # DigitalLearningGmbH/MATH-lighteval, EleutherAI/hendrycks_math
        {"problem": "Compute $\\sin 60^\\circ$.", "level": "Level 1", "type": "Geometry",
         "solution": "It is $\\boxed{1}$ times $\\boxed{\\dfrac{\\sqrt{3}}{2}}$, so $\\boxed{\\dfrac{\\sqrt{3}}{2}}$."},
        {"problem": "Compute $2+3$.", "level": "Level 1", "type": "Prealgebra", "solution": "We get $\\boxed 5$."},
        {"problem": "Which?", "level": "Level 2", "type": "Algebra", "solution": "So \\fbox{$\\text{(C)}$}."},
    ], [("Compute $\\sin 60^\\circ$.", "\\dfrac{\\sqrt{3}}{2}"), ("Compute $2+3$.", "5"), ("Which?", "$\\text{(C)}$")]),
    "math500": ([  # the answer column wins over the solution's box
        {"problem": "Simplify $14/2$.", "solution": "$\\boxed{\\frac{14}{2}}$", "answer": "7", "subject": "Algebra",
         "level": 1, "unique_id": "test/algebra/1.json"},
    ], [("Simplify $14/2$.", "7")]),
    "aime24-h4": ([  # HuggingFaceH4/aime_2024
        {"id": 60, "problem": "Find $m+n$.", "solution": "...", "answer": "204", "url": "https://x", "year": "2024"},
    ], [("Find $m+n$.", "204")]),
    "aime24-maxwell": ([  # Maxwell-Jia/AIME_2024
        {"ID": "2024-I-1", "Problem": "Find $s$.", "Solution": "...", "Answer": 204},
    ], [("Find $s$.", "204")]),
    "aime25-opencompass": ([{"question": "Find the sum of all bases.", "answer": "70"}],
                           [("Find the sum of all bases.", "70")]),
    "amc23": ([{"id": 0, "question": "How many?", "answer": 27.0, "url": "https://x"}], [("How many?", "27.0")]),
    "minerva": ([{"question": "What is the speed?", "answer": "0.3"}], [("What is the speed?", "0.3")]),
    "minerva-qwen": ([{"problem": "Find the mass.", "solution": "Thus $m=\\boxed{7.5e5}$ kg.", "type": "Physics"}],
                     [("Find the mass.", "7.5e5")]),
    "olympiadbench": ([
        {"id": 1606, "question": "Find $p$.", "solution": ["Since ..."], "final_answer": ["$\\frac{1}{3}$"],
         "context": None, "image_1": None, "modality": "Text-only", "difficulty": "Competition",
         "is_multiple_answer": False, "unit": None, "answer_type": "Numerical", "error": None,
         "question_type": "Open-ended", "subfield": "Algebra", "subject": "Math", "language": "English"},
        {"id": 1607, "question": "Find all $n$.", "solution": ["..."], "final_answer": ["$2$", "$3$"],
         "context": None, "image_1": None, "modality": "Text-only", "difficulty": "Competition",
         "is_multiple_answer": True, "unit": None, "answer_type": "Numerical", "error": None,
         "question_type": "Open-ended", "subfield": "Algebra", "subject": "Math", "language": "English"},
    ], [("Find $p$.", "$\\frac{1}{3}$"), ("Find all $n$.", "$2$, $3$")]),
    "dapo-math-17k": ([
        {"data_source": "math_dapo", "prompt": [{"content": DAPO_PROMPT.format("Find $x$ if $x+1=35$."), "role": "user"}],
         "ability": "MATH", "reward_model": {"ground_truth": "34", "style": "rule-lighteval/MATH_v2"},
         "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}},
    ], [("Find $x$ if $x+1=35$.", "34")]),
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_each_source_layout_from_a_saved_dataset(tmp_path, source):
    rows, expected = SOURCES[source]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / source))
    problems = load_problems(tmp_path / source)
    assert [(p["problem"], p["answer"]) for p in problems] == expected
    assert len({p["id"] for p in problems}) == len(rows)


def test_fields_named_by_the_caller_still_follow_the_field_rules(tmp_path):
    rows, _ = SOURCES["dapo-math-17k"]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "dapo"))
    [p] = load_problems(tmp_path / "dapo", "prompt", "reward_model.ground_truth")
    assert (p["problem"], p["answer"]) == ("Find $x$ if $x+1=35$.", "34")
    assert p["reward_model"]["style"] == "rule-lighteval/MATH_v2" and p["data_source"] == "math_dapo"
    with pytest.raises(DataError, match=r"dapo:row 1: missing field 'reward_model.answer' \(its fields: data_source, "
                                        r"prompt, ability, reward_model, extra_info\)"):
        load_problems(tmp_path / "dapo", answer_key="reward_model.answer")


def gsm8k_repo(root):
    """A copy of openai/gsm8k's repository: main/ and socratic/ parquet files, configs in the README."""
    for config in ("main", "socratic"):
        (root / config).mkdir(parents=True)
        for split in ("train", "test"):
            rows = [{"question": f"{config} {split} {i}", "answer": f"so\n#### {i}"} for i in range(3)]
            datasets.Dataset.from_list(rows).to_parquet(str(root / config / f"{split}-00000-of-00001.parquet"))
    (root / "README.md").write_text("---\nconfigs:\n" + "".join(
        f"- config_name: {c}\n  data_files:\n  - split: train\n    path: {c}/train-*\n  - split: test\n    path: {c}/test-*\n"
        for c in ("main", "socratic")) + "---\n# GSM8K\n")
    return root


def test_hub_repository_copies_with_configs_and_splits(tmp_path):
    repo = gsm8k_repo(tmp_path / "gsm8k")
    test = load_problems(f"{repo}:main:test")
    assert [(p["problem"], p["answer"]) for p in test] == [("main test 0", "0"), ("main test 1", "1"), ("main test 2", "2")]
    assert [p["problem"] for p in load_problems(f"{repo}:socratic:train[:2]")] == ["socratic train 0", "socratic train 1"]
    with pytest.raises(DataError) as err:
        load_problems(repo)
    assert str(err.value).startswith(f"{repo}: cannot load this dataset directory (ValueError: Config name is missing.")
    assert "['main', 'socratic']" in str(err.value) and "\n" not in str(err.value)

    math500 = tmp_path / "MATH-500"  # HuggingFaceH4/MATH-500: one test.jsonl at the top
    math500.mkdir()
    (math500 / "test.jsonl").write_text(json.dumps(SOURCES["math500"][0][0]) + "\n")
    assert [p["answer"] for p in load_problems(math500)] == [p["answer"] for p in load_problems(f"{math500}:test")] == ["7"]

    dapo = tmp_path / "DAPO-Math-17k"  # BytedTsinghua-SIA/DAPO-Math-17k: data/dapo-math-17k.parquet
    (dapo / "data").mkdir(parents=True)
    datasets.Dataset.from_list(SOURCES["dapo-math-17k"][0]).to_parquet(str(dapo / "data/dapo-math-17k.parquet"))
    assert [(p["problem"], p["answer"]) for p in load_problems(dapo)] == SOURCES["dapo-math-17k"][1]


def test_saved_dataset_dict_needs_a_split_when_it_has_several(tmp_path):
    rows, _ = SOURCES["gsm8k"]
    saved = tmp_path / "gsm8k-saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:2]),
                          "test": datasets.Dataset.from_list(rows[2:])}).save_to_disk(str(saved))
    assert [p["answer"] for p in load_problems(f"{saved}:test")] == ["-3"]
    assert [p["answer"] for p in load_problems(f"{saved}:train")] == ["72", "1200"]
    for source, message in [(saved, f"{saved}: the dataset has splits train, test; name one, e.g. {saved}:train"),
                            (f"{saved}:dev", f"{saved}:dev: no split 'dev'; its splits: train, test"),
                            (f"{saved}:main:test", f"{saved}:main:test: a save_to_disk directory has no configs")]:
        with pytest.raises(DataError) as err:
            load_problems(source)
        assert str(err.value).startswith(message)


def test_a_dataset_without_an_answer_field_names_itself_and_its_fields(tmp_path):
    datasets.Dataset.from_list([{"question": "q", "explanation": "e"}]).save_to_disk(str(tmp_path / "noanswer"))
    with pytest.raises(DataError) as err:
        load_problems(tmp_path / "noanswer")
    assert str(err.value) == (f"{tmp_path / 'noanswer'}:row 1: missing field 'answer' or 'final_answer' or 'Answer' or "
                              "'reward_model.ground_truth' or 'solution' (its fields: question, explanation)")
    datasets.Dataset.from_list([{"problem": "q", "solution": "no box"}]).save_to_disk(str(tmp_path / "nobox"))
    with pytest.raises(DataError, match=r"nobox:row 1: field 'solution' has no \\boxed\{\} answer"):
        load_problems(tmp_path / "nobox")


def test_a_dataset_that_cannot_be_found_is_one_line_naming_it(tmp_path):
    with pytest.raises(DataError) as err:
        load_problems("nobody/no-such-math-set:test")
    message = str(err.value)
    assert message.startswith("nobody/no-such-math-set:test: not a file or directory here, and datasets.load_dataset "
                              "cannot load it (ConnectionError: Couldn't reach 'nobody/no-such-math-set'")
    assert "\n" not in message
    with pytest.raises(DataError, match=r"missing\.jsonl: no such file"):
        load_problems(tmp_path / "missing.jsonl")


def test_without_datasets_a_name_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match=r"^openai/gsm8k:main:test: not a file; reading a dataset directory or hub name "
                                        r"needs `datasets`"):
        load_problems("openai/gsm8k:main:test")


@pytest.mark.parametrize("source, parsed", [
    ("HuggingFaceH4/MATH-500", ("HuggingFaceH4/MATH-500", None, None)),
    ("HuggingFaceH4/MATH-500:test", ("HuggingFaceH4/MATH-500", None, "test")),
    ("openai/gsm8k:main:test", ("openai/gsm8k", "main", "test")),
    ("openai/gsm8k:main:", ("openai/gsm8k", "main", None)),
    ("openai/gsm8k:main:test[:200]", ("openai/gsm8k", "main", "test[:200]")),
    ("math-ai/amc23:test[10:20]", ("math-ai/amc23", None, "test[10:20]")),
])
def test_source_names_split_into_name_config_and_split(source, parsed):
    assert parse_source(source) == parsed


def test_reco_mini_entry_point_reports_a_bad_dataset_in_one_line(tmp_path, capsys):
    datasets.Dataset.from_list([{"question": "q", "explanation": "e"}]).save_to_disk(str(tmp_path / "noanswer"))
    capsys.readouterr()  # the save's progress bar
    with pytest.raises(SystemExit) as exc:
        TASKS["math"].splits(SimpleNamespace(data=str(tmp_path / "noanswer"), eval_data=""))
    assert exc.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "noanswer:row 1: missing field 'answer' or" in line and "(its fields: question, explanation)" in line


@pytest.mark.slow
def test_reco_mini_math_run_on_a_saved_gsm8k_dataset(tmp_path, monkeypatch):
    """`--data DIR:train --eval-data DIR:test` end to end: a tiny random Qwen2 (reco.tasks.countdown.tiny_model, as the
    math-path test of test_cli does) trains one GRPO step on a saved GSM8K-layout dataset and is evaluated."""
    import torch

    import reco_mini
    from reco.tasks.countdown import char_tokenizer, tiny_model

    def gsm8k_row(a, b):
        return {"question": f"{a}+{b}", "answer": f"{a}+{b} = <<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"}

    saved = tmp_path / "gsm8k"
    datasets.DatasetDict({"train": datasets.Dataset.from_list([gsm8k_row(a, b) for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)]]),
                          "test": datasets.Dataset.from_list([gsm8k_row(2, 9), gsm8k_row(4, 4)])}).save_to_disk(str(saved))
    torch.manual_seed(0)
    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=2).save_pretrained(tmp_path / "tiny-qwen2")
    tok.save_pretrained(tmp_path / "tiny-qwen2")

    graded = []
    math_task = TASKS["math"]
    real_rewards = math_task.rewards

    def recording_rewards(problems, responses):
        graded.extend((problem["problem"], problem["answer"]) for problem in problems)
        return real_rewards(problems, responses)

    monkeypatch.setattr(math_task, "rewards", recording_rewards)
    results = reco_mini.main(["--task", "math", "--model", str(tmp_path / "tiny-qwen2"), "--data", f"{saved}:train",
                              "--eval-data", f"{saved}:test", "--methods", "grpo", "--steps", "1", "--prompts-per-step", "2",
                              "--group-size", "2", "--n-eval", "2", "--max-new-tokens", "4", "--out", str(tmp_path / "run")])
    assert set(results["methods"]) == {"base", "grpo"}
    assert results["methods"]["grpo"]["pass_at_k"].keys() == {"1", "2"}
    assert set(graded) >= {("2+9", "11"), ("4+4", "8")}  # the held-out split, with GSM8K's "####" answers
    assert set(graded) - {("2+9", "11"), ("4+4", "8")} <= {("1+2", "3"), ("3+4", "7"), ("10+5", "15"), ("7+7", "14")}
    assert (tmp_path / "run/results.json").is_file()


def test_reco_scaled_data_train_and_the_evaluator_read_dataset_sources(tmp_path):
    from reco.tasks.countdown import char_tokenizer
    from reco_scaled.config import load_config
    from reco_scaled.evaluate import load_benchmarks, parse_config
    from reco_scaled.task import load_task

    rows, expected = SOURCES["gsm8k"]
    saved = tmp_path / "gsm8k-saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:2]),
                          "test": datasets.Dataset.from_list(rows[2:])}).save_to_disk(str(saved))
    cfg = load_config(ROOT / "reco_scaled/configs/tiny-cpu.yaml", ["task=math", "model.path=unused", f"data.train={saved}:train"])
    task = load_task(cfg, char_tokenizer())
    assert [(p["problem"], p["answer"]) for p in task.problems] == expected[:2] and len(task.prompt_ids) == 2

    repo = gsm8k_repo(tmp_path / "gsm8k")
    cfg = parse_config(["--model", "m", "--files", f"{saved}:test", f"socratic={repo}:socratic:test[:1]"])
    benches = load_benchmarks(cfg)
    assert {name: [p["answer"] for p in probs] for name, probs in benches.items()} == {"gsm8k-saved": ["-3"], "socratic": ["0"]}
    with pytest.raises(DataError, match="--files: two benchmarks named 'gsm8k'"):
        load_benchmarks(parse_config(["--model", "m", "--files", f"{repo}:main:test", f"{repo}:socratic:test"]))
