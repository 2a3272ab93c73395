"""benchmarks/gpu_acceptance.py --cpu-smoke: every check of the GPU acceptance script runs, at tiny sizes, on CPU.

The numbers of a CPU smoke run say nothing about a GPU; what is checked is that each code path runs and
that the report holds what the GPU run reports (versions, kernel errors, the memory slope, a resumed run).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_cpu_smoke_runs_every_check(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_acceptance.py", "--cpu-smoke", "--out", str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    checks = report["checks"]
    print(f"\ncpu smoke: {report['seconds']:.0f} s; " + ", ".join(f"{k} {v['seconds']:.0f} s" for k, v in checks.items()))
    assert report["mode"] == "cpu-smoke" and report["versions"]["torch"] and report["versions"]["transformers"]
    kernel = report["checks"]["kernel"]
    if importlib.util.find_spec("triton") is None:
        assert "skipped" in kernel
    else:
        for row in kernel["rows"]:  # Triton (interpreted) against the fp32 naive path, same bf16 inputs
            assert max(row[f"max_abs_err_{k}"] for k in ("logp", "V", "H")) < 1e-3, row
            assert max(row["rel_err_grad_hidden"], row["rel_err_grad_weight"]) < 2e-2, row
    slope = report["checks"]["memory_slope"]
    assert [r["layers"] for r in slope["rows"]] == [1, 2] and "gib_per_layer" in slope
    e2e = report["checks"]["end_to_end"]
    assert [r["step"] for r in e2e["log"]] == [1, 2, 3] and [r["resumed"] for r in e2e["runs"]] == [False, True]
    assert e2e["exported"]
