"""Fail fast, never hang (issue 18, item 2): a non-finite gradient stops the run before the weights change,
and a rank that raises ends a torchrun job instead of hanging it in distributed.shutdown's barrier.

The second test runs this file under torchrun (2 gloo ranks): rank 1 raises while rank 0 waits for it in a
collective, the way a rank that fails mid-step leaves the others inside an all-reduce.
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

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")


@pytest.fixture
def tiny_model(monkeypatch):
    from reco_scaled.config import load_config
    from reco_scaled.model import build_tiny_countdown, path_ready, tiny_countdown_dir

    monkeypatch.chdir(ROOT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = load_config(TINY)
    if not path_ready(tiny_countdown_dir(cfg)):
        build_tiny_countdown(cfg, tiny_countdown_dir(cfg))
    yield
    torch.set_num_threads(threads)


def test_non_finite_gradient_stops_before_the_optimizer_step(tmp_path, monkeypatch, tiny_model):
    """A NaN only in the gradients (the loss stays finite) of the last mini-batch of step 2: without the
    gradient-norm check the optimizer writes NaN weights and the run finishes with them."""
    from reco_scaled import trainer
    from reco_scaled.train import main

    calls, original = [], trainer.accumulate_gradients

    def nan_gradients_at_the_last_update(model, *args, **kwargs):
        loss = original(model, *args, **kwargs)
        calls.append(loss)
        if len(calls) == 8:  # 2 epochs x 2 mini-batches per step: the last update of step 2
            next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = float("nan")
        return loss

    monkeypatch.setattr(trainer, "accumulate_gradients", nan_gradients_at_the_last_update)
    out = tmp_path / "run"
    with pytest.raises(FloatingPointError, match=r"gradient norm \(nan\) at step 2; the weights were not updated; "
                                                 r"last good checkpoint: .*step_000001"):
        main(["--config", TINY, f"out={out}", "train.steps=2", "checkpoint.every=1"])
    assert all(map(torch.isfinite, map(torch.tensor, calls)))  # the loss itself never was non-finite
    assert (out / "checkpoints" / "latest").read_text() == "step_000001"
    assert not (out / "final").exists()


def test_timeout_is_a_config_key():
    from reco_scaled.config import ConfigError, load_config

    assert load_config(TINY).train.dist_timeout_minutes == 60
    assert load_config(TINY, ["train.dist_timeout_minutes=5"]).train.dist_timeout_minutes == 5
    with pytest.raises(ConfigError, match="train.dist_timeout_minutes"):
        load_config(TINY, ["train.dist_timeout_minutes=0"])


def _torchrun(args: list[str], seconds: float) -> tuple[int, str, float]:
    """(exit code, output, wall seconds) of a 2-rank gloo torchrun job; fails the test if it outlives `seconds`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers die with torchrun (distributed.init)
        output, _ = proc.communicate()
        pytest.fail(f"the 2-rank job was still running after {seconds:.0f} s:\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - start


def test_a_failing_rank_ends_the_job(tmp_path):
    """Without the fix rank 1 waits in shutdown's barrier and rank 0 in its all-reduce, until the process-group
    timeout (3 minutes here, 60 by default); the test gives the job 90 s."""
    returncode, output, seconds = _torchrun([__file__], 90)
    assert returncode != 0
    assert "rank 1 fails on purpose" in output
    assert "rank 0 passed the collective" not in output
    print(f"job ended in {seconds:.1f} s")


def test_bad_input_on_rank_0_ends_the_job(tmp_path):
    """Issue 32 item 7: rank 0 alone reads the weights and finds none (bad input, handled with a `return`, no
    exception on its way out) while rank 1 waits for them in distributed.wrap. Without the fix shutdown took the
    clean path, rank 0 waited in its barrier and rank 1 in its broadcast until the process-group timeout
    (3 minutes here, 60 by default); the test gives the job 90 s."""
    from reco.tasks.countdown import char_tokenizer, tiny_model

    tok = char_tokenizer()
    tiny_model(tok, hidden=32, layers=1).config.save_pretrained(tmp_path / "model")  # config.json, no weights
    tok.save_pretrained(tmp_path / "model")
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a, b in [(1, 2), (3, 4)]))
    returncode, output, seconds = _torchrun(
        ["-m", "reco_scaled.train", "--config", TINY, "task=math", "data.template=plain", f"model.path={tmp_path / 'model'}",
         f"data.train={data}", f"out={tmp_path / 'run'}", "train.dist_timeout_minutes=3"], 90)
    assert returncode != 0
    assert f"error: cannot load model.path='{tmp_path / 'model'}'" in output, output[-3000:]
    print(f"job ended in {seconds:.1f} s")


def _rank_main() -> None:
    """Under torchrun: train.main's shape (work in a try, distributed.shutdown in its finally)."""
    from reco_scaled import distributed

    d = distributed.init(timeout_minutes=3)
    try:
        if d.rank == 1:
            time.sleep(1)  # rank 0 is inside the all-reduce by now
            raise RuntimeError("rank 1 fails on purpose")
        distributed.all_sum(torch.ones(1))
        print("rank 0 passed the collective", flush=True)
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _rank_main()
