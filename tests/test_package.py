"""The package a user installs (issues 35, 44 and 54): pyproject.toml declares requirements.txt's pins; the wheel holds
three top-level names, the module reco_mini and the packages reco and reco_scaled, whose commands point into them; and
`pip install .` in a fresh venv gives the commands reco-mini, reco-train and reco-eval, which work from outside the
checkout: their usage lines name them, reco-train finds a shipped config by name, and a quick run and a one-step run
work.

Both build from a copy of the checkout's files (what a fresh clone holds): setuptools also packs what an earlier build
left in the checkout's build/ folder, such as the flat modules that the package reco/ replaced. The venv sees the
packages of the interpreter running the tests (tests/venv_helper.py, whether that is a base installation or a venv), so
its torch 2.13.0 (CPU) and the rest satisfy the pins and pip installs only this project; the build gets pyproject's
own build requirements ([build-system]) in pip's isolated build environment, whatever setuptools the interpreter has.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
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


def source_tree(dest: Path) -> Path:
    """A copy of the checkout's files, tracked or new and not ignored: what a fresh clone holds."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel `pip wheel .` builds from a fresh copy of the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check", "-w",
             str(tmp / "dist"), str(source_tree(tmp / "src"))]  # with pyproject's own build requirements
    subprocess.run(build, check=True, cwd=tmp, timeout=600)
    (path,) = (tmp / "dist").glob("*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_installs_three_top_level_names(wheel):
    """Issue 54: `pip install .` used to put 15 top-level modules (reco_io, reco_data, reco_log, ...) into site-packages;
    now reco_mini, reco and reco_scaled, with every module of both packages and the shipped configs."""
    files = set(wheel.namelist())
    top = {name.split("/")[0].removesuffix(".py") for name in files if ".dist-info/" not in name}
    assert top == {"reco", "reco_mini", "reco_scaled"}, sorted(top)
    ours = {p.relative_to(ROOT).as_posix() for package in ("reco", "reco_scaled") for p in (ROOT / package).rglob("*.py")}
    assert len(ours) > 40 and ours <= files, sorted(ours - files)  # the subpackages too (reco/tasks, reco/rewards, ...)
    configs = {p.relative_to(ROOT).as_posix() for p in (ROOT / "reco_scaled" / "configs").glob("*.yaml")}
    assert configs and configs <= files


def test_the_wheels_entry_points_name_functions_of_its_own_modules(wheel):
    """Each command and the verl plugin point into the three names, at a function or module that exists."""
    (listed,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    targets = [line.split("=", 1)[1].strip() for line in wheel.read(listed).decode().splitlines() if "=" in line]
    assert len(targets) == 4, targets  # reco-mini, reco-train, reco-eval, verl's plugin
    for target in targets:
        module, _, function = target.partition(":")
        assert module.split(".")[0] in {"reco", "reco_mini", "reco_scaled"}, target
        assert f"{module.replace('.', '/')}.py" in wheel.namelist(), target
        if function:
            assert callable(getattr(importlib.import_module(module), function)), target


@pytest.mark.slow
def test_pip_install_in_a_fresh_venv_gives_commands_that_run(tmp_path):
    from venv_helper import venv_seeing_these_packages

    venv, work = tmp_path / "venv", tmp_path / "work"
    venv_seeing_these_packages(venv)  # the dependencies are there; this interpreter's pip serves
    # the build's own requirements (pyproject's [build-system]) in an isolated environment, not whatever setuptools
    # the interpreter happens to have (3.11's bundled setuptools 65 cannot build a wheel alone)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
           str(source_tree(tmp_path / "src"))]
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
