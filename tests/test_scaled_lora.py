"""reco_scaled with model.lora_rank (issue 62): LoRA adapters under DDP with the HF engine, on the tiny CPU config.

The first step with B = 0 logs what the full model logs (the engine samples the merged weights, the reference is the
policy with its adapters off); checkpoints hold the adapters and the optimizer, not the base, and a resume is exact;
the final export is the base with peft's own merge of the adapters; world size 2 equals world size 1; the combinations
without adapters (fsdp2, vLLM, an lm_head target) and unknown targets are one-line errors.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reco_scaled.config import ConfigError, load_config
from reco_scaled.model import build_tiny_countdown, path_ready, tiny_countdown_dir
from reco_scaled.train import main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")
LORA = ("model.lora_rank=8", "model.lora_alpha=16", "algo.kl_coef=0.05", "checkpoint.resume=auto")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module", autouse=True)
def tiny_model_and_one_thread():
    """The cached SFT model (as tests/test_scaled_train.py builds it), one CPU thread: bitwise reproducible runs."""
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(ROOT)
    torch.set_num_threads(1)
    cfg = load_config(TINY)
    if not path_ready(tiny_countdown_dir(cfg)):
        build_tiny_countdown(cfg, tiny_countdown_dir(cfg))
    yield
    torch.set_num_threads(threads)
    os.chdir(cwd)


def run(out: Path, *overrides: str) -> list[dict]:
    assert main(["--config", TINY, f"out={out}", *overrides]) == 0
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
            for line in (out / "log.jsonl").read_text().splitlines()]


def test_the_first_step_with_zero_adapters_is_the_full_models(tmp_path):
    one_update = ("train.steps=1", "train.epochs=1", "train.minibatches=1")  # its statistics: at the step's start
    full = run(tmp_path / "full", *one_update, "algo.kl_coef=0.05")[0]
    lora = run(tmp_path / "lora", *one_update, *LORA)[0]
    assert full["adv_nonzero_frac"] > 0.1 and full["loss"] != 0
    assert lora["kl_base"] == 0.0  # the reference (adapters off) is the policy at B = 0
    for k, v in full.items():
        if k not in ("grad_norm", "grad_norm_max"):  # the gradients are of other parameters
            assert lora[k] == pytest.approx(v, rel=1e-6, abs=1e-7), k


def test_resume_is_exact_and_checkpoints_hold_the_adapters_not_the_base(tmp_path):
    import torch.distributed.checkpoint as dcp

    straight = run(tmp_path / "straight", "train.steps=4", "checkpoint.every=2", *LORA)
    run(tmp_path / "resumed", "train.steps=2", "checkpoint.every=2", *LORA)
    resumed = run(tmp_path / "resumed", "train.steps=4", "checkpoint.every=2", *LORA)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4] and resumed == straight
    assert straight[3]["kl_base"] > 1e-3  # the adapters moved the policy away from the base
    assert all(r["engine_logp_abs_diff"] < 1e-5 for r in straight)  # and the engine samples it (merged weights)
    saved = dcp.FileSystemReader(tmp_path / "resumed" / "checkpoints" / "step_000002").read_metadata()
    model_keys = [k for k in saved.state_dict_metadata if k.startswith("model.")]
    assert model_keys and all(".lora_" in k for k in model_keys)  # 2 per adapted layer: A and B
    assert len(model_keys) == 2 * 7 * 2  # 7 projections in each of 2 layers
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / name / "final" / "model.safetensors") for name in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_final_export_is_peft_s_merge_of_the_adapters_on_the_base(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run(tmp_path / "run", "train.steps=2", *LORA)
    base_dir = tiny_countdown_dir(load_config(TINY))
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final").state_dict()
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    reference = PeftModel.from_pretrained(base, tmp_path / "run" / "adapters").merge_and_unload().state_dict()
    untouched = AutoModelForCausalLM.from_pretrained(base_dir).state_dict()
    assert final.keys() == reference.keys()
    for k in final:
        torch.testing.assert_close(final[k], reference[k], rtol=1e-6, atol=1e-7)
        if "proj.weight" in k:
            assert not torch.equal(final[k], untouched[k]), k  # each adapted layer trained
        else:
            assert torch.equal(final[k], untouched[k]), k  # embeddings, norms, biases: the base, bit for bit


@pytest.mark.slow
def test_two_steps_at_world_size_2_equal_world_size_1(tmp_path):
    """Rank 1 builds the model on the meta device and gets rank 0's weights, adapters included (distributed.wrap)."""
    one = run(tmp_path / "ws1", "train.steps=2", *LORA)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "reco_scaled.train", "--config", TINY, f"out={tmp_path / 'ws2'}", "train.steps=2", *LORA]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    two = [json.loads(line) for line in (tmp_path / "ws2" / "log.jsonl").read_text().splitlines()]
    assert one[1]["kl_base"] > 0
    for a, b in zip(one, two, strict=True):
        for k, v in a.items():
            assert b[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


@pytest.mark.parametrize("overrides, message", [
    (["train.parallel=fsdp2"], "config key 'model.lora_rank' needs train.parallel ddp"),
    (["rollout.engine=vllm"], "config key 'model.lora_rank' needs rollout.engine hf"),
    (["model.lora_targets=q_proj;v_proj"], "config key 'model.lora_targets' must be all-linear or comma-separated"),
    (["model.lora_rank=-1"], "config key 'model.lora_rank' must be >= 0, got -1"),
    (["model.lora_targets=q_proj,lm_head"], "config key 'model.lora_targets' lm_head: the lm head is applied by its"),
])
def test_combinations_without_adapters_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        load_config(TINY, ["model.lora_rank=8", *overrides])


def test_an_unknown_target_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["--config", TINY, f"out={tmp_path / 'run'}", "model.lora_rank=8", "model.lora_targets=q_proj,qkv"])
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("config error: config key 'model.lora_targets' qkv: Qwen2ForCausalLM has no linear layer")
    assert not (tmp_path / "run").exists()
