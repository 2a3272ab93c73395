"""Benchmark of the per-token statistics (log pi(y_t), V_t, H_t): time and peak memory per path.

    python benchmarks/token_stats.py            # T=4096, V=151936, d=1536 (fp32 on CPU, bf16 on GPU)
    python benchmarks/token_stats.py --small    # a quick shape
    python benchmarks/token_stats.py --smoke    # every path and mode at a toy shape, for CI: no measurement

Every path starts from hidden [T, d] and the LM head [V, d], so the rows are comparable:
  naive    logits = hidden @ W.T, then log_softmax and softmax over the full fp32 [T, V]
  chunked  logits = hidden @ W.T in the model dtype, then token_stats (chunked PyTorch)
  fused    token_stats_linear (chunked PyTorch): logits only ever exist as small tiles
  triton / fused-triton   the same two with the Triton backend (CUDA only)
Modes: "fwd" is the no-grad old-policy pass; "fwd+bwd" is a training step, with the gradient of
sum_t (a_t logp_t + b_t H_t) for random a, b reaching hidden and W.

Each (path, mode) runs in its own subprocess, so peaks do not leak between rows.
Peak memory is measured above the inputs: on CPU, the process's peak resident set (VmHWM, reset
through /proc/self/clear_refs just before the run) minus its resident set once the inputs exist;
on CUDA, torch.cuda.max_memory_allocated minus memory_allocated before the run. In fwd+bwd the
peak includes the gradients of hidden and W themselves (W's alone is V*d elements), which every
path has to produce; the "excl. grads" column subtracts them.
On CPU the first run is the measured one (at this size warm-up is negligible); on CUDA a warm-up
run (Triton compilation) comes first. Timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reco_scaled.kernels import token_stats, token_stats_linear  # noqa: E402

H200_PEAK_BYTES_PER_S = 4.8e12
TEMPERATURE = 0.6


def naive(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    logits = (hidden @ weight.T).float() / TEMPERATURE
    logp_all = F.log_softmax(logits, dim=-1)
    probs = F.softmax(logits, dim=-1)
    logp = logp_all.gather(1, targets[:, None]).squeeze(1)
    var = 1.0 - probs.detach().square().sum(-1)
    entropy = -(probs * logp_all).sum(-1)
    return logp, var, entropy


PATHS = {
    "naive": naive,
    "chunked": lambda h, w, t: token_stats(h @ w.T, t, TEMPERATURE, backend="chunked"),
    "fused": lambda h, w, t: token_stats_linear(h, w, t, TEMPERATURE, backend="chunked"),
    "triton": lambda h, w, t: token_stats(h @ w.T, t, TEMPERATURE, backend="triton"),
    "fused-triton": lambda h, w, t: token_stats_linear(h, w, t, TEMPERATURE, backend="triton"),
}


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_cpu_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass  # then VmHWM may include input creation, which only overstates this path's peak


def worker(args: argparse.Namespace) -> dict:
    """Runs one (path, mode) and returns its measurements."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    hidden = torch.randn(args.T, args.d, generator=gen).to(device, dtype)
    weight = torch.randn(args.V, args.d, generator=gen).mul_(2.0 / args.d**0.5).to(device, dtype)  # logits std ~2
    targets = torch.randint(0, args.V, (args.T,), generator=gen).to(device)
    coef_logp, coef_entropy = torch.randn(2, args.T, generator=gen).to(device)
    train = args.mode == "fwd+bwd"
    hidden.requires_grad_(train)
    weight.requires_grad_(train)
    fn = PATHS[args.path]

    def step() -> None:
        hidden.grad = weight.grad = None
        with torch.set_grad_enabled(train):
            logp, var, entropy = fn(hidden, weight, targets)
            if train:
                ((coef_logp * logp).sum() + (coef_entropy * entropy).sum()).backward()

    cuda = device.type == "cuda"
    if cuda:
        step()  # warm-up: Triton compilation, cuBLAS handles
        hidden.grad = weight.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        _reset_cpu_peak()
        base_kib = _proc_status_kib("VmRSS")
    times = []
    for _ in range(args.repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() - base if cuda else (_proc_status_kib("VmHWM") - base_kib) * 1024
    grads = (hidden.numel() + weight.numel()) * hidden.element_size() if train else 0
    out = {"path": args.path, "mode": args.mode, "time_s": min(times), "peak_bytes": peak, "grad_bytes": grads}
    if cuda and args.path == "triton":
        out["kernel_bytes_per_s"] = triton_kernel_bandwidth(hidden.detach(), weight.detach(), targets, train, args.repeats)
    return out


def triton_kernel_bandwidth(hidden, weight, targets, train: bool, repeats: int) -> float:
    """Bytes per second of the Triton stats kernels alone on given logits (matmul excluded).

    Traffic counted: the forward reads the logits once; the backward reads them again and writes
    their gradient.
    """
    logits = (hidden @ weight.T).requires_grad_(train)
    g = torch.randn(2, logits.shape[0], device=logits.device)

    def run() -> None:
        logits.grad = None
        with torch.set_grad_enabled(train):
            logp, _, entropy = token_stats(logits, targets, TEMPERATURE, backend="triton")
            if train:
                ((g[0] * logp).sum() + (g[1] * entropy).sum()).backward()

    run()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        run()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - t0) / repeats
    return logits.numel() * logits.element_size() * (3 if train else 1) / seconds


def run_worker(args: argparse.Namespace, path: str, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--path", path, "--mode", mode, "--device", args.device, "--dtype", args.dtype]
    cmd += ["--T", str(args.T), "--V", str(args.V), "--d", str(args.d), "--repeats", str(args.repeats)]
    cmd += ["--threads", str(args.threads)] if args.threads else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        return {"path": path, "mode": mode, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table_header(cuda: bool) -> str:
    head = f"{'path':<13}{'mode':<9}{'time s':>9}{'x naive':>9}{'peak MiB':>11}{'naive/peak':>12}"
    head += f"{'excl. grads MiB':>17}{'naive/excl':>12}"
    return head + (f"{'kernel GB/s':>13}{'% of 4.8TB/s':>14}" if cuda else "")


def table_row(r: dict, ref: dict | None) -> str:
    """One row; ratios are against `ref`, the naive row of the same mode and run (if any)."""
    if "error" in r:
        return f"{r['path']:<13}{r['mode']:<9}  failed: {r['error']}"
    mib = 2**20
    peak, excl = r["peak_bytes"], r["peak_bytes"] - r["grad_bytes"]
    line = f"{r['path']:<13}{r['mode']:<9}{r['time_s']:>9.2f}"
    line += f"{r['time_s'] / ref['time_s']:>9.2f}" if ref else f"{'-':>9}"
    line += f"{peak / mib:>11.0f}" + (f"{ref['peak_bytes'] / max(peak, 1):>12.1f}" if ref else f"{'-':>12}")
    ref_excl = ref["peak_bytes"] - ref["grad_bytes"] if ref else 0
    line += f"{excl / mib:>17.0f}" + (f"{ref_excl / max(excl, 1):>12.1f}" if ref else f"{'-':>12}")
    if "kernel_bytes_per_s" in r:
        bw = r["kernel_bytes_per_s"]
        line += f"{bw / 1e9:>13.0f}{100 * bw / H200_PEAK_BYTES_PER_S:>13.1f}%"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="quick shape: T=512, V=32000, d=256")
    p.add_argument("--smoke", action="store_true", help="toy shape T=16, V=64, d=8, one run per row: checks that "
                   "every path and mode runs, measures nothing")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--T", type=int, default=None)
    p.add_argument("--V", type=int, default=None)
    p.add_argument("--d", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None, help="timed runs per row (min is reported)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    p.add_argument("--paths", default=None, help="comma-separated subset of " + ",".join(PATHS))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(args)))
        return

    cuda = args.device.startswith("cuda")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    shapes = ([(16, 64, 8)] if args.smoke else [(512, 32000, 256)] if args.small
              else [(4096, 151936, 1536)] + ([(16384, 151936, 3584)] if cuda else []))
    if args.T or args.V or args.d:
        shapes = [(args.T or shapes[0][0], args.V or shapes[0][1], args.d or shapes[0][2])]
    args.repeats = args.repeats or (3 if (args.small or cuda) and not args.smoke else 1)
    paths = args.paths.split(",") if args.paths else ["naive", "chunked", "fused"] + (["triton", "fused-triton"] if cuda else [])
    failed = []
    for args.T, args.V, args.d in shapes:
        print(f"\nT={args.T} V={args.V} d={args.d} {args.dtype} on {args.device} ({torch.get_num_threads()} threads), "
              f"temperature {TEMPERATURE}, min of {args.repeats} run(s)")  # fmt: skip
        print(table_header(cuda), flush=True)
        for mode in args.modes.split(","):
            ref = None
            for path in paths:  # naive first, so that each row can be printed as soon as it is measured
                row = run_worker(args, path, mode)
                ref = row if path == "naive" and "error" not in row else ref
                failed += [f"{path} {mode}"] if "error" in row else []
                print(table_row(row, ref), flush=True)
    if failed:
        sys.exit(f"failed rows: {', '.join(failed)}")


if __name__ == "__main__":
    main()
