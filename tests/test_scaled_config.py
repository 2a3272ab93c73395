"""reco_scaled config: bad input exits 2 naming the key; the paper configs load and divide evenly on 8 GPUs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from reco_scaled.config import ConfigError, batch_plan, describe, load_config
from reco_scaled.train import main

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "reco_scaled" / "configs"
TINY = CONFIGS / "tiny-cpu.yaml"
PAPER = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "tiny-cpu.yaml")


def test_tiny_config_loads_and_plans_for_two_ranks():
    cfg = load_config(TINY)
    plan = batch_plan(cfg, 2)
    assert plan["rollouts"] == cfg.train.prompts_per_step * cfg.rollout.group_size
    assert "batch arithmetic" in describe(cfg, plan)


@pytest.mark.parametrize("overrides, key", [
    (["train.stepz=3"], "train.stepz"),  # unknown override
    (["rollout.engine=sglang"], "rollout.engine"),  # not a choice
    (["train.steps=abc"], "train.steps"),  # wrong type
    (["train.micro_batch_size=0"], "train.micro_batch_size"),
    (["algo.occurrence=sometimes"], "algo.occurrence"),
    (["rollout=hf"], "rollout"),  # a section, not a key
])
def test_bad_override_exits_2_naming_the_key(overrides, key, capsys):
    assert main(["--config", str(TINY), *overrides]) == 2
    assert f"'{key}'" in capsys.readouterr().err


def test_missing_and_unknown_yaml_keys_exit_2(tmp_path, capsys):
    raw = yaml.safe_load(TINY.read_text())
    del raw["train"]["steps"]
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump(raw))
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing config key 'train.steps'" in capsys.readouterr().err

    raw = yaml.safe_load(TINY.read_text())
    raw["rollout"]["temprature"] = 0.7
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(raw))
    assert main(["--config", str(tmp_path / "typo.yaml")]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'rollout.temprature'" in err and "rollout.temperature" in err


def test_batch_arithmetic_that_does_not_divide_names_the_key():
    cfg = load_config(TINY, ["train.prompts_per_step=15"])
    with pytest.raises(ConfigError, match="'train.prompts_per_step'"):
        batch_plan(cfg, 2)
    cfg = load_config(TINY, ["train.minibatches=3"])
    with pytest.raises(ConfigError, match="'train.minibatches'"):
        batch_plan(cfg, 2)
    cfg = load_config(TINY, ["train.micro_batch_size=5"])
    with pytest.raises(ConfigError, match="'train.micro_batch_size'"):
        batch_plan(cfg, 2)


def test_cli_exit_code_is_2():
    """The real command line (not just main()) exits with 2."""
    proc = subprocess.run([sys.executable, "-m", "reco_scaled.train", "--config", str(TINY), "bogus=1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown config key 'bogus'" in proc.stderr


def test_vllm_start_failure_names_the_engine_and_suggests_hf():
    from reco_scaled import distributed
    from reco_scaled.trainer import EngineStartError, make_engine

    cfg = load_config(TINY, ["rollout.engine=vllm"])
    with pytest.raises(EngineStartError, match=r"rollout engine 'vllm'(.|\n)*rollout\.engine: hf"):
        make_engine(cfg, None, "/nonexistent/model", distributed.Dist(0, 1, torch.device("cpu")), False)


def test_paper_configs_exist_for_three_models_and_two_methods():
    names = {p.stem for p in PAPER}
    for model in ("qwen2.5-math-1.5b", "qwen2.5-math-7b", "llama3.1-8b-instruct"):
        assert {f"{model}-grpo", f"{model}-reco"} <= names


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_config_loads_and_divides_evenly_on_8_gpus(path):
    cfg = load_config(path)
    plan = batch_plan(cfg, 8)  # raises ConfigError if anything does not divide
    assert cfg.rollout.group_size == 8 and cfg.train.lr == 1e-6 and cfg.algo.kl_coef == 0.0
    assert cfg.algo.clip_low == cfg.algo.clip_high == 0.2 and cfg.algo.aggregation == "token-mean"
    assert cfg.train.parallel == "fsdp2" and cfg.model.gradient_checkpointing and cfg.rollout.engine == "vllm"
    assert 512 <= plan["rollouts"] <= 1024
    assert plan["optimizer_steps"] > 1  # several updates per rollout batch, so the ratio matters
    assert 3072 <= cfg.rollout.max_new_tokens <= 4096
    assert cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens <= cfg.rollout.max_model_len
    assert cfg.algo.method in path.stem
    header = path.read_text().split("\nname:")[0]
    assert "torchrun --standalone --nproc_per_node=8" in header and "Fixed by the paper" in header
    if cfg.algo.method == "reco":
        loss = cfg.loss
        assert (loss.occurrence, loss.token_ratio) == ("count", "variance") and "Occurrence variant" in header
