"""The package a user installs (issues 35 and 44): pyproject.toml declares requirements.txt's pins, and `pip install .`
in a fresh venv gives the commands reco-mini, reco-train and reco-eval, which work from outside the checkout: their
usage lines name them, reco-train finds a shipped config by name, and a quick run and a one-step run work.

The venv is built with --system-site-packages and --no-build-isolation, so nothing is downloaded: the system's
torch 2.13.0 (CPU) and the rest satisfy the pins, and pip installs only this project.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pins(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("-")}


def test_pyproject_declares_the_requirements_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert _pins(ROOT / "requirements.txt") <= set(project["dependencies"]) | set(extras["dev"])
    assert _pins(ROOT / "requirements-trl.txt") == set(extras["trl"])
    assert _pins(ROOT / "requirements-gpu.txt") == set(extras["gpu"])
    assert set(project["scripts"]) == {"reco-mini", "reco-train", "reco-eval"}
    plugins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["verl.plugins"]
    assert plugins == {"reco": "reco_scaled.integrations.verl_entry"}


@pytest.mark.slow
def test_pip_install_in_a_fresh_venv_gives_commands_that_run(tmp_path):
    venv, work = tmp_path / "venv", tmp_path / "work"
    # --without-pip: the system's pip and setuptools serve (3.11's bundled setuptools 65 cannot build a wheel alone)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index",
           "--disable-pip-version-check", str(ROOT)]
    subprocess.run(pip, check=True, cwd=tmp_path, timeout=600)
    work.mkdir()  # away from the repository: the installed modules are the ones imported
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import reco_mini; print(reco_mini.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert str(venv) in where
    for command in ("reco-mini", "reco-train", "reco-eval"):  # the usage lines used to say reco_mini.py, python -m ...
        run = subprocess.run([str(venv / "bin" / command), "--help"], cwd=work, env=env, capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout.startswith(f"usage: {command} "), (command, run.stderr[-500:])
    assert "(default: 256)" in run.stdout  # reco-eval's defaults
    # reco-train --config tiny-cpu: the shipped config by name (configs used to stay in the checkout). Its tiny model
    # is SFT-ed once and cached under runs/cache/; seed that cache with a 5-step SFT so that this checks the install,
    # not the SFT (the command runs exactly as a user types it).
    seed = ("import sys; from pathlib import Path; from reco_scaled.config import load_config\n"
            "from reco_scaled.model import build_tiny_countdown, tiny_countdown_dir\n"
            "path = tiny_countdown_dir(load_config('tiny-cpu')); path.parent.mkdir(parents=True)\n"
            "build_tiny_countdown(load_config('tiny-cpu', ['countdown.sft_steps=5']), path)")
    subprocess.run([str(venv / "bin" / "python"), "-c", seed], cwd=work, env=env, check=True, timeout=600)
    train = subprocess.run([str(venv / "bin" / "reco-train"), "--config", "tiny-cpu", "train.steps=1"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=900)
    assert train.returncode == 0, train.stdout[-1000:] + train.stderr[-2000:]
    assert "done: 1 steps" in train.stdout and (work / "runs" / "tiny-cpu" / "final" / "config.json").is_file()
    quick = [str(venv / "bin" / "reco-mini"), "--quick", "--sft-steps", "20", "--steps", "1", "--n-eval", "4",
             "--device", "cpu", "--out", "out"]  # --quick, smaller still: this checks the install, not a result
    run = subprocess.run(quick, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((work / "out" / "results.json").read_text())
    assert set(results["methods"]) == {"base", "grpo", "reco"}
