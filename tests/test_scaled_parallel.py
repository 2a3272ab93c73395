"""2-rank DDP and FSDP2 gradients (gloo, CPU) equal single-process full-batch gradients.

The reference is computed here, in one process, straight from reco_mini (response_logits,
token_logprobs, variance_stat, policy_loss over the whole batch with its own normaliser). The
distributed side runs this file under torchrun: each rank takes half of the rollouts and runs the
trainer's accumulate_gradients (micro-batches, all-reduced normaliser) through DDP or FSDP2. Rank 1
builds its model on the meta device, as the trainer does, so its weights come from rank 0 alone.
FSDP2 with bf16 compute (the trainer's GPU setting) is checked too, against the same fp32 reference
within bf16's precision, with fp32 master weights and gradients.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reco.tasks.countdown import char_tokenizer, tiny_model
from reco_mini import policy_loss, response_logits, token_logprobs, variance_stat
from reco_scaled.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
B, L, T = 8, 6, 7  # rollouts, prompt length, max response length
CASES = {  # name -> algo settings
    "reco-token-mean": dict(method="reco"),
    "grpo-seq-mean-kl": dict(method="grpo", aggregation="seq-mean-token-mean", kl_coef=0.1, dual_clip=3.0),
}


def make_case(seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A tiny random Qwen2 and a batch of rollouts whose old log-probs are off-policy (so ratios clip)."""
    tok = char_tokenizer()
    torch.manual_seed(seed)
    lm = tiny_model(tok, hidden=32, layers=2)
    g = torch.Generator().manual_seed(seed)
    V = len(tok)
    lengths = torch.tensor([7, 3, 5, 1, 6, 7, 2, 4])
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    batch = {
        "prompt_ids": torch.randint(4, V, (B, L), generator=g),
        "prompt_mask": torch.ones(B, L, dtype=torch.long),
        "resp": torch.randint(4, V, (B, T), generator=g),
        "mask": mask,
        "advantages": torch.randn(B, generator=g),
        "weights": 0.5 + torch.rand(B, generator=g),
        "v_old": 0.2 + 0.6 * torch.rand(B, T, generator=g),
    }
    with torch.no_grad():
        logits = response_logits(lm, batch["prompt_ids"], batch["prompt_mask"], batch["resp"], batch["mask"].long())
        logp = token_logprobs(logits, batch["resp"])
    batch["old_logp"] = logp + 0.3 * torch.randn(B, T, generator=g)
    batch["ref_logp"] = logp + 0.1 * torch.randn(B, T, generator=g)
    batch["v_old_mean"] = (batch["v_old"] * mask).sum() / mask.sum()
    return lm, batch


def config(case: str) -> RunConfig:
    cfg = RunConfig(name="grad-test")
    for k, v in CASES[case].items():
        setattr(cfg.algo, k, v)
    cfg.train.micro_batch_size = 2  # 4 rollouts per rank -> 2 micro-batches
    return cfg


def reference_grads(case: str) -> dict[str, torch.Tensor]:
    cfg = config(case)
    lm, b = make_case()
    logits = response_logits(lm, b["prompt_ids"], b["prompt_mask"], b["resp"], b["mask"].long())
    loss, _ = policy_loss(token_logprobs(logits, b["resp"]), b, cfg.loss, variance_stat(logits.detach()))
    loss.backward()
    return {"lm." + n: p.grad for n, p in lm.named_parameters()}


def worker(out: str) -> None:
    """Under torchrun: gradients of every case through DDP and FSDP2, saved by rank 0."""
    from reco_scaled import distributed
    from reco_scaled.loss import StatSums
    from reco_scaled.model import PolicyModel
    from reco_scaled.trainer import accumulate_gradients

    d = distributed.init()
    results = {}
    for parallel in ("ddp", "fsdp2", "fsdp2-bf16"):
        for case in CASES if parallel != "fsdp2-bf16" else ["reco-token-mean"]:
            lm, b = make_case()
            if d.rank:  # no weights on ranks other than 0 (reco_scaled.model.build_lm)
                with torch.device("meta"):
                    lm = tiny_model(char_tokenizer(), hidden=32, layers=2)
            half = B // d.world_size
            mine = {k: v[d.rank * half: (d.rank + 1) * half] if v.ndim else v for k, v in b.items()}
            policy = PolicyModel(lm)
            bf16 = parallel == "fsdp2-bf16"
            model = distributed.wrap(policy, policy.layers, parallel.removesuffix("-bf16"), d,
                                     param_dtype=torch.bfloat16 if bf16 else None)
            amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
            accumulate_gradients(model, config(case), mine, torch.arange(half), StatSums(), d.world_size, amp)
            grads = {}
            for n, p in model.named_parameters():
                assert p.dtype == p.grad.dtype == torch.float32  # fp32 master weights and gradients
                g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                grads[n.removeprefix("module.")] = g.clone()
            results[f"{parallel}/{case}"] = grads
    if d.main:
        torch.save(results, out)
    distributed.shutdown()


def test_ddp_and_fsdp2_gradients_equal_full_batch(tmp_path):
    out = tmp_path / "grads.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = torch.load(out, weights_only=True)
    for case in CASES:
        ref = reference_grads(case)
        assert any(g.abs().sum() > 0 for g in ref.values())
        for parallel in ("ddp", "fsdp2"):
            got = results[f"{parallel}/{case}"]
            assert got.keys() == ref.keys()
            for name, g in ref.items():
                torch.testing.assert_close(got[name], g, rtol=1e-5, atol=1e-7, msg=f"{parallel} {case} {name}")
    ref = reference_grads("reco-token-mean")
    for name, g in results["fsdp2-bf16/reco-token-mean"].items():  # bf16 keeps 8 significant bits
        assert (g - ref[name]).norm() <= 0.03 * ref[name].norm(), name


def test_micro_batch_size_does_not_change_gradients():
    """Single process: one micro-batch of 8 vs four of 2 give the same gradients (fixed normaliser)."""
    from reco_scaled.loss import StatSums
    from reco_scaled.model import PolicyModel
    from reco_scaled.trainer import accumulate_gradients

    grads = []
    for micro in (8, 2):
        lm, b = make_case()
        cfg = config("reco-token-mean")
        cfg.train.micro_batch_size = micro
        accumulate_gradients(PolicyModel(lm), cfg, b, torch.arange(B), StatSums(), 1)
        grads.append([p.grad for p in lm.parameters()])
    for g1, g2 in zip(*grads):
        torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)


def test_gradient_checkpointing_does_not_change_gradients():
    from reco_scaled.loss import StatSums
    from reco_scaled.model import PolicyModel
    from reco_scaled.trainer import accumulate_gradients

    grads = []
    for checkpointing in (False, True):
        lm, b = make_case()
        if checkpointing:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy = PolicyModel(lm).train()
        accumulate_gradients(policy, config("reco-token-mean"), b, torch.arange(B), StatSums(), 1)
        grads.append([p.grad for p in lm.parameters()])
    for g1, g2 in zip(*grads):
        torch.testing.assert_close(g1, g2, rtol=1e-5, atol=1e-7)


if __name__ == "__main__":
    torch.set_num_threads(1)
    worker(sys.argv[1])


def test_statistics_are_read_once_per_mini_batch_and_do_not_depend_on_micro_batches(monkeypatch):
    """No .item() (a device sync on a GPU) per micro-batch: the statistics stay tensors in StatSums until
    reduce; the one read in accumulate_gradients is the mini-batch loss. The reduced values are the same
    for one micro-batch of 8 and four of 2."""
    from reco_scaled.loss import StatSums
    from reco_scaled.model import PolicyModel
    from reco_scaled.trainer import accumulate_gradients

    reads, item = [], torch.Tensor.item
    reduced = []
    for micro in (8, 2):
        lm, b = make_case()
        cfg = config("reco-token-mean")
        cfg.train.micro_batch_size = micro
        stats = StatSums()
        monkeypatch.setattr(torch.Tensor, "item", lambda self, m=micro: reads.append(m) or item(self))
        accumulate_gradients(PolicyModel(lm), cfg, b, torch.arange(B), stats, 1)
        monkeypatch.setattr(torch.Tensor, "item", item)
        reduced.append(stats.reduce(torch.device("cpu")))
    assert reads == [8, 2]  # one read per mini-batch, however many micro-batches
    assert set(reduced[0]) == {"ratio_mean", "ratio_max", "clip_frac_high", "clip_frac_low", "approx_kl_old",
                               "rho_mean", "rho_max"}
    for k, v in reduced[0].items():
        assert reduced[1][k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
