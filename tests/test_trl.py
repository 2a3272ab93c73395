"""ReCoGRPOTrainer (reco_scaled/integrations/trl.py) against two independent references, on a tiny random Qwen2:

- GRPO equivalence: with every ReCo term off, loss and gradients equal TRL's own GRPOTrainer on the same batch;
- ReCo equivalence: with the terms on, they equal reco_mini.policy_loss + occurrence_weights computed here from full
  logits (reco_mini.token_logprobs, variance_stat), after a parameter update so that ratios and clips are live;
- a real run: 3 training steps end to end, with the rho and w statistics in TRL's logged metrics;
  and examples/trl_reco.py --tiny --max-steps 2.
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="TRL is not installed: pip install -r requirements-trl.txt (CI does)")

from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from reco.tasks.countdown import char_tokenizer, tiny_model  # noqa: E402
from reco_mini import (  # noqa: E402
    LossConfig,
    focal_scale,
    group_advantages,
    loss_config,
    occurrence_weights,
    policy_loss,
    token_logprobs,
    variance_stat,
)
from reco_scaled.integrations.trl import ReCoGRPOConfig, ReCoGRPOTrainer, add_reco_stats, stats_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["3 5 7:", "12 4 9:", "8 2 6:", "1 9 5:"]
P, G, MAX_LEN, ACCUM = 2, 4, 6, 2
REWARDS = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])


def toy_reward(completions, **kwargs) -> list[float]:
    return [float(len(c) % 2 == 0) for c in completions]  # any mix of 0 and 1


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread, as reco_scaled uses on CPU: on shared cores a tiny model runs far slower with more."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random tiny Qwen2 with reco_mini's character tokenizer. Its final norm is scaled up, so next-token
    distributions are peaked: greedy responses are likely and the occurrence weights move well away from 1."""
    torch.manual_seed(0)
    tok = char_tokenizer()
    model = tiny_model(tok, hidden=32, layers=2)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)
    path = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_trainer(trainer_cls, config_cls, model_dir, out, **kwargs):
    args = config_cls(**dict(output_dir=str(out), report_to="none", bf16=False, use_cpu=True, seed=0, num_generations=G,
                             per_device_train_batch_size=P * G, gradient_accumulation_steps=ACCUM,
                             max_completion_length=MAX_LEN, logging_steps=1, save_strategy="no", disable_tqdm=True,
                             gradient_checkpointing=False) | kwargs)
    trainer = trainer_cls(model=str(model_dir), reward_funcs=toy_reward, args=args, processing_class=
                          AutoTokenizer.from_pretrained(model_dir), train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = ACCUM  # set by Trainer's loop; the normalisers read it
    return trainer


def fixed_batch(model, tok) -> dict:
    """TRL's batch layout for P prompts x G responses. In each group: two identical greedy responses (likely, a
    duplicate), a greedy prefix plus a fixed token, and a short unlikely one; right-padded, some without <eos>."""
    prompts = [tok(p).input_ids for p in PROMPTS[:P]]
    L = max(map(len, prompts))
    prompt_ids = torch.tensor([[tok.pad_token_id] * (L - len(p)) + p for p in prompts])
    prompt_mask = (torch.arange(L) >= torch.tensor([L - len(p) for p in prompts])[:, None]).long()
    rows = []
    for i in range(P):
        greedy, ids, attn = [], prompt_ids[i: i + 1], prompt_mask[i: i + 1]
        with torch.no_grad():
            for _ in range(4):
                nxt = model(input_ids=ids, attention_mask=attn).logits[0, -1].argmax().item()
                greedy.append(nxt)
                ids, attn = torch.cat([ids, torch.tensor([[nxt]])], 1), torch.cat([attn, torch.ones(1, 1).long()], 1)
        rows += [greedy, greedy, greedy[:2] + [7, tok.eos_token_id], [9, 12, tok.eos_token_id]]
    completion_ids = torch.tensor([r + [tok.pad_token_id] * (MAX_LEN - len(r)) for r in rows])
    completion_mask = torch.tensor([[1] * len(r) + [0] * (MAX_LEN - len(r)) for r in rows])
    return {"prompt_ids": prompt_ids.repeat_interleave(G, 0), "prompt_mask": prompt_mask.repeat_interleave(G, 0),
            "completion_ids": completion_ids, "completion_mask": completion_mask,
            "advantages": group_advantages(REWARDS.view(P, G)).flatten(), "num_items_in_batch": completion_mask.sum()}


def response_logits(model, batch: dict) -> torch.Tensor:
    """Full logits at the positions that predict each completion token: [B, T, V] (the model called as TRL does)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    return model(input_ids=ids, attention_mask=attn).logits[:, -MAX_LEN - 1: -1]


def loss_and_grads(trainer, batch: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    loss = trainer._compute_loss(trainer.model, batch)
    return loss.detach(), list(torch.autograd.grad(loss, params))


def assert_same(a: tuple, b: tuple) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-6)
    for ga, gb in zip(a[1], b[1], strict=True):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("settings", [
    {"loss_type": "dapo"},
    {"loss_type": "grpo"},
    {"loss_type": "bnpo", "epsilon_high": 0.28},
    {"loss_type": "dr_grpo"},
    {"loss_type": "dapo", "delta": 1.5, "temperature": 0.7},
    {"loss_type": "dapo", "beta": 0.1, "use_bias_correction_kl": False},
    {"loss_type": "grpo", "off_policy_mask_threshold": 0.05},
], ids=["dapo", "grpo", "bnpo", "dr_grpo", "delta-temperature", "kl", "off-policy-mask"])
def test_grpo_equals_trl(model_dir, tmp_path, settings):
    ours = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path / "ours", method="grpo", **settings)
    theirs = make_trainer(GRPOTrainer, GRPOConfig, model_dir, tmp_path / "trl", **settings)
    tau = settings.get("temperature", 1.0)
    batch = fixed_batch(theirs.model, theirs.processing_class)
    with torch.no_grad():
        logp = token_logprobs(response_logits(theirs.model, batch), batch["completion_ids"], tau)
    noise = torch.randn(logp.shape, generator=torch.Generator().manual_seed(1))
    batch["old_per_token_logps"] = logp + 0.3 * noise  # a reused batch: ratios spread across both clip edges
    batch["ref_per_token_logps"] = logp - 0.2 * noise
    got, want = loss_and_grads(ours, batch), loss_and_grads(theirs, batch)
    assert_same(got, want)
    assert ours._metrics["train"]["clip_ratio/region_mean"][-1] > 0.1  # the clip is live in this batch
    torch.testing.assert_close(ours._metrics["train"]["clip_ratio/region_mean"][-1],
                               theirs._metrics["train"]["clip_ratio/region_mean"][-1])


# (TRL/ReCo config, the reco_mini LossConfig it must mean, the normaliser of its loss_type) on P*G rows, ACCUM steps
CASES = [
    ({"method": "reco"}, {}, {"num_tokens": "tokens"}),  # the defaults: group-normalised weights on every response
    ({"method": "reco", "occurrence_norm": "batch", "occurrence_apply": "positive"},  # the default from issue 52 to 59
     {"occurrence_norm": "batch", "occurrence_apply": "positive"}, {"num_tokens": "tokens"}),
    ({"method": "reco", "occurrence": "count", "occurrence_apply": "positive", "loss_type": "grpo",
      "temperature": 0.7}, {"occurrence": "count", "occurrence_apply": "positive",
                            "aggregation": "seq-mean-token-mean"}, {"num_seqs": P * G * ACCUM}),
    ({"method": "reco", "occurrence": "token-mean", "token_ratio": "variance-old", "variance_norm": "none",
      "focal_gamma": 1.0, "loss_type": "bnpo", "epsilon_high": 0.28, "delta": 2.0},
     {"occurrence": "token-mean", "token_ratio": "variance-old", "variance_norm": "none", "focal_gamma": 1.0,
      "clip_high": 0.28, "dual_clip": 2.0}, {"num_tokens": "tokens x accum"}),
    ({"method": "reco-token", "variance_cap": 1.2, "loss_type": "dr_grpo", "beta": 0.05,
      "use_bias_correction_kl": False}, {"variance_cap": 1.2, "kl_coef": 0.05}, {"num_tokens": P * G * MAX_LEN * ACCUM}),
    ({"method": "f-grpo", "loss_type": "dapo"}, {}, {"num_tokens": "tokens"}),
    ({"method": "reco", "occurrence": "count", "occurrence_norm": "batch", "occurrence_apply": "positive"},
     {"occurrence": "count", "occurrence_norm": "batch", "occurrence_apply": "positive"}, {"num_tokens": "tokens"}),
    # the ZeRO-3 path (the model's own logits, chunked over tokens; 7 does not divide the 48 tokens of a batch)
    ({"method": "reco", "occurrence": "token-mean", "token_ratio": "variance-old", "reco_stats_path": "gathered",
      "reco_stats_chunk": 7}, {"occurrence": "token-mean", "token_ratio": "variance-old"}, {"num_tokens": "tokens"}),
]


@pytest.mark.parametrize("settings, expected, norm", CASES, ids=["reco", "reco-group-all", "count-positive-grpo",
                         "token-mean-variance-old-focal", "cap-kl-dr_grpo", "f-grpo", "count-batch-norm-positive",
                         "gathered-token-mean-variance-old"])
def test_reco_equals_reco_mini(model_dir, tmp_path, settings, expected, norm):
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, **settings)
    model, tau = trainer.model, settings.get("temperature", 1.0)
    batch = fixed_batch(model, trainer.processing_class)
    with torch.no_grad():
        logits_old = response_logits(model, batch)
    old_logp = token_logprobs(logits_old, batch["completion_ids"], tau)
    batch.update(trainer._reco_inputs(batch, REWARDS))  # at sampling time
    batch["old_per_token_logps"] = old_logp  # as TRL passes it when a batch is reused
    batch["ref_per_token_logps"] = old_logp - 0.1 * torch.randn(old_logp.shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():  # an update since sampling: ratios move off 1 and the clip bites
        for p in model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    got = loss_and_grads(trainer, batch)

    # the reference: reco_mini's functions on full logits
    cfg = loss_config(LossConfig(**expected), settings["method"])
    mask = batch["completion_mask"].float()
    responses = [r[: int(n)].tolist() for r, n in zip(batch["completion_ids"], mask.sum(-1))]
    A = group_advantages(REWARDS.view(P, G)) * focal_scale(REWARDS.view(P, G), cfg.focal_gamma)[:, None]
    w = occurrence_weights((old_logp * mask).sum(-1).view(P, G), cfg.occurrence, responses, mask.sum(-1).view(P, G), A,
                           cfg.occurrence_apply, norm=cfg.occurrence_norm).flatten()
    v_old = variance_stat(logits_old, tau)
    v_old_mean = (v_old * mask).sum() / mask.sum() if cfg.variance_norm == "batch" else torch.tensor(1.0)
    logits = response_logits(model, batch)
    logp = token_logprobs(logits, batch["completion_ids"], tau)
    ref = {"old_logp": old_logp, "mask": mask, "advantages": A.flatten(), "weights": w, "v_old": v_old,
           "v_old_mean": v_old_mean, "ref_logp": batch["ref_per_token_logps"]}
    tokens = {"tokens": mask.sum(), "tokens x accum": mask.sum() * ACCUM}
    kw = {k: tokens.get(v, v) for k, v in norm.items()}
    loss, stats = policy_loss(logp, ref, cfg, v=variance_stat(logits.detach(), tau), **kw)
    params = [p for p in model.parameters() if p.requires_grad]
    assert_same(got, (loss.detach(), list(torch.autograd.grad(loss, params))))

    # the batch is not a trivial one: clipping is live, and each ReCo term that is on moves values away from 1
    assert stats["clip_frac_high"] + stats["clip_frac_low"] > 0.05
    if cfg.occurrence != "none":
        torch.testing.assert_close(batch["reco_weights"], w)
        assert w.max() / w.min() > 1.15
    if cfg.token_ratio != "is":
        assert stats["rho_max"] > 1.1 * stats["rho_mean"]
    if "variance_cap" in expected:
        assert stats["rho_max"] == pytest.approx(cfg.variance_cap)  # the cap binds
    if cfg.focal_gamma:
        assert not torch.equal(batch["advantages"], group_advantages(REWARDS.view(P, G)).flatten())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gathered_stats_equal_fused(model_dir, temperature):
    """The ZeRO-3 path (model logits, chunked) against the fused kernel on the same left-padded batch: log pi, V and
    H agree, and so do the gradients of a loss through log pi, for every parameter (the tied head included)."""
    from transformers import AutoModelForCausalLM

    tok = AutoTokenizer.from_pretrained(model_dir)
    batch = fixed_batch(AutoModelForCausalLM.from_pretrained(model_dir), tok)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    a = torch.randn(ids.shape[0], MAX_LEN, generator=torch.Generator().manual_seed(3))
    outs = {}
    for path in ("fused", "gathered"):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        add_reco_stats(model, temperature, fp32_head=False, path=path, chunk=5)
        head_calls = []  # ZeRO-3 gathers the head's weight only inside its module call: the gathered path makes one
        model.get_output_embeddings().register_forward_hook(lambda *args, calls=head_calls: calls.append(1))
        logp, v, h = model(input_ids=ids, attention_mask=attn, reco_stats=MAX_LEN)
        assert len(head_calls) == (path == "gathered")
        assert not v.requires_grad and not h.requires_grad
        (a * logp).sum().backward()
        outs[path] = (logp.detach(), v, h, {n: p.grad for n, p in model.named_parameters()})
    (logp, v, h, grads), (logp2, v2, h2, grads2) = outs["fused"], outs["gathered"]
    mask = batch["completion_mask"].bool()
    assert (logp2[~mask] == 0).all() and (v2[~mask] == 0).all() and (h2[~mask] == 0).all()
    for x, y in ((logp, logp2), (v, v2), (h, h2)):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
    assert grads.keys() == grads2.keys()
    for name in grads:
        torch.testing.assert_close(grads2[name], grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_stats_path_is_gathered_under_zero3_only():
    assert stats_path("auto", 3) == "gathered" and stats_path("auto", 2) == "fused" and stats_path("auto", None) == "fused"
    assert stats_path("gathered", None) == "gathered"
    with pytest.raises(ValueError, match="ZeRO-3"):
        stats_path("fused", 3)


@pytest.mark.parametrize("settings, message", [
    ({"loss_type": "cispo"}, "loss_type='cispo'"),
    ({"importance_sampling_level": "sequence"}, "importance_sampling_level"),
    ({"beta": 0.1}, "use_bias_correction_kl"),
    ({"delta": 1.1}, "delta=1.1"),
    ({"entropy_coef": 0.01}, "entropy bonus"),
    ({"occurrence": "bogus"}, "occurrence: must be one of"),
    ({"occurrence": "canonical"}, "occurrence='canonical'"),
    ({"token_ratio": "simko"}, "token_ratio='simko'"),
    ({"epsilon": 1.5}, "epsilon: must be in (0, 1)"),
    ({"method": "ppo"}, "method='ppo'"),
    ({"reco_stats_path": "dense"}, "reco_stats_path='dense'"),
])
def test_refused_settings_fail_at_start(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ReCoGRPOConfig(output_dir=str(tmp_path), report_to="none", bf16=False, use_cpu=True, **settings)


def test_three_steps_log_rho_and_w(model_dir, tmp_path):
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco", occurrence="count",
                           occurrence_apply="all", max_steps=3, num_iterations=2, gradient_checkpointing=True)
    trainer.train()
    rows = [r for r in trainer.state.log_history if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert math.isfinite(r["loss"]) and r["reco/rho_mean"] > 0 and r["reco/rho_max"] <= 10.0
    generated = [r for r in rows if "reco/w_mean" in r]  # a generation batch every num_iterations steps: 1 and 3
    assert [r["step"] for r in generated] == [1, 3]
    for r in generated:
        assert r["reco/w_min"] <= r["reco/w_mean"] <= r["reco/w_max"]
        assert r["reco/w_mean"] == pytest.approx(1.0, abs=1e-6)  # mean 1 over the generation batch (norm batch)
        assert 0 < r["reco/v_old_mean"] < 1


def test_example_tiny_runs(tmp_path, capsys):
    path = Path(__file__).resolve().parents[1] / "examples" / "trl_reco.py"
    spec = importlib.util.spec_from_file_location("trl_reco", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    last = example.main(["--tiny", "--max-steps", "2", "--out", str(tmp_path)])
    assert last["step"] == 2 and math.isfinite(last["loss"]) and "reco/rho_mean" in last
    assert (tmp_path / "final" / "config.json").is_file()
    assert capsys.readouterr().out.splitlines()[-1] == f"saved the final model (Hugging Face format) to {tmp_path / 'final'}"


def test_example_code_reward_reads_the_tests_column_and_runs(tmp_path):
    """examples/trl_reco.py --task code: its code_reward, called as TRL calls a reward function (prompts, completions
    and the dataset's columns as keywords), pays only a passing program, for text and chat completions; one step runs."""
    import json

    from tiny_code_model import MBPP_ROW

    path = Path(__file__).resolve().parents[1] / "examples" / "trl_reco.py"
    spec = importlib.util.spec_from_file_location("trl_reco", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    data = tmp_path / "mbpp.jsonl"
    data.write_text(json.dumps(MBPP_ROW) + "\n")
    row = example.code_dataset(str(data), "plain")[0]
    assert set(row) == {"prompt", "tests", "entry_point"} and row["entry_point"] == "add2"
    completions = ["def add2(a, b):\n    return a + b\nprint(add2(1, 2))", "def add2(a, b):\n    return a - b\n", "def add2(:"]
    assert example.code_reward(prompts=[row["prompt"]] * 3, completions=completions, tests=[row["tests"]] * 3,
                               entry_point=["add2"] * 3, completion_ids=[[1]] * 3) == [1.0, 0.0, 0.0]
    chat = example.code_dataset(str(data), "chat")[0]
    answer = [{"role": "assistant", "content": "```python\ndef add2(a, b):\n    return a + b\n```"}]
    assert example.code_reward(prompts=[chat["prompt"]], completions=[answer], tests=[chat["tests"]],
                               entry_point=["add2"]) == [1.0]
    last = example.main(["--tiny", "--task", "code", "--data", str(data), "--max-steps", "1", "--prompts-per-step", "1",
                         "--num-generations", "2", "--out", str(tmp_path / "run")])
    assert last["step"] == 1 and last["rewards/code_reward/mean"] == 0.0  # a random model's programs fail


# ------------------------------------------------------------------ the batch of the batch mean: every row the loss keeps

BATCH = {"occurrence_norm": "batch", "occurrence_apply": "positive"}  # the weights whose mean spans the batch


def sequence_weights(seq_logp: torch.Tensor, advantages: torch.Tensor, kept: torch.Tensor | None = None) -> torch.Tensor:
    """batch/positive weights in closed form (docs/design.md §3.2), written here in plain tensor ops: m = 1 + (G - 1) p,
    w = (1/m) / the mean of 1/m over the kept rows, applied where A > 0 (1 elsewhere)."""
    inv_m = 1.0 / (1.0 + (G - 1) * seq_logp.double().exp())
    kept = torch.ones_like(inv_m, dtype=torch.bool) if kept is None else kept
    return torch.where(advantages > 0, inv_m / inv_m[kept].mean(), 1.0)


def old_seq_logp(model, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        logp = token_logprobs(response_logits(model, batch), batch["completion_ids"])
    return (logp * batch["completion_mask"]).sum(-1)


def test_masked_truncated_completions_take_no_part_in_the_batch_mean(model_dir, tmp_path):
    """With mask_truncated_completions, TRL zeroes a truncated row's completion_mask; such a row counted in the mean
    at 1/G, so the mean fell and the kept rows' weights rose (issue 60)."""
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco",
                           mask_truncated_completions=True, **BATCH)
    batch = fixed_batch(trainer.model, trainer.processing_class)
    eos = trainer.processing_class.eos_token_id
    truncated = ~(batch["completion_ids"] == eos).any(-1)  # the greedy rows: no <eos> within MAX_LEN
    assert 0 < truncated.sum() < len(truncated)
    batch["completion_mask"] = batch["completion_mask"] * (~truncated)[:, None]  # as TRL masks them
    got = trainer._reco_inputs(batch, REWARDS)["reco_weights"]
    seq, A = old_seq_logp(trainer.model, batch), batch["advantages"]
    torch.testing.assert_close(got, sequence_weights(seq, A, ~truncated).float(), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, sequence_weights(seq, A).float(), rtol=1e-3)  # counting them would differ


def test_gradient_accumulation_weighs_over_the_whole_generation_batch(model_dir, tmp_path):
    """Two micro-batches of one group each make one generation batch: the loss sees weights whose mean is over both
    (reco_mini's closed form on the whole batch), not over its own micro-batch."""
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco",
                           per_device_train_batch_size=G, max_steps=1, **BATCH)
    seen, compute_loss = [], trainer._compute_loss

    def recording(model, inputs):  # the parameters change only after both micro-batches
        seen.append({k: inputs[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                                            "advantages", "reco_weights")} | {"seq": old_seq_logp(model, inputs)})
        return compute_loss(model, inputs)

    trainer._compute_loss = recording
    trainer.train()
    assert len(seen) == ACCUM and all(len(s["advantages"]) == G for s in seen)
    seq, A = (torch.cat([s[k] for s in seen]) for k in ("seq", "advantages"))
    got = torch.cat([s["reco_weights"] for s in seen])
    torch.testing.assert_close(got, sequence_weights(seq, A).float(), rtol=1e-5, atol=1e-6)
    per_micro_batch = torch.cat([sequence_weights(s["seq"], s["advantages"]) for s in seen]).float()
    assert not torch.allclose(got, per_micro_batch, rtol=1e-3)  # the test tells the two scopes apart


def test_two_processes_weigh_over_the_whole_generation_batch(model_dir, tmp_path):
    """Under torchrun (gloo), each of two processes holds one group whose mean 1/m differs from the other's; every
    process's weights must be reco_mini's closed form over both groups. A plugin whose gather is the identity, so
    that each process takes its own mean, fails here."""
    out = tmp_path / "w.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           str(model_dir), str(tmp_path / "run"), str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = torch.load(out)
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path / "one", method="reco", **BATCH)
    batch = fixed_batch(trainer.model, trainer.processing_class)
    seq, A = old_seq_logp(trainer.model, batch), batch["advantages"]
    inv_m = 1.0 / (1.0 + (G - 1) * seq.exp())
    assert abs(inv_m[:G].mean() - inv_m[G:].mean()) > 0.01  # the processes' own means differ (by 2%)
    torch.testing.assert_close(got, sequence_weights(seq, A).float(), rtol=1e-5, atol=1e-6)


def two_process_worker(model_dir: str, out_dir: str, out: str) -> None:
    """One process of the test above: its half of fixed_batch's rows; rank 0 saves every process's weights."""
    trainer = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, Path(model_dir), Path(out_dir), method="reco", **BATCH)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    batch = fixed_batch(trainer.model, trainer.processing_class)
    rows = slice(rank * G, (rank + 1) * G)
    mine = {k: v[rows] if torch.is_tensor(v) and v.dim() else v for k, v in batch.items()}
    w = trainer._reco_inputs(mine, REWARDS)["reco_weights"]
    parts = [torch.zeros_like(w) for _ in range(world)]
    torch.distributed.all_gather(parts, w)
    if rank == 0:
        torch.save(torch.cat(parts), out)
    trainer.accelerator.wait_for_everyone()


def test_a_resume_under_another_loss_is_refused(model_dir, tmp_path):
    """A checkpoint written with batch-normalised positive-only weights, resumed with the defaults (group, all), would
    go on under another objective: refused, naming each changed setting."""
    first = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco", **BATCH, max_steps=1,
                         save_strategy="steps", save_steps=1)
    first.train()
    again = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco", max_steps=2)
    with pytest.raises(ValueError, match="another loss") as e:
        again.train(resume_from_checkpoint=True)
    assert "occurrence_norm='batch' there, 'group' here" in str(e.value)
    assert "occurrence_apply='positive' there, 'all' here" in str(e.value)
    same = make_trainer(ReCoGRPOTrainer, ReCoGRPOConfig, model_dir, tmp_path, method="reco", **BATCH, max_steps=2)
    same.train(resume_from_checkpoint=True)  # the same loss resumes
    assert same.state.global_step == 2


if __name__ == "__main__":
    torch.set_num_threads(1)
    two_process_worker(*sys.argv[1:])
