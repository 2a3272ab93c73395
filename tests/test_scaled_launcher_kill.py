"""A killed torchrun job leaves no orphans, and a run directory has one writer (issue 32 item 10).

A scheduler or `kill -9` sends SIGKILL to torchrun's process group. torchrun starts each worker in a session of its
own, so before the fix both workers of a 2-rank run survived, reparented to init, and went on writing log.jsonl and
checkpoints; a restart on the same directory then ran beside them (two writers, 23 steps logged twice).
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "reco_scaled" / "configs" / "tiny-cpu.yaml")
STEPS = ["train.steps=8", "checkpoint.every=2"]


@pytest.fixture(scope="module", autouse=True)
def tiny_model():
    """The cached SFT model, built once before any rank needs it."""
    from reco_scaled.config import load_config
    from reco_scaled.model import build_tiny_countdown, path_ready, tiny_countdown_dir

    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(ROOT)
    torch.set_num_threads(1)
    cfg = load_config(TINY)
    if not path_ready(tiny_countdown_dir(cfg)):
        build_tiny_countdown(cfg, tiny_countdown_dir(cfg))
    yield
    torch.set_num_threads(threads)
    os.chdir(cwd)


def torchrun(out: Path, marker: str) -> subprocess.Popen:
    """A 2-rank gloo run of tiny-cpu whose processes all carry `marker` in their environment."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "reco_scaled.train",
           "--config", TINY, f"out={out}", *STEPS]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "RECO_TEST_RUN": marker}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def alive_with(marker: str) -> list[int]:
    """Processes (not zombies) whose environment holds RECO_TEST_RUN=marker."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and f"RECO_TEST_RUN={marker}".encode() in (proc / "environ").read_bytes().split(b"\0")
                    and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"):
                found.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours
            pass
    return found


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line]


def metrics(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("time_")}


def finish(proc: subprocess.Popen, seconds: float = 600) -> None:
    _, err = proc.communicate(timeout=seconds)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.slow
def test_workers_die_with_a_killed_launcher_and_the_resume_equals_a_straight_run(tmp_path):
    straight = tmp_path / "straight"
    finish(torchrun(straight, uuid.uuid4().hex))

    out, marker = tmp_path / "killed", uuid.uuid4().hex
    proc = torchrun(out, marker)
    deadline = time.monotonic() + 600
    while not ((out / "log.jsonl").exists() and len(rows(out)) >= 3) and proc.poll() is None:  # checkpoint 2 is written
        assert time.monotonic() < deadline, "no third step after 600 s"
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read()[-3000:]
    workers = [p for p in alive_with(marker) if p != proc.pid]
    assert len(workers) >= 2, workers  # the two ranks (torchrun may run helpers too)
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun's process group: the workers are in sessions of their own
    proc.wait()
    killed_at = time.monotonic()
    while alive_with(marker) and time.monotonic() - killed_at < 5:
        time.sleep(0.1)
    survivors = alive_with(marker)
    for pid in survivors:  # do not leave them running, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"workers {survivors} outlived their launcher by more than 5 s"
    assert len(rows(out)) < 8

    finish(torchrun(out, uuid.uuid4().hex))  # resume: auto, from the last checkpoint
    assert [r["step"] for r in rows(out)] == list(range(1, 9))
    assert [metrics(r) for r in rows(out)] == [metrics(r) for r in rows(straight)]


def test_a_second_run_on_a_locked_directory_refuses_in_one_line(tmp_path, capsys):
    """The lock is taken here as another live run holds it; the run must not touch the directory."""
    from reco_scaled.train import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"step": 1}\n')
    with open(out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["--config", TINY, f"out={out}", "train.steps=1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"out={str(out)!r} is in use by another run that is still alive" in err[0], err
    assert (out / "log.jsonl").read_text() == '{"step": 1}\n' and not (out / "checkpoints").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_whose_launcher_died_before_it_set_up_exits(tmp_path):
    """The race the signal cannot cover: the launcher dies before the worker's prctl, so no signal ever comes. The
    worker must notice and exit, not wait at the rendezvous for minutes. Checked: the old code went on past it."""
    if b"python" in os.path.basename(Path("/proc/1/cmdline").read_bytes().split(b"\0")[0]):
        pytest.skip("pid 1 is a Python process here, which the check takes to be the launcher")
    survived, err, marker = tmp_path / "survived", tmp_path / "worker.err", uuid.uuid4().hex
    worker = (f"import os, sys, time\nsys.path.insert(0, {str(ROOT)!r})\n"
              "while os.getppid() == int(sys.argv[1]):  # wait until the launcher is gone\n    time.sleep(0.02)\n"
              "from reco_scaled.train import _die_with_launcher\n_die_with_launcher()\n"
              f"open({str(survived)!r}, 'w').write(str(os.getppid()))\n")
    launcher = (f"import os, subprocess, sys\nwith open({str(err)!r}, 'w') as e:\n"
                f"    p = subprocess.Popen([sys.executable, '-c', {worker!r}, str(os.getpid())], stderr=e,"
                " stdout=subprocess.DEVNULL,"
                f" env={{**os.environ, 'TORCHELASTIC_RUN_ID': 'test', 'RECO_TEST_RUN': {marker!r}}}, start_new_session=True)\n"
                "print(p.pid, flush=True)\nos._exit(0)\n")
    pid = int(subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=60,
                             check=True).stdout)
    deadline = time.monotonic() + 120
    while alive_with(marker):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    if survived.exists() and survived.read_text() != "1":
        pytest.skip(f"orphans here are adopted by a subreaper (pid {survived.read_text()}), not by init")
    assert not survived.exists(), "the orphaned worker went on past _die_with_launcher"
    assert "the launcher (torchrun) died before this worker started" in err.read_text()
