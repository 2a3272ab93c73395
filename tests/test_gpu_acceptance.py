"""benchmarks/gpu_acceptance.py: the child-process runner, the Triton toolchain fallback, and --cpu-smoke, where every
check of the GPU acceptance script runs, at tiny sizes, on CPU.

The numbers of a CPU smoke run say nothing about a GPU; what is checked is that each code path runs and
that the report holds what the GPU run reports (versions, kernel errors, the memory slope, a resumed run).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
ga = importlib.util.module_from_spec(spec)
sys.modules["gpu_acceptance"] = ga  # its dataclass looks its module up there
spec.loader.exec_module(ga)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_child_json_reads_the_result_and_reports_failures(tmp_path):
    out = tmp_path / "r.json"
    ok = ga.run_child_json(_py(f"import json; json.dump({{'x': 1}}, open({str(out)!r}, 'w'))"), 30, out)
    assert ok["x"] == 1 and ok["returncode"] == 0 and "error" not in ok
    none = ga.run_child_json(_py("print('no json here')"), 30, tmp_path / "missing.json")
    assert "no JSON result" in none["error"] and "no json here" in none["output_tail"]
    crash = ga.run_child_json(_py(f"import json, sys; json.dump({{'x': 2}}, open({str(out)!r}, 'w')); sys.exit(3)"), 30, out)
    assert crash["error"] == "exited 3" and crash["x"] == 2


def test_run_child_json_kills_the_whole_process_group_at_its_timeout(tmp_path):
    """A hung child and the grandchild it started (as torchrun starts workers) both die at the timeout."""
    pid_file = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    t = time.perf_counter()
    r = ga.run_child_json(_py(code), 3, tmp_path / "never.json")
    assert time.perf_counter() - t < 30 and "killed after its timeout of 3 s" in r["error"]
    pid = int(pid_file.read_text())
    for _ in range(50):  # the kill is asynchronous
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout")


@pytest.mark.slow
def test_run_child_json_kills_torchruns_workers_at_its_timeout(tmp_path):
    """Issue 32 item 4: a real torchrun starts its worker in a session of its own, so killing torchrun's process group
    at the timeout left the worker running (before the fix it kept the GPU and wrote checkpoints while the next
    check ran). The worker here is a plain script, which does not die with its launcher by itself. The timeout
    leaves torchrun time to start it on busy cores."""
    worker, pid_file = tmp_path / "worker.py", tmp_path / "worker.pid"
    worker.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(f'{{os.getpid()}} {{os.getsid(0)}}')\n"
                      "time.sleep(600)\n")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(worker)]
    r = ga.run_child_json(argv, 40, tmp_path / "never.json", {**os.environ, "OMP_NUM_THREADS": "1"})
    assert "killed after its timeout" in r["error"] and pid_file.exists(), r.get("output_tail")
    pid, session = map(int, pid_file.read_text().split())
    assert session == pid  # torchrun made it a session leader: out of reach of a kill of torchrun's group
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail(f"torchrun's worker {pid} survived the timeout")


def test_report_is_written_after_each_check_and_the_budget_cuts_timeouts(tmp_path, monkeypatch):
    """The second check hangs: it is killed at what is left of the budget, and the report already holds the first."""
    def write(value):
        return lambda smoke, out: _py(f"import json; json.dump({{'value': {value}}}, open({out!r}, 'w'))")

    checks = [ga.Check("preflight", {"cpu-smoke": 30}, write(1)),
              ga.Check("hangs", {"cpu-smoke": 600}, lambda smoke, out: _py("import time; time.sleep(600)")),
              ga.Check("needs_missing", {"cpu-smoke": 30}, write(3), needs="no_such_module_here")]
    monkeypatch.setattr(ga, "checks", lambda: checks)
    monkeypatch.setitem(ga.BUDGET_S, "cpu-smoke", 15)
    out = tmp_path / "report.json"
    t = time.perf_counter()
    assert ga.main(["--cpu-smoke", "--out", str(out)]) == 1
    assert time.perf_counter() - t < 40
    report = json.loads(out.read_text())
    assert report["checks"]["preflight"]["value"] == 1
    assert "killed after its timeout" in report["checks"]["hangs"]["error"] and report["checks"]["hangs"]["timeout_s"] < 15
    assert "no_such_module_here" in report["checks"]["needs_missing"]["skipped"]


def test_gpu_child_timeouts_fit_in_eight_minutes():
    assert sum(c.timeout_s["gpu"] for c in ga.checks() if c.needs is None) <= ga.BUDGET_S["gpu"] < 8 * 60


def test_triton_falls_back_to_chunked_without_a_c_compiler(monkeypatch):
    from reco_scaled import kernels

    fake_cuda = types.SimpleNamespace(is_cuda=True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(kernels.shutil, "which", lambda name: None)
    kernels.triton_toolchain_problem.cache_clear()
    try:
        assert "no C compiler" in kernels.triton_toolchain_problem()
        with pytest.warns(UserWarning, match="no C compiler.*chunked"):
            assert kernels.resolve_backend("triton", fake_cuda) == "chunked"
        if importlib.util.find_spec("triton") is not None:
            with pytest.warns(UserWarning, match="chunked"):
                assert kernels.resolve_backend("auto", fake_cuda) == "chunked"
        assert kernels.resolve_backend("triton", types.SimpleNamespace(is_cuda=False)) == "triton"  # the interpreter
        monkeypatch.setenv("CC", "/usr/bin/cc")
        kernels.triton_toolchain_problem.cache_clear()
        assert kernels.triton_toolchain_problem() is None or "Python headers" in kernels.triton_toolchain_problem()
    finally:
        kernels.triton_toolchain_problem.cache_clear()


def test_triton_falls_back_to_chunked_when_its_first_launch_fails(monkeypatch):
    """Issue 32 item 6: a toolchain that passes triton_toolchain_problem can still fail at the first launch (no libcuda,
    no ptxas, a cache directory that cannot be written); before the fix every Triton call then raised. The launch
    failure is simulated (CPU only here); the real tiny launch runs under the Triton interpreter."""
    pytest.importorskip("triton")
    import torch

    from reco_scaled import kernels

    def no_ptxas(device):
        raise RuntimeError("ptxas fatal: could not find ptxas\nmore detail")

    kernels._launch_tiny_kernel(torch.device("cpu"))  # the real kernel, interpreted: right statistics, no error
    monkeypatch.setattr(kernels, "triton_toolchain_problem", lambda: None)
    monkeypatch.setattr(kernels, "_launch_tiny_kernel", no_ptxas)
    kernels.triton_launch_problem.cache_clear()
    try:
        fake_cuda = types.SimpleNamespace(is_cuda=True, device="cuda:0")
        with pytest.warns(UserWarning, match=r"launch kernels here \(RuntimeError: ptxas fatal: could not find ptxas\).*chunked"):
            assert kernels.resolve_backend("triton", fake_cuda) == "chunked"
        with pytest.warns(UserWarning, match="chunked"):
            assert kernels.resolve_backend("auto", fake_cuda) == "chunked"
    finally:
        kernels.triton_launch_problem.cache_clear()


@pytest.mark.slow
def test_cpu_smoke_runs_every_check(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_acceptance.py", "--cpu-smoke", "--out", str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=1300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    checks = report["checks"]
    print(f"\ncpu smoke: {report['seconds']:.0f} s; " + ", ".join(f"{k} {v.get('wall_s', 0):.0f} s" for k, v in checks.items()))
    assert report["mode"] == "cpu-smoke" and report["versions"]["torch"] and report["versions"]["transformers"]
    assert "c_compiler" in report["versions"] and "python_h" in report["versions"] and report["versions"]["fsdp2"]
    kernel = report["checks"]["kernel"]
    if importlib.util.find_spec("triton") is None:
        assert "skipped" in kernel
    else:
        for row in kernel["rows"]:  # Triton (interpreted) against the fp32 naive path, same bf16 inputs
            assert row["backend"] == "triton"
            assert max(row[f"max_abs_err_{k}"] for k in ("logp", "V", "H")) < 1e-3, row
            assert max(row["rel_err_grad_hidden"], row["rel_err_grad_weight"]) < 2e-2, row
    slope = report["checks"]["memory_slope"]
    assert [r["layers"] for r in slope["rows"]] == [1, 2] and "gib_per_layer" in slope
    e2e = report["checks"]["end_to_end"]
    assert [r["step"] for r in e2e["log"]] == [1, 2, 3] and [r["resumed"] for r in e2e["runs"]] == [False, True]
    assert e2e["exported"]
    for run, steps in zip(e2e["runs"], ([1, 2], [3])):  # where each run's time went (issue 32 item 5)
        pieces = run["pieces_s"]
        assert len(pieces["steps"]) == len(steps) and pieces["set_up"] > 0 and pieces["start"] > 0, pieces
    mini = checks["mini_memory"]  # reco_mini's one-GPU step (benchmarks/mini_memory.py --acceptance --smoke)
    assert mini["ok"] and mini["peak_gb"] > 0 and mini["device"] == "cpu", mini
    if importlib.util.find_spec("vllm") is None:
        assert "skipped" in checks["rollout"]
