"""The scaled trainer end to end on the tiny CPU config: world size 2 = world size 1, fused = naive,
exact resume after a kill, and a checkpoint for another model is refused.

In-process runs call reco_scaled.train.main at world size 1; world size 2 and the killed run are
subprocesses. Every run uses one CPU thread, so that results are bitwise reproducible across
processes (multi-threaded CPU kernels may sum in a different order).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from reco_scaled.config import load_config
from reco_scaled.model import build_tiny_countdown, path_ready, tiny_countdown_dir
from reco_scaled.train import main

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module", autouse=True)
def tiny_model_and_one_thread():
    """Build the cached SFT model once (as rank 0 would), and run in-process code on one thread."""
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(ROOT)
    torch.set_num_threads(1)
    cfg = load_config(TINY)
    if not path_ready(tiny_countdown_dir(cfg)):
        build_tiny_countdown(cfg, tiny_countdown_dir(cfg))
    yield
    torch.set_num_threads(threads)
    os.chdir(cwd)


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def metrics(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("time_")}


def run(out: Path, *overrides: str) -> list[dict]:
    assert main(["--config", TINY, f"out={out}", *overrides]) == 0
    return rows(out)


def test_one_rl_step_at_world_size_2_equals_world_size_1(tmp_path):
    one = run(tmp_path / "ws1", "train.steps=1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "reco_scaled.train", "--config", TINY, f"out={tmp_path / 'ws2'}", "train.steps=1"]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "batch arithmetic" in proc.stdout and "64 rollouts per rank x 2 ranks" in proc.stdout
    two = rows(tmp_path / "ws2")
    assert one[0]["adv_nonzero_frac"] > 0.1 and one[0]["loss"] != 0  # the update really does something
    for k, v in metrics(one[0]).items():
        assert two[0][k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


def test_fused_kernel_gives_the_same_metrics(tmp_path):
    pytest.importorskip("reco_scaled.kernels", reason="reco_scaled.kernels needs triton (requirements.txt)")
    naive = run(tmp_path / "naive", "train.steps=1")
    fused = run(tmp_path / "fused", "train.steps=1", "train.fused_kernel=true")
    for k, v in metrics(naive[0]).items():
        assert fused[0][k] == pytest.approx(v, rel=1e-5, abs=1e-6), k


def test_kill_and_resume_gives_identical_metrics(tmp_path):
    straight = run(tmp_path / "straight", "train.steps=4", "checkpoint.every=2")

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "reco_scaled.train", "--config", TINY, f"out={out}", "train.steps=4",
           "checkpoint.every=2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    latest, deadline = out / "checkpoints" / "latest", time.time() + 300
    while not (latest.exists() and latest.read_text() == "step_000002") and proc.poll() is None:
        assert time.time() < deadline, "no checkpoint after 300 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed: " + proc.stderr.read()[-2000:]
    assert len(rows(out)) < 4

    resumed = run(out, "train.steps=4", "checkpoint.every=2")  # resume: auto
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert [metrics(r) for r in resumed] == [metrics(r) for r in straight]
    # the exported final policies (Hugging Face format) are identical too
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / run / "final" / "model.safetensors") for run in ("straight", "killed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_of_another_model_is_refused(tmp_path, capsys):
    """Another model at another path is another run's checkpoint (refused before anything loads, naming the key);
    the same path holding a model of other shapes is refused by the checkpoint's parameter signature."""
    from reco.tasks.countdown import char_tokenizer, tiny_model

    tok, model = char_tokenizer(), tmp_path / "model"
    torch.manual_seed(0)
    for path in (model, tmp_path / "other"):
        tiny_model(tok, hidden=32, layers=1).save_pretrained(path)
        tok.save_pretrained(path)
    run(tmp_path / "run", "train.steps=1", f"model.path={model}")
    assert main(["--config", TINY, f"out={tmp_path / 'run'}", f"model.path={tmp_path / 'other'}", "train.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "is another run's" in err and f"model.path='{model}' there, '{tmp_path / 'other'}' here" in err
    tiny_model(tok, hidden=16, layers=1).save_pretrained(model)  # the same path, other shapes
    assert main(["--config", TINY, f"out={tmp_path / 'run'}", f"model.path={model}", "train.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "was written for a different model" in err and "Refusing to start from scratch" in err
    assert len(rows(tmp_path / "run")) == 1  # the log of the original run is untouched


def test_resume_under_another_loss_is_refused_naming_each_field(tmp_path, capsys):
    """A run started with batch-normalised positive-only weights and rerun with the defaults (group, all) would
    resume and train on with other weights; it exits 2 with one line that names both fields."""
    run(tmp_path / "run", "train.steps=1", "algo.occurrence_norm=batch", "algo.occurrence_apply=positive")
    capsys.readouterr()
    assert main(["--config", TINY, f"out={tmp_path / 'run'}", "train.steps=2"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "is another run's" in err[0], err
    assert "algo.occurrence_norm='batch' there, 'group' here" in err[0]
    assert "algo.occurrence_apply='positive' there, 'all' here" in err[0]
    assert len(rows(tmp_path / "run")) == 1


def test_math_task_runs_on_a_tiny_random_model(tmp_path):
    """task: math wiring: reco_scaled.data loading and prompts, reco.rewards.math_grader.grade_many rewards (the math
    task)."""
    from reco.tasks.countdown import char_tokenizer, tiny_model

    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=1).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                            for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)]))
    out = run(tmp_path / "run", "task=math", f"model.path={tmp_path / 'model'}", f"data.train={data}",
              "data.template=plain", "train.steps=1", "train.prompts_per_step=2", "train.micro_batch_size=4",
              "rollout.max_new_tokens=6")
    assert out[0]["step"] == 1 and out[0]["reward_mean"] == 0.0 and out[0]["response_length"] > 0


def test_exported_config_records_the_saved_dtype(tmp_path):
    """final/config.json says the dtype its weights were written in (bf16 on GPU), so dtype="auto" loads them so."""
    from transformers import AutoModelForCausalLM

    from reco_scaled import distributed
    from reco_scaled.checkpoint import export_hf
    from reco_scaled.model import PolicyModel, load_lm

    cfg = load_config(TINY)
    d = distributed.Dist(0, 1, torch.device("cpu"))
    lm, tokenizer, _ = load_lm(cfg, d)
    export_hf(tmp_path / "final", PolicyModel(lm), lm, tokenizer, torch.bfloat16, d)
    assert json.loads((tmp_path / "final" / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "final", dtype="auto").dtype == torch.bfloat16
    assert next(lm.parameters()).dtype == torch.float32  # the trainer's own model is untouched
