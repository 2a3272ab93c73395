"""GPU acceptance checks of reco_scaled, in one command, on one H100 or H200 (a few minutes):

    python benchmarks/gpu_acceptance.py --out report.json
    python benchmarks/gpu_acceptance.py --cpu-smoke --out smoke.json    # the same code paths, tiny, on CPU (CI)

It needs no hub access and no vLLM: the models are random-weight stand-ins with the exact Qwen2.5 shapes
(reco_scaled.shapes) and a synthetic tokenizer of the real vocabulary size. It runs with the torch it finds
(the code avoids APIs newer than torch 2.4) and records the versions. Checks:

- kernel: Triton token_stats_linear against the naive path (full fp32 logits) at V = 151936, 152064 and
  128256, bf16, T = 8192, d = 3584: errors, peak memory above the inputs, time, and the bandwidth of the
  Triton statistics kernel (streaming bf16 logits) as a fraction of the device's nominal peak and of a
  measured device copy.
- memory_slope: Qwen2.5-Math-7B geometry with 4 and 8 decoder layers, FSDP2 at world size 1 (bf16 compute,
  fp32 master weights), gradient checkpointing, the fused head; a mini-batch of 4 micro-batches of
  4 × 4096 tokens and an AdamW step (after a first one that creates the AdamW state): peak memory, GB per
  layer, the extrapolation to 28 layers, and reco_scaled.memory's arithmetic (the README's) beside it.
- end_to_end: the Qwen2.5-Math-1.5B ReCo config with 8 layers, the hf engine and the math fixture:
  2 RL steps with a checkpoint under torchrun, then a resume for a third step.

A failing check is recorded with its traceback and the others still run; the exit code is 1 if any failed.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "math_small.jsonl"
# Nominal memory bandwidth (bytes/s) by device name, from the vendors' data sheets.
NOMINAL_BANDWIDTH = {"H200": 4.8e12, "H100 NVL": 3.9e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.039e12,
                     "A100 80GB PCIe": 1.935e12, "A100": 1.555e12}
FULL = {"kernel": dict(T=8192, d=3584, vocabs=(151936, 152064, 128256), reps=3),
        "slope": dict(shape="qwen2.5-math-7b", layers=(4, 8), rows=4, prompt=1024, response=3072, overrides={}),
        "e2e": dict(layers=8, prompts=8, micro=4, new_tokens=256, overrides={})}
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
SMOKE = {"kernel": dict(T=64, d=64, vocabs=(1031,), reps=1),
         "slope": dict(shape="qwen2.5-math-7b", layers=(1, 2), rows=2, prompt=16, response=16,
                       overrides={**TINY, "vocab_size": 1031, "bos_token_id": 0, "eos_token_id": 0}),
         "e2e": dict(layers=2, prompts=2, micro=2, new_tokens=4, overrides=TINY)}


def versions() -> dict:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("torch", "transformers", "triton", "safetensors", "tokenizers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    import torch

    out["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(device=props.name, device_memory_gib=props.total_memory / 2**30,
                   cuda_capability=f"{props.major}.{props.minor}")
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        out["commit"] = None
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

    from reco_scaled.kernels import token_stats, token_stats_linear

    T, d, reps, tau = size["T"], size["d"], size["reps"], 1.0

    def naive(h, w, y):
        logits = (h @ w.T).float() / tau
        logp_all = F.log_softmax(logits, -1)
        probs = logp_all.exp()
        return logp_all.gather(1, y[:, None])[:, 0], 1 - probs.detach().square().sum(-1), -(probs * logp_all).sum(-1)

    def fused(h, w, y):
        return token_stats_linear(h, w, y, tau, backend="triton")

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
    row, results, peak = {"V": V, "T": T, "d": d, "dtype": "bfloat16"}, {}, Peak(device)
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
        _, t = timed(lambda: token_stats(logits, y, tau, backend="triton"), device, reps)
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

    d = distributed.Dist(0, 1, device)
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


def check_end_to_end(device, size: dict, tmp: Path) -> dict:
    """2 RL steps with a checkpoint, then a resume for a third, under torchrun with one process."""
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
    for steps in (2, 3):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "-m",
               "reco_scaled.train", "--config", str(ROOT / "reco_scaled/configs/qwen2.5-math-1.5b-reco.yaml"),
               *overrides, f"train.steps={steps}"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        out["runs"].append({"steps": steps, "returncode": proc.returncode, "wall_s": time.perf_counter() - t,
                            "resumed": "resumed from" in proc.stdout,
                            "output_tail": (proc.stdout + proc.stderr)[-3000:] if proc.returncode else ""})
        if proc.returncode:
            raise RuntimeError(f"reco_scaled.train exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    keys = ("step", "reward_mean", "adv_nonzero_frac", "loss", "grad_norm", "response_length", "time_step",
            "time_rollout", "time_update", "gpu_mem_peak_gib")
    out["log"] = [{k: r.get(k) for k in keys} for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())]
    out["exported"] = (run / "final" / "config.json").exists()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="report JSON")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (Triton interpreted): the code paths only")
    args = p.parse_args(argv)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        p.error("no CUDA device: run with --cpu-smoke")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    sizes = SMOKE if args.cpu_smoke else FULL
    report = {"mode": "cpu-smoke" if args.cpu_smoke else "gpu", "versions": versions(), "sizes": sizes, "checks": {}}
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    from reco_scaled import distributed

    distributed.init()  # a process group of one, for FSDP2 in memory_slope
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_acceptance_") as tmp:
        for name, check in (("kernel", lambda: check_kernel(device, sizes["kernel"])),
                            ("memory_slope", lambda: check_memory_slope(device, sizes["slope"])),
                            ("end_to_end", lambda: check_end_to_end(device, sizes["e2e"], Path(tmp)))):
            t = time.perf_counter()
            try:
                result = check()
            except Exception:
                result = {"error": traceback.format_exc()}
            result["seconds"] = time.perf_counter() - t
            report["checks"][name] = result
            print(f"{name}: {'FAILED' if 'error' in result else 'ok'} in {result['seconds']:.0f} s", flush=True)
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    report["seconds"] = time.perf_counter() - start
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    distributed.shutdown()
    failed = [k for k, v in report["checks"].items() if "error" in v]
    print(f"wrote {args.out} in {report['seconds']:.0f} s" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
