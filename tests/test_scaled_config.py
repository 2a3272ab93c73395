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


def test_vllm_start_failure_names_the_engine_and_both_hf_switches():
    from reco_scaled.rollout.factory import EngineStartError, make_engine

    with pytest.raises(EngineStartError, match=r"rollout engine 'vllm'.*rollout\.engine=hf .*--engine hf"):
        make_engine("vllm", "/nonexistent/model", None, template=None, device=torch.device("cpu"), dtype=torch.float32)


def test_sleep_level_must_be_1_or_2(capsys):
    assert load_config(TINY).rollout.sleep_level == 2
    assert main(["--config", str(TINY), "rollout.sleep_level=3"]) == 2
    assert "'rollout.sleep_level'" in capsys.readouterr().err


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
    assert cfg.rollout.enable_sleep_mode and cfg.rollout.sleep_level == 2
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


def test_readme_memory_table_and_config_headers_are_the_arithmetic():
    """docs/reproducing.md's table is what `python -m reco_scaled.memory` prints; each paper config's header quotes its peaks."""
    from reco_scaled.memory import markdown_table, peaks

    readme = (ROOT / "docs" / "reproducing.md").read_text()
    assert readme.split("<!-- memory:begin -->\n")[1].split("\n<!-- memory:end -->")[0] == markdown_table()
    for path in PAPER:
        train, roll = peaks(load_config(path))
        assert f"per GPU ~{train:.0f} GB while training, ~{roll:.0f} GB during rollouts" in path.read_text(), path.name


@pytest.mark.parametrize("shape, bias", [("qwen2.5-0.5b", True), ("qwen2.5-math-1.5b", True), ("qwen2.5-math-7b", True),
                                         ("llama3.1-8b-instruct", False)])
def test_shape_parameter_counts_follow_the_closed_form(shape, bias):
    """reco_scaled.shapes builds each model on the meta device; count its parameters by hand instead."""
    from reco_scaled.shapes import SHAPES, parameter_count

    s = SHAPES[shape]
    d, kv = s["hidden_size"], s["num_key_value_heads"] * s["hidden_size"] // s["num_attention_heads"]
    layer = 2 * d * d + 2 * d * kv + (d + 2 * kv if bias else 0) + 3 * d * s["intermediate_size"] + 2 * d
    n = s["vocab_size"] * d * (1 if s["tie_word_embeddings"] else 2) + s["num_hidden_layers"] * layer + d
    assert parameter_count(shape) == (n, layer)


def test_memory_terms_of_the_7b_config():
    from reco_scaled.memory import training_terms

    cfg = load_config(CONFIGS / "qwen2.5-math-7b-reco.yaml")
    terms = {t.name.split(" (")[0].split(",")[0]: t.gb for t in training_terms(cfg, 8)}
    n = 7_615_616_512  # Qwen2.5-Math-7B
    assert terms["fp32 master weights"] == pytest.approx(4 * n / 8 / 1e9)
    assert terms["AdamW moments"] == pytest.approx(8 * n / 8 / 1e9)
    assert terms["checkpointed bf16 layer inputs"] == pytest.approx(2 * 4 * 4096 * 3584 * 28 / 1e9)


def test_memory_command_takes_the_gpu_size(capsys):
    """`python -m reco_scaled.memory --gpu-gb 141` (H200): vLLM's share is gpu_memory_utilization of 141 GB."""
    from reco_scaled.memory import main, markdown_table, rollout_terms

    assert main([]) == markdown_table()  # the default, 80 GB, is the README's table
    h200 = main(["--gpu-gb", "141"])
    assert "× 141 GB" in h200 and "× 80 GB" not in h200
    cfg = load_config(CONFIGS / "qwen2.5-math-7b-reco.yaml")
    vllm = rollout_terms(cfg, 8, 141.0)[-1]
    assert vllm.gb == pytest.approx(cfg.rollout.gpu_memory_utilization * 141.0)
    with pytest.raises(SystemExit):
        main(["--gpu-gb", "0"])


def test_canonical_occurrence_is_refused_at_start():  # its keys come from reco_mini's tasks only
    with pytest.raises(ConfigError, match="'algo.occurrence' canonical"):
        load_config(TINY, ["algo.occurrence=canonical"])


@pytest.mark.parametrize("override", ["algo.advantage=pass-at-k", "algo.prompt_gate=zero-success",
                                      "algo.response_weight=ucpo", "algo.pass_k=2", "algo.ucpo_tau=0.5"])
def test_the_peers_settings_are_refused_at_start(override):  # experiments/lab.py's loop applies them, reco_scaled's not
    with pytest.raises(ConfigError, match=f"^unknown config key '{override.split('=')[0]}': a peer's setting, which only "
                                          "experiments/lab.py's loop applies"):
        load_config(TINY, [override])


def test_simko_is_refused_at_start_with_or_without_lab(monkeypatch):
    """SimKO's token ratio is in reco_mini's registry only where experiments/lab.py was imported; refused either way."""
    import reco_mini
    from reco import peers

    monkeypatch.delitem(reco_mini.TOKEN_RATIOS, "simko", raising=False)
    with pytest.raises(ConfigError, match=r"'algo.token_ratio' must be one of \['is', 'variance', 'variance-old'.*got 'simko'"):
        load_config(TINY, ["algo.token_ratio=simko"])
    monkeypatch.setitem(reco_mini.TOKEN_RATIOS, "simko", peers.simko_ratio)
    with pytest.raises(ConfigError, match="'algo.token_ratio' simko is not supported by reco_scaled"):
        load_config(TINY, ["algo.token_ratio=simko"])
