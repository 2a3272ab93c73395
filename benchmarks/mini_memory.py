"""Peak memory of reco_mini --task math, before and after issue 21, and what it means for one GPU.

    python benchmarks/mini_memory.py                               # CPU: a few minutes, prints the table
    python benchmarks/mini_memory.py --acceptance --json OUT.json  # CUDA: one RL step, Qwen2.5-0.5B shape, full depth
    python benchmarks/mini_memory.py --acceptance --smoke          # the same code path, tiny, on CPU (< 1 min)
    python benchmarks/mini_memory.py --smoke                       # the table's path at toy sizes, for CI

Measured (each number in a fresh child process; RSS high-water mark on CPU, torch.cuda.max_memory_allocated
on CUDA): one RL step (reco_mini.train_rl, grpo, 1 step, 1 epoch, 1 mini-batch of all rows) and one evaluation
(reco_mini.evaluate, one sampling call) on a random model with Qwen2.5's real vocabulary (151,936) but a small
body (1 layer, hidden 64), on a grid of rows x new tokens (SIZES; evaluation: the larger token count), in three
settings:

- before: commit c15662b's train_rl (tests/fixtures/train_rl_c15662b.py, verbatim): one forward over the
  whole rollout batch and each whole mini-batch, fp32, the base model on the device; evaluation in fp32.
- micro: today's train_rl with --micro-batch 4 --dtype bfloat16 --gradient-checkpointing and --head-chunk 0
  (full logits per micro-batch: what the previous stop measured), no base on the device (--kl-coef 0).
- after: the same flags with the math default --head-chunk 256: the lm head runs per slice of 256 row-tokens
  from the hidden states, and no [rows, tokens, vocab] logits are kept.
- lora: after's flags with --lora-rank 16 (issue 62): the base frozen in bf16, LoRA adapters (fp32) on every
  attention and MLP projection, the KL reference the same model with its adapters off (reco.hf.policy).
Evaluation is today's code in before and after (fp32, then bf16); only its precision differs.

The fit: the memory above the loaded model is a + b rows + c seq + d rows seq (seq = prompt + new tokens), solved
exactly on the 2 x 2 grid. b (per row: the sampler's [rows, vocab] logits), c (per token at a fixed number of rows:
the micro-batch's vocabulary path) and d (per rollout row-token) are the vocabulary's part, since a 1-layer, 64-wide
body holds almost no activations; a, less the tiny model's own gradients, AdamW moments and bf16 copy (14 B/param),
is the fixed part: the lm head's slices, buffers.

Extrapolated (labelled so) to Qwen2.5-0.5B and Qwen2.5-Math-1.5B at P x G = 64 rows, a 128-token prompt and
1024 new tokens, as a sum of terms (an upper bound: the rollout's KV cache is freed before the updates):
  states      16 B/param: fp32 weights, gradients, AdamW m and v (every setting)
  base        4 B/param: the fp32 base copy on the device (before only)
  bf16 copy   2 B/param: autocast's cached bf16 weights (micro, after)
  vocab path  b x 64 + c x 1152 + d x 64 x 1152, from the fit, plus the fixed part (above); a negative slope (noise
              in the fit) counts as 0, so the sum stays an upper bound
  KV cache    64 x 1152 x layers x 2 x kv_heads x head_dim x (4 B fp32 | 2 B bf16)
  activations saved for backward per token and decoder layer at the real width, from saved-tensor hooks: the
              growth from 1 to 2 layers, between 64 and 128 tokens (so that per-layer constants such as autocast's
              bf16 weight casts cancel): before, mini-batch (32 rows) x 1152 x layers x that; micro and after
              (checkpointing), 4 rows x 1152 x (layers x 4 B x hidden for the layer inputs + one layer's activations).
LoRA (extrapolate_lora), rank 16 and 64, with and without gradient checkpointing, the same sum with:
  base        2 B/param: the frozen base in bf16, no gradient, no optimizer state, no autocast copy
  adapters    18 B/adapter param: fp32 weights, gradients, AdamW m and v, autocast's bf16 copy; the adapter
              parameters counted by peft on a meta-device model (lora_params)
  vocab path  lora's own fit (its fixed part less the tiny model's adapters' 18 B/param)
  activations per token and layer measured as above, on the bf16 model with its adapters; with checkpointing,
              4 rows x 1152 x (layers x 2 B x hidden, the bf16 layer inputs, + one layer's activations); without,
              4 rows x 1152 x layers x that.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reco_mini  # noqa: E402
from reco import hf  # noqa: E402
from reco.cli import RunSettings  # noqa: E402
from reco.tasks import TASKS  # noqa: E402

GB = 1e9
# (rows = P x G, new tokens): a 2 x 2 grid. Both token counts reach the lm head's slice width (--head-chunk 256 over
# 4 micro-batch rows = 64 tokens), so that the growth between them is not the slices filling up.
SIZES = [(4, 64), (4, 128), (16, 64), (16, 128)]
SMOKE_SIZES = [(4, 2), (4, 4), (8, 2), (8, 4)]  # --smoke: the same path, measured in this process, meaning nothing
GROUP, MICRO, PROMPT, NEW, ROWS = 4, 4, 128, 1024, 64  # the extrapolation's run: P x G = 64, 1024 new tokens
REAL = {"qwen2.5-0.5b": 16.0, "qwen2.5-math-1.5b": 40.0}  # shape -> target GB (after)
AFTER = ["--micro-batch", str(MICRO), "--dtype", "bfloat16", "--gradient-checkpointing"]  # + --head-chunk 256 (math)
LORA_RANK = 16  # the lora setting's measured rank; the extrapolation's ranks: LORA_RANKS
LORA_RANKS = (16, 64)
SETTINGS = {"before": None, "micro": AFTER + ["--head-chunk", "0"], "after": AFTER,  # name -> flags (None: c15662b)
            "lora": AFTER + ["--lora-rank", str(LORA_RANK)]}
CARDS = (16, 24, 40, 48, 80)  # GB: the GPUs a table row is matched with (the smallest that holds the step)
SMALL_BODY = dict(layers=1, hidden_size=64, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2)


def write_model_and_data(folder: Path, layers: int | None = None, shape: str = "qwen2.5-0.5b",
                         **overrides) -> tuple[Path, Path]:
    """A random model of `shape` (`layers` and `overrides` change it) and 40 problems."""
    from reco_scaled.shapes import random_model_dir

    model = random_model_dir(folder / "model", shape, layers=layers, answers=["0", "1"], **overrides)
    data = folder / "problems.jsonl"
    data.write_text("".join(json.dumps({"problem": f"What is {i:02d} minus {i:02d}?", "answer": "0"}) + "\n"
                            for i in range(40)))
    return model, data


def peak_reset(device: str) -> float:
    """Forget the peak so far; return the memory in use now (bytes)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    return _status("VmRSS")


def peak(device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    return _status("VmHWM")


def _status(field: str) -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return float(line.split()[1]) * 1024


def measure(spec: dict) -> dict:
    """One measurement, in this process: load, reset the peak, run the phase, read the peak."""
    rows, new, setting, phase = spec["rows"], spec["new"], spec["setting"], spec["phase"]
    group = spec.get("group", GROUP)
    argv = ["--task", "math", "--model", spec["model"], "--data", spec["data"], "--methods", "grpo", "--steps", "1",
            "--epochs", "1", "--minibatches", str(spec.get("minibatches", 1)), "--prompts-per-step", str(rows // group),
            "--group-size", str(group), "--max-new-tokens", str(new), "--n-eval", str(group), "--eval-batch", str(rows),
            "--device", spec["device"], "--out", spec["out"]] + spec.get("flags", SETTINGS[setting] or [])
    cfg = reco_mini.parse_config(argv)
    tokenizer, model = hf.load_hf(cfg.model, cfg.device, hf.base_dtype(cfg))
    problems = TASKS["math"].splits(cfg)["train"]
    prompt_len = len(tokenizer(TASKS["math"].prompt(problems[0], tokenizer)).input_ids)
    base = copy.deepcopy(model).requires_grad_(False) if setting == "before" else None
    if cfg.lora_rank:  # adapters on the frozen base; the reference: the same model with its adapters off
        model, base = hf.policy(cfg, model.requires_grad_(False))
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    start = peak_reset(cfg.device)
    t0 = time.time()
    if phase == "step":
        if setting == "before":
            sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
            from train_rl_c15662b import train_rl
        else:
            train_rl = reco_mini.train_rl
        train_rl(cfg, "grpo", model, base, tokenizer, problems, Path(cfg.out))
    else:
        reco_mini.evaluate(cfg, model, tokenizer, problems[: rows // group], "memory")
    return {**spec, "prompt_len": prompt_len, "start": start, "peak": peak(cfg.device), "seconds": time.time() - t0}


def child(spec: dict) -> dict:
    """`measure` in a fresh process (glibc returns freed large blocks to the OS: RSS follows the tensors)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "TQDM_DISABLE": "1"}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def layer_activation_bytes(shape: str, bf16: bool, tokens: tuple[int, int] = (64, 128), lora_rank: int = 0) -> float:
    """Bytes autograd keeps per token and decoder layer at the real width (distinct storages that are not
    parameters): the growth from a 1-layer to a 2-layer model (small vocabulary: it cancels), per extra token
    between the two token counts (so per-layer constants, e.g. autocast's bf16 casts of the weights, cancel too).
    lora_rank > 0: the model in bf16, frozen, with LoRA adapters of that rank (reco.hf.policy's)."""
    from transformers import AutoModelForCausalLM

    from reco_scaled.shapes import hf_config

    saved = {}
    for layers in (1, 2):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(hf_config(shape, layers, vocab_size=512)).train()
        if lora_rank:
            model = with_adapters(model.to(torch.bfloat16).requires_grad_(False), lora_rank).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        for n in tokens:
            storages: dict[int, int] = {}

            def pack(t, params=params, storages=storages):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in params:
                    storages[ptr] = t.untyped_storage().nbytes()
                return t

            ids = torch.randint(512, (1, n))
            precision = hf.autocast("cpu", "bfloat16" if bf16 else "float32")
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), precision:
                model(input_ids=ids).logits.sum()
            saved[layers, n] = sum(storages.values())
    (t1, t2) = tokens
    return ((saved[2, t2] - saved[1, t2]) - (saved[2, t1] - saved[1, t1])) / (t2 - t1)


def extrapolate(shape: str, setting: str, fit: dict[str, float]) -> dict[str, float]:
    from reco_scaled.shapes import SHAPES, parameter_count

    c, n = SHAPES[shape], parameter_count(shape)[0]
    layers, hidden, seq = c["num_hidden_layers"], c["hidden_size"], PROMPT + NEW
    kv = layers * 2 * c["num_key_value_heads"] * (hidden // c["num_attention_heads"])
    before = setting == "before"
    act = layer_activation_bytes(shape, bf16=not before)
    terms = {"states (16 B/param)": 16 * n, "base on device (4 B/param)": 4 * n if before else 0,
             "autocast bf16 weights (2 B/param)": 0 if before else 2 * n,
             "vocab path (measured fit)": max(0.0, fit["per_row"]) * ROWS + max(0.0, fit["per_token"]) * seq
             + max(0.0, fit["per_row_token"]) * ROWS * seq + max(0.0, fit["constant"] - 14 * tiny_params()),
             "KV cache": ROWS * seq * kv * (4 if before else 2),
             "activations": (ROWS // 2) * seq * layers * act if before else MICRO * seq * (layers * 4 * hidden + act)}
    return {k: v / GB for k, v in terms.items()} | {"total": sum(terms.values()) / GB}


def with_adapters(model, rank: int):
    """`model` with LoRA adapters as reco_mini's --lora-rank puts them (reco.hf.policy: all-linear, alpha 32)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=rank, lora_alpha=RunSettings.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def lora_params(shape: str, rank: int, **overrides) -> int:
    """The adapters' parameters of `shape` at `rank`, counted by peft on a meta-device model."""
    from transformers import AutoModelForCausalLM

    from reco_scaled.shapes import hf_config

    with torch.device("meta"):
        model = with_adapters(AutoModelForCausalLM.from_config(hf_config(shape, **overrides)), rank)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def extrapolate_lora(shape: str, rank: int, checkpointing: bool, fit: dict[str, float]) -> dict[str, float]:
    """One RL step with --lora-rank `rank` (docstring: the LoRA terms); fit: the lora setting's."""
    from reco_scaled.shapes import SHAPES, parameter_count

    c, n, adapters = SHAPES[shape], parameter_count(shape)[0], lora_params(shape, rank)
    layers, hidden, seq = c["num_hidden_layers"], c["hidden_size"], PROMPT + NEW
    kv = layers * 2 * c["num_key_value_heads"] * (hidden // c["num_attention_heads"])
    act = layer_activation_bytes(shape, bf16=True, lora_rank=rank)
    tiny_adapters = lora_params("qwen2.5-0.5b", LORA_RANK, **SMALL_BODY)
    terms = {"frozen bf16 base (2 B/param)": 2 * n, "adapters (18 B/adapter param)": 18 * adapters,
             "vocab path (measured fit)": max(0.0, fit["per_row"]) * ROWS + max(0.0, fit["per_token"]) * seq
             + max(0.0, fit["per_row_token"]) * ROWS * seq + max(0.0, fit["constant"] - 18 * tiny_adapters),
             "KV cache": ROWS * seq * kv * 2,
             "activations": MICRO * seq * (layers * 2 * hidden + act) if checkpointing else MICRO * seq * layers * act}
    return {k: v / GB for k, v in terms.items()} | {"total": sum(terms.values()) / GB, "adapter_params": adapters}


def smallest_card(total_gb: float) -> str:
    return next((f"{card} GB" for card in CARDS if total_gb <= card), f"more than {CARDS[-1]} GB")


def extrapolate_eval(shape: str, bf16: bool, slope_rows: float, rows: int = 64) -> dict[str, float]:
    """One evaluation call of `rows` sequences (the math default --eval-batch 64) after training: weights only."""
    from reco_scaled.shapes import SHAPES, parameter_count

    c, n = SHAPES[shape], parameter_count(shape)[0]
    kv = c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])
    terms = {"weights (4 B/param)": 4 * n, "autocast bf16 weights (2 B/param)": 2 * n if bf16 else 0,
             "vocab path (measured slope)": slope_rows * rows * (PROMPT + NEW),
             "KV cache": rows * (PROMPT + NEW) * kv * (2 if bf16 else 4)}
    return {k: v / GB for k, v in terms.items()} | {"total": sum(terms.values()) / GB}


def bilinear_fit(m: dict[tuple[int, int], dict], sizes: list[tuple[int, int]] = SIZES) -> dict[str, float]:
    """increase = a + b rows + c seq + d rows seq, solved exactly on the 2 x 2 grid of `sizes` (seq = prompt + new)."""
    (r1, t1), (_, t2), (r2, _), _ = sizes
    s1, s2 = m[r1, t1]["prompt_len"] + t1, m[r1, t2]["prompt_len"] + t2
    y = {(r, t): m[r, t]["increase"] for r in (r1, r2) for t in (t1, t2)}
    d = ((y[r2, t2] - y[r2, t1]) - (y[r1, t2] - y[r1, t1])) / ((r2 - r1) * (s2 - s1))
    c = (y[r1, t2] - y[r1, t1]) / (s2 - s1) - d * r1
    b = (y[r2, t1] - y[r1, t1]) / (r2 - r1) - d * s1
    return {"per_row": b, "per_token": c, "per_row_token": d, "constant": y[r1, t1] - b * r1 - c * s1 - d * r1 * s1}


def tiny_params() -> int:
    from transformers import AutoModelForCausalLM

    from reco_scaled.shapes import hf_config

    with torch.device("meta"):
        return sum(p.numel() for p in AutoModelForCausalLM.from_config(hf_config("qwen2.5-0.5b", **SMALL_BODY)).parameters())


def cpu_study(args) -> dict:
    """The table: every measurement in a child process. --smoke: toy sizes, measured in this process (the path runs;
    the numbers mean nothing)."""
    sizes, run = (SMOKE_SIZES, measure) if args.smoke else (SIZES, child)
    chosen = [name for name in SETTINGS if name in args.settings.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model, data = write_model_and_data(Path(tmp), **SMALL_BODY)
        rows = []
        for setting in chosen:
            for phase in ("step", "eval"):
                if phase == "eval" and setting in ("micro", "lora"):
                    continue  # evaluation does not read --head-chunk: after's evaluation is micro's
                for r, t in sizes if phase == "step" else [x for x in sizes if x[1] == sizes[-1][1]]:
                    spec = dict(model=str(model), data=str(data), rows=r, new=t, setting=setting, phase=phase,
                                device="cpu", out=str(Path(tmp) / "run"))
                    res = run(spec)
                    res["increase"] = res["peak"] - res["start"]
                    rows.append(res)
                    print(f"{setting:6s} {phase:4s} rows {r:3d} new tokens {t:3d} prompt {res['prompt_len']}: peak "
                          f"{res['peak'] / GB:6.2f} GB, above the loaded model {res['increase'] / GB:6.2f} GB "
                          f"({res['seconds']:.0f} s)", flush=True)
    report = {"sizes": sizes, "measurements": rows, "fits": {}, "extrapolated": {}}
    for setting in chosen:
        m = {(x["rows"], x["new"]): x for x in rows if x["setting"] == setting and x["phase"] == "step"}
        fit = report["fits"][f"{setting} step"] = bilinear_fit(m, sizes)
        print(f"fit {setting:6s} step: {fit['per_row_token'] / 1e6:7.3f} MB per rollout row-token, "
              f"{fit['per_token'] / 1e6:7.3f} MB per token (micro-batch path), {fit['per_row'] / 1e6:7.2f} MB per row")
    evals = [setting for setting in ("before", "after") if setting in chosen]
    for setting in evals:
        m = [x for x in rows if x["setting"] == setting and x["phase"] == "eval"]
        lo, hi = sorted(m, key=lambda x: x["rows"])
        slope = (hi["increase"] - lo["increase"]) / ((hi["rows"] - lo["rows"]) * (hi["prompt_len"] + hi["new"]))
        report["fits"][f"{setting} eval"] = {"per_row_token": slope}
        print(f"slope {setting:6s} eval: {slope / 1e6:7.3f} MB per rollout row-token")
    print(f"\nExtrapolated (CPU-measured fits + the terms in the docstring), P x G = {ROWS}, prompt {PROMPT} "
          f"+ {NEW} new tokens:")
    for shape, target in REAL.items():
        for setting in [s for s in chosen if s != "lora"]:
            e = extrapolate(shape, setting, report["fits"][f"{setting} step"])
            report["extrapolated"][f"{shape} {setting} step"] = e
            verdict = f"  target <= {target:.0f} GB: {'met' if e['total'] <= target else 'NOT met'}" if setting == "after" else ""
            print(f"  {shape:18s} {setting:6s} RL step: {e['total']:7.1f} GB  ("
                  + ", ".join(f"{k} {v:.1f}" for k, v in e.items() if k != "total") + ")" + verdict)
    print(f"Extrapolated LoRA RL step (--lora-rank R --dtype bfloat16 --micro-batch {MICRO}, the lora fit), "
          f"P x G = {ROWS}, prompt {PROMPT} + {NEW} new tokens:")
    for shape in REAL if "lora" in chosen else []:
        for rank in LORA_RANKS:
            for checkpointing in (True, False):
                e = extrapolate_lora(shape, rank, checkpointing, report["fits"]["lora step"])
                gc = "checkpointing" if checkpointing else "no checkpointing"
                report["extrapolated"][f"{shape} lora {rank} {gc} step"] = e
                print(f"  {shape:18s} rank {rank:2d} {gc:16s}: {e['total']:6.1f} GB, smallest card "
                      f"{smallest_card(e['total'])}  (" + ", ".join(f"{k} {v:.2f}" for k, v in e.items()
                                                                     if k not in ("total", "adapter_params"))
                      + f"; {e['adapter_params'] / 1e6:.1f}M adapter parameters)")
    print(f"Extrapolated evaluation, one call of --eval-batch 64 (the math default) at {PROMPT} + {NEW} tokens:")
    for shape in REAL if len(evals) == 2 else []:
        for setting, bf16 in (("before", False), ("after", True)):
            e = extrapolate_eval(shape, bf16, report["fits"][f"{setting} eval"]["per_row_token"])
            report["extrapolated"][f"{shape} {'bf16' if bf16 else 'fp32'} eval"] = e
            print(f"  {shape:18s} {'bf16' if bf16 else 'fp32':6s} eval: {e['total']:7.1f} GB  ("
                  + ", ".join(f"{k} {v:.1f}" for k, v in e.items() if k != "total") + ")  24 GB: "
                  + ("fits" if e["total"] <= 24 else "does NOT fit"))
    return report


def acceptance_flags(args) -> list[str]:
    """after's flags, with --lora-rank R, without --gradient-checkpointing where asked (the 24 GB command's)."""
    flags = [f for f in AFTER if not (args.no_checkpointing and f == "--gradient-checkpointing")]
    return flags + (["--lora-rank", str(args.lora_rank)] if args.lora_rank else [])


def acceptance(args) -> dict:
    """One RL step of reco_mini with the after flags on a random model of --shape (Qwen2.5-0.5B's; full depth), P x G
    = 8 x 8, 1024 new tokens, 2 mini-batches, on CUDA: the peak GPU memory. --lora-rank R: with LoRA adapters (target:
    a 24 GB card); --no-checkpointing: without --gradient-checkpointing. --smoke: the same path, tiny, on CPU."""
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--acceptance needs CUDA (or --smoke for the CPU variant)")
    with tempfile.TemporaryDirectory() as tmp:
        small = dict(layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1)
        model, data = write_model_and_data(Path(tmp), shape=args.shape, **(small if args.smoke else {"layers": None}))
        rows, new = (8, 8) if args.smoke else (ROWS, NEW)
        spec = dict(model=str(model), data=str(data), rows=rows, new=new, setting="after", phase="step", device=device,
                    out=str(Path(tmp) / "run"), group=8 if not args.smoke else 4, minibatches=2,
                    flags=acceptance_flags(args))
        t0 = time.time()
        res = measure(spec)  # in this process: on CPU (smoke) the peak includes writing the model
    out = {"check": "reco_mini_one_gpu", "shape": args.shape + (" (tiny smoke)" if args.smoke else ""),
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "rows": rows, "new_tokens": new,
           "flags": spec["flags"], "prompt_len": res["prompt_len"], "peak_gb": res["peak"] / GB,
           "peak_kind": "torch.cuda.max_memory_allocated" if device == "cuda" else "RSS high-water mark",
           "target_gb": 24.0 if args.lora_rank else REAL[args.shape], "seconds": time.time() - t0}
    out["ok"] = bool(args.smoke or out["peak_gb"] <= out["target_gb"])
    print(json.dumps(out, indent=1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--acceptance", action="store_true", help="one RL step, Qwen2.5-0.5B shape, full depth, on CUDA")
    ap.add_argument("--smoke", action="store_true", help="the same code path, tiny, on CPU (alone: the table's, "
                    "measured in this process; with --acceptance: the acceptance check's)")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="the table's settings to measure (comma-separated)")
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=list(REAL), help="--acceptance's model shape")
    ap.add_argument("--lora-rank", type=int, default=0, help="--acceptance with LoRA adapters of this rank")
    ap.add_argument("--no-checkpointing", action="store_true", help="--acceptance without --gradient-checkpointing")
    ap.add_argument("--json", default="", help="write the report here")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return None
    report = acceptance(args) if args.acceptance else cpu_study(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
