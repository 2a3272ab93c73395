"""Per-GPU memory of a run, term by term: the arithmetic behind docs/reproducing.md's table and the paper configs.

Each term is labelled: "size" (bytes of tensors whose size follows from the shapes; the sharded
gradient size was measured on CPU by tests/test_scaled_real_shape.py), or "estimate" (a rough size of
buffers that only a GPU run can measure: benchmarks/gpu_acceptance.py measures the training peak).
The training terms assume what the trainer does on GPU: FSDP2 over `world` GPUs with bf16 compute on
fp32 master weights, gradients reduce-scattered after every micro-batch, gradient checkpointing, the
fused LM head, no reference model (kl_coef 0) and vLLM asleep at level 2 while training.

    python -m reco_scaled.memory                  # the docs/reproducing.md table for the paper configs (8 x 80 GB)
    python -m reco_scaled.memory --gpu-gb 141     # on H200s (vLLM's share is a fraction of the GPU)
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from reco import cli
from reco_scaled.config import ConfigError, RunConfig, load_config
from reco_scaled.kernels import LINEAR_CHUNKS
from reco_scaled.shapes import SHAPES, parameter_count

GB = 1e9
CONTEXT, CONTEXT_GB = "CUDA context, NCCL, allocator slack", 4.0  # per GPU (estimate)
VLLM_ASLEEP_GB = 2.0  # vLLM at sleep level 2: CUDA graph pool and small buffers stay (estimate)
OUTSIDE_ALLOCATOR = (CONTEXT, "vLLM asleep (level 2)")  # not in torch.cuda.max_memory_allocated
PAPER_CONFIGS = ("qwen2.5-math-1.5b", "qwen2.5-math-7b", "llama3.1-8b-instruct")


@dataclass
class Term:
    name: str
    gb: float
    kind: str  # "size" or "estimate"
    note: str = ""  # shown before the value in the table


def shape_of(cfg: RunConfig) -> str:
    """The SHAPES key of a config's model (Qwen/Qwen2.5-Math-7B -> qwen2.5-math-7b)."""
    name = Path(cfg.model.path).name.lower().replace("llama-", "llama")
    if name not in SHAPES:
        raise KeyError(f"no shape for model {cfg.model.path!r}; known: {sorted(SHAPES)}")
    return name


def training_terms(cfg: RunConfig, world: int, layers: int | None = None) -> list[Term]:
    """Per-GPU memory at the training peak (the backward pass of a micro-batch), with `layers` decoder
    layers (default: the model's). The sum is an upper estimate: not every term peaks at once (the
    root's fp32 reduce-scatter buffer, for one, appears after the last layer's activations are freed)."""
    s = SHAPES[shape_of(cfg)]
    L = layers or s["num_hidden_layers"]
    n, layer = parameter_count(shape_of(cfg), L)
    root = n - L * layer  # embeddings, LM head (once if tied), final norm
    d, inter = s["hidden_size"], s["intermediate_size"]
    tokens = cfg.train.micro_batch_size * (cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens)
    rows, cols = LINEAR_CHUNKS["triton"]
    return [
        Term("fp32 master weights, sharded (4N/W)", 4 * n / world / GB, "size"),
        Term("fp32 gradients, sharded after every micro-batch (4N/W)", 4 * n / world / GB, "size"),
        Term("AdamW moments, sharded (8N/W)", 8 * n / world / GB, "size"),
        Term("bf16 gathered weights: root + 2 layers (2(R + 2P))", 2 * (root + 2 * layer) / GB, "size"),
        Term("root gradients unsharded, bf16 + fp32 for the reduce-scatter (6R)", 6 * root / GB, "size"),
        Term("checkpointed bf16 layer inputs (2·S·d·L)", 2 * tokens * d * L / GB, "size"),
        Term("one layer recomputed in backward (~2·S·(6d + 4I))", 2 * tokens * (6 * d + 4 * inter) / GB, "estimate"),
        Term("fused LM head: one logits tile and its gradients (~10 B × tile)", 10 * rows * cols / GB, "estimate"),
        Term(CONTEXT, CONTEXT_GB, "estimate"),
        Term("vLLM asleep (level 2)", VLLM_ASLEEP_GB, "estimate"),
    ]


def rollout_terms(cfg: RunConfig, world: int, gpu_gb: float) -> list[Term]:
    """Per-GPU memory while vLLM generates: the trainer keeps weights and AdamW (no gradients)."""
    n, _ = parameter_count(shape_of(cfg))
    return [
        Term("trainer between updates: weights + AdamW (12N/W)", 12 * n / world / GB, "size"),
        Term(CONTEXT + " (as while training)", CONTEXT_GB, "estimate"),
        Term(f"vLLM: gpu_memory_utilization × {gpu_gb:g} GB (its bf16 weights, 2N, and the KV cache)",
             cfg.rollout.gpu_memory_utilization * gpu_gb, "size", f"{cfg.rollout.gpu_memory_utilization} → "),
    ]


def peaks(cfg: RunConfig, world: int = 8, gpu_gb: float = 80.0) -> tuple[float, float]:
    """(peak while training, peak during rollouts) per GPU, GB: the sums of the terms."""
    return sum(t.gb for t in training_terms(cfg, world)), sum(t.gb for t in rollout_terms(cfg, world, gpu_gb))


def markdown_table(world: int = 8, gpu_gb: float = 80.0, configs: Path | None = None) -> str:
    """The docs/reproducing.md table: one column per paper config (the -reco one; -grpo has the same sizes)."""
    root = configs or Path(__file__).resolve().parent / "configs"
    cfgs = [load_config(root / f"{name}-reco.yaml") for name in PAPER_CONFIGS]
    columns, kinds = [], {}
    for cfg in cfgs:
        n, _ = parameter_count(shape_of(cfg))
        tokens = cfg.data.max_prompt_tokens + cfg.rollout.max_new_tokens
        train, roll = training_terms(cfg, world), rollout_terms(cfg, world, gpu_gb)
        kinds.update({t.name: t.kind for t in train + roll})
        columns.append({"N": f"{n / 1e9:.3f} B" + (" (tied)" if SHAPES[shape_of(cfg)]["tie_word_embeddings"] else ""),
                        "S": f"{cfg.train.micro_batch_size} × {tokens} = {cfg.train.micro_batch_size * tokens:,}",
                        **{t.name: _cell(t) for t in train},
                        "**peak while training** (the sum)": f"**~{sum(t.gb for t in train):.0f}**",
                        **{t.name: _cell(t) for t in roll},
                        "**peak during rollouts** (the sum)": f"**~{sum(t.gb for t in roll):.0f}**"})
    names = [Path(c.model.path).name for c in cfgs]
    lines = ["| GB per GPU | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    labels = {"N": "N (parameters)", "S": "S = micro-batch × (prompt + response) tokens"}
    for key in columns[0]:
        label = labels.get(key, key) + (" *(estimate)*" if kinds.get(key) == "estimate" else "")
        lines.append(f"| {label} | " + " | ".join(col[key] for col in columns) + " |")
    return "\n".join(lines)


def _cell(t: Term) -> str:
    return t.note + (f"~{t.gb:.1f}" if t.kind == "estimate" else f"{t.gb:.2f}")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m reco_scaled.memory", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu-gb", type=float, default=80.0,
                        help="memory of one GPU in GB (80 for A100/H100 80GB, 141 for H200); sizes vLLM's share")
    parser.add_argument("--world", type=int, default=8, help="GPUs the training state is sharded over (FSDP2)")
    parser.add_argument("--configs", type=Path, help="folder with <paper config>-reco.yaml (default: reco_scaled/configs)")
    args = parser.parse_args(argv)
    if args.gpu_gb <= 0 or args.world < 1:
        parser.error("--gpu-gb must be > 0 and --world >= 1")
    table = markdown_table(args.world, args.gpu_gb, args.configs)
    print(table)
    return table


if __name__ == "__main__":  # a bad config or an unknown model: one line, exit code 2
    cli.run_entry_point("python -m reco_scaled.memory", main, (ConfigError, KeyError))
