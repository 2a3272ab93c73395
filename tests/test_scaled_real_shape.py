"""Qwen2.5-0.5B at its real shape (vocabulary 151936, tied embeddings, GQA; fewer layers), on 2 gloo ranks.

- The trainer end to end: task math on the fixture, FSDP2, the fused kernel (chunked path at the real
  vocabulary), 2 steps, a checkpoint, a resume for 1 step and the Hugging Face export.
- Memory, measured: which gradient tensors a rank holds after a micro-batch that is not the last of
  its mini-batch (the trainer's scheme against FSDP2 without gradient sync), and each rank's peak host
  memory while the model loads.

The model has random weights (reco_scaled.shapes) and a synthetic tokenizer whose tokens decode to
boxed answers, so that some responses are right and the update is not zero. RECO_REAL_SHAPE_LAYERS
sets the depth (default 2; 24 is the real model). Run with -s to see the measured numbers.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "math_small.jsonl"
LAYERS = int(os.environ.get("RECO_REAL_SHAPE_LAYERS", "2"))
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from reco_scaled.data import load_problems
    from reco_scaled.shapes import random_model_dir

    answers = sorted({p["answer"] for p in load_problems(FIXTURE)})
    return random_model_dir(tmp_path_factory.mktemp("real-shape") / "qwen2.5-0.5b", "qwen2.5-0.5b", layers=LAYERS,
                            answers=answers)


def held_gradient_bytes(model: torch.nn.Module) -> dict[str, int]:
    """Bytes of gradient held by this rank: the sharded .grad of every parameter, and the unsharded
    gradients FSDP2 keeps per parameter while gradient sync is off (its private FSDPParam fields)."""
    sharded = sum(p.grad.to_local().nbytes for p in model.parameters() if p.grad is not None)
    unsharded = 0
    groups = [g for m in model.modules() if hasattr(m, "_get_fsdp_state") for g in m._get_fsdp_state()._fsdp_param_groups]
    for group in groups:
        for fp in group.fsdp_params:
            grads = [fp.unsharded_accumulated_grad, getattr(getattr(fp, "_unsharded_param", None), "grad", None)]
            unsharded += sum(g.nbytes for g in grads if g is not None)
    return {"sharded": sharded, "unsharded": unsharded}


def memory_worker(model_dir: str, out: str) -> None:
    """Under torchrun: load as the trainer does (FSDP2, bf16 compute), then one micro-batch two ways."""
    import transformers  # noqa: F401  (imported before the baseline, so that the import is not counted)

    from reco_scaled import distributed
    from reco_scaled.config import RunConfig
    from reco_scaled.model import PolicyModel, load_lm
    from reco_scaled.trainer import backward_micro_batch

    d = distributed.init()
    base = distributed.peak_rss_gib()
    cfg = RunConfig(name="real-shape")
    cfg.model.path, cfg.train.fused_kernel = model_dir, True
    lm, _, _ = load_lm(cfg, d)
    full_bytes = sum(p.numel() * 4 for p in lm.parameters())  # fp32, tied weights once
    policy = PolicyModel(lm, fused=True)
    model = distributed.wrap(policy, policy.layers, "fsdp2", d, param_dtype=torch.bfloat16)
    loaded = distributed.peak_rss_gib()

    g = torch.Generator().manual_seed(d.rank)
    B, L, T, V = 4, 24, 8, lm.config.vocab_size
    mask = torch.ones(B, T)
    mb = {"prompt_ids": torch.randint(0, V, (B, L), generator=g), "prompt_mask": torch.ones(B, L, dtype=torch.long),
          "resp": torch.randint(0, V, (B, T), generator=g), "mask": mask, "advantages": torch.randn(B, generator=g),
          "weights": torch.ones(B), "old_logp": torch.full((B, T), -12.0), "v_old": torch.full((B, T), 0.9),
          "v_old_mean": torch.tensor(0.9)}
    n_tok, n_seq = distributed.all_sum(mask.sum()), distributed.all_sum(torch.tensor(float(B)))
    model.train()
    backward_micro_batch(model, cfg, mb, n_tok, n_seq, d.world_size, last=False)
    held = {"trainer": held_gradient_bytes(model)}
    dtypes = sorted({str(p.dtype) for p in model.parameters()} | {str(p.grad.dtype) for p in model.parameters()})
    model.zero_grad(set_to_none=True)
    model.set_requires_gradient_sync(False)  # the scheme this project used before: sync on the last micro-batch only
    backward_micro_batch(model, cfg, mb, n_tok, n_seq, d.world_size, last=False)
    held["no_sync"] = held_gradient_bytes(model)
    model.set_requires_gradient_sync(True)
    shard_bytes = sum(p.to_local().nbytes for p in model.parameters())
    Path(f"{out}.rank{d.rank}.json").write_text(json.dumps({
        "rss_base_gib": base, "rss_loaded_gib": loaded, "full_bytes": full_bytes, "shard_bytes": shard_bytes,
        "held": held, "param_and_grad_dtypes": dtypes}))
    distributed.shutdown()


def test_real_shape_memory_gradients_stay_sharded_and_only_rank_0_holds_the_model(model_dir, tmp_path):
    out = tmp_path / "memory"
    proc = subprocess.run([*TORCHRUN, __file__, str(model_dir), str(out)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(2)]
    growth = [r["rss_loaded_gib"] - r["rss_base_gib"] for r in ranks]
    for r, m in enumerate(ranks):
        print(f"\nrank {r}: {LAYERS} layers, full fp32 model {m['full_bytes'] / 2**30:.3f} GiB, shard "
              f"{m['shard_bytes'] / 2**30:.3f} GiB; gradient bytes after a micro-batch: trainer {m['held']['trainer']}, "
              f"without gradient sync {m['held']['no_sync']}; peak RSS {m['rss_base_gib']:.2f} GiB before loading, "
              f"{m['rss_loaded_gib']:.2f} GiB after (+{growth[r]:.2f})")
        assert m["param_and_grad_dtypes"] == ["torch.float32"]  # fp32 master weights and fp32 (reduced) gradients
        # the trainer's scheme: exactly this rank's fp32 shard of every gradient, nothing unsharded
        assert m["held"]["trainer"] == {"sharded": m["shard_bytes"], "unsharded": 0}
        assert abs(2 * m["shard_bytes"] - m["full_bytes"]) < 0.01 * m["full_bytes"]
        # what the measurement sees when FSDP2 skips the sync: an unsharded fp32 gradient of every parameter
        assert m["held"]["no_sync"] == {"sharded": 0, "unsharded": m["full_bytes"]}
    full_gib = ranks[0]["full_bytes"] / 2**30
    assert growth[0] > full_gib  # rank 0 reads the whole fp32 model
    assert growth[1] < full_gib  # rank 1 never holds the whole model (before: every rank loaded it)


def test_real_shape_run_checkpoint_resume_and_export(model_dir, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    config = tmp_path / "real-shape.yaml"
    config.write_text(f"""name: real-shape
task: math
model: {{path: {model_dir}, precision: fp32}}
data: {{train: {FIXTURE}, template: qwen-boxed}}
algo: {{method: reco, occurrence: count}}
rollout: {{engine: hf, group_size: 8, temperature: 1.0, max_new_tokens: 3}}
train: {{steps: 2, prompts_per_step: 2, minibatches: 1, micro_batch_size: 4, lr: 1.0e-5, parallel: fsdp2, fused_kernel: true}}
checkpoint: {{every: 2, keep: 2}}
""")
    runs = []
    for steps in (2, 3):  # 2 steps and a checkpoint; then a resume from it for 1 more step
        proc = subprocess.run([*TORCHRUN, "-m", "reco_scaled.train", "--config", str(config), f"out={out}",
                               f"train.steps={steps}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        runs.append(proc.stdout)
        if steps == 2:
            first_export = load_file(out / "final" / "model.safetensors")
    assert "resumed from" in runs[1] and "step_000002 at step 2" in runs[1]
    rss = [float(x) for x in re.search(r"peak RSS per rank: ([\d.]+), ([\d.]+) GiB after loading", runs[0]).groups()]
    print(f"\nstart-up peak RSS per rank after loading the model: {rss} GiB")
    assert rss[1] < rss[0]
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert any(r["adv_nonzero_frac"] > 0 and r["grad_norm"] > 0 for r in rows)  # some responses were right
    assert "kl_base" not in rows[0]  # no reference model without a KL term
    final = load_file(out / "final" / "model.safetensors")
    assert "lm_head.weight" not in final and final["model.embed_tokens.weight"].shape == (151936, 896)  # tied, once
    assert any(not torch.equal(final[k], first_export[k]) for k in final)  # step 3 changed the weights
    # the export equals the model of the last checkpoint
    import torch.distributed.checkpoint as dcp

    state = {"model": {f"lm.{k}": torch.empty_like(v) for k, v in final.items()}}
    with warnings.catch_warnings():  # reading a sharded checkpoint in one process is intended here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=out / "checkpoints" / "step_000003")
    assert all(torch.equal(state["model"][f"lm.{k}"], v) for k, v in final.items())


if __name__ == "__main__":
    torch.set_num_threads(1)
    memory_worker(sys.argv[1], sys.argv[2])
