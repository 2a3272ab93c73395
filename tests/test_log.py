"""reco/log.py: log.jsonl always, TensorBoard and W&B on request, for both trainers.

The TensorBoard event files are read back with tensorboard's own reader, an independent parser of the format.
wandb is optional and not installed by requirements.txt; its sink is checked only for the error it gives
when missing.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reco.log import SINKS, RunLogger, check_sinks

ROOT = Path(__file__).resolve().parents[1]


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every scalar in the TensorBoard event files under log_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_rows_go_to_jsonl_and_tensorboard(tmp_path):
    rows = [{"step": 0, "reward_mean": 0.25, "loss": -1.5, "note": "text stays in the JSONL", "ok": True},
            {"step": 1, "reward_mean": 0.5, "loss": float("nan")}]
    with RunLogger(tmp_path / "log.jsonl", "tensorboard") as log:
        for row in rows:
            log.log(row)
    back = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert back[0] == rows[0] and back[1]["reward_mean"] == 0.5  # JSONL: every row as it was
    tb = scalars(tmp_path / "tensorboard")
    assert tb["reward_mean"] == [(0, 0.25), (1, 0.5)]
    assert tb["loss"] == [(0, -1.5)]  # a non-finite value stays in the JSONL only
    assert "note" not in tb and "ok" not in tb and "step" not in tb


def test_jsonl_alone_writes_no_event_file_and_append_mode_keeps_rows(tmp_path):
    path = tmp_path / "log.jsonl"
    with RunLogger(path, "") as log:
        log.log({"step": 0, "x": 1.0})
    with RunLogger(path, "jsonl", mode="a") as log:
        log.log({"step": 1, "x": 2.0})
    assert [json.loads(r)["step"] for r in path.read_text().splitlines()] == [0, 1]
    assert not (tmp_path / "tensorboard").exists()


def test_unknown_or_missing_sinks_are_named(monkeypatch):
    assert check_sinks("") == "" and check_sinks("jsonl, tensorboard") == ""
    assert "got 'mlflow'" in check_sinks("tensorboard,mlflow")
    monkeypatch.setitem(SINKS, "wandb", "no_such_package_for_reco_tests")
    assert check_sinks("wandb") == "asks for wandb, which is not installed (pip install no_such_package_for_reco_tests)"
    with pytest.raises(ValueError, match="loggers asks for wandb"):
        RunLogger("unused.jsonl", "wandb")


def test_reco_mini_flag_is_checked(capsys):
    from reco_mini import parse_config

    assert parse_config(["--log", "tensorboard"]).log == "tensorboard"
    with pytest.raises(SystemExit) as exc:
        parse_config(["--log", "mlflow"])
    assert exc.value.code == 2 and "--log must be a comma-separated subset" in capsys.readouterr().err


def test_reco_scaled_writes_tensorboard_beside_its_jsonl(tmp_path):
    """train.loggers=tensorboard on a 1-step math run of a tiny random model: each JSONL row is in the event file."""
    import torch

    from reco.tasks.countdown import char_tokenizer, tiny_model
    from reco_scaled.config import ConfigError, load_config
    from reco_scaled.train import main

    config = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")
    with pytest.raises(ConfigError, match="train.loggers"):
        load_config(config, ["train.loggers=mlflow"])
    torch.manual_seed(0)
    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=1).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                            for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)]))
    threads, cwd = torch.get_num_threads(), os.getcwd()
    torch.set_num_threads(1)
    try:
        os.chdir(tmp_path)
        code = main(["--config", config, f"out={tmp_path / 'run'}", "task=math", f"model.path={tmp_path / 'model'}",
                     f"data.train={data}", "data.template=plain", "train.steps=1", "train.prompts_per_step=2",
                     "train.micro_batch_size=4", "rollout.max_new_tokens=6", "train.loggers=tensorboard"])
    finally:
        torch.set_num_threads(threads)
        os.chdir(cwd)
    assert code == 0
    row = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[0])
    tb = scalars(tmp_path / "run" / "tensorboard")
    assert tb["reward_mean"] == [(row["step"], pytest.approx(row["reward_mean"]))]
    assert tb["loss"] == [(row["step"], pytest.approx(row["loss"], rel=1e-6))]  # event files store float32
