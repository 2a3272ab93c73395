"""--lora-rank (issue 62): LoRA adapters through peft on a frozen base, in reco_mini's Hugging Face path.

A tiny random Qwen2 (Countdown's tiny_model, built here: no hub) trains with the real peft; rewards are the parity of a
response's length, so that groups have mixed rewards and the adapters get a gradient. The references are independent
of the LoRA path: the full model's first step, a separate frozen copy of the base, LoRA's closed-form gradient and
the reloaded export.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reco_mini
from reco import hf
from reco.tasks import TASKS
from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def parity_rewards(monkeypatch):
    """Reward 1 for a response of odd length: mixed rewards in a group of a random model."""
    monkeypatch.setattr(TASKS["countdown"], "rewards", lambda problems, texts: [float(len(t) % 2) for t in texts])


def config(**kw) -> reco_mini.Config:
    settings = dict(model="given", device="cpu", steps=1, prompts_per_step=4, group_size=4, epochs=1, minibatches=1,
                    n_train=8, n_test=4, max_new_tokens=8, lr=1e-2, lora_rank=4, lora_alpha=8.0, methods="grpo")
    return reco_mini.Config(**settings | kw)


def tiny_base(dtype=torch.float32):
    torch.manual_seed(0)
    tok = char_tokenizer()
    return tok, tiny_model(tok, hidden=32, layers=2).to(dtype).requires_grad_(False)


def train(cfg, model, reference, tok, run_dir: Path) -> list[dict]:
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    reco_mini.train_rl(cfg, "grpo", model, reference, tok, make_splits(cfg)["train"], run_dir)
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def lora_names(model) -> set[str]:
    return {name for name, _ in model.named_parameters() if "lora_" in name}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_only_the_adapters_train_and_the_base_stays_bit_identical(dtype, parity_rewards, tmp_path):
    tok, base = tiny_base(dtype)
    original = {k: v.clone() for k, v in base.state_dict().items()}
    cfg = config(steps=2, dtype="bfloat16" if dtype == torch.bfloat16 else "float32")
    model, reference = hf.policy(cfg, base)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == lora_names(model) and trainable  # the adapters, and only they
    assert all(p.dtype == torch.float32 for name, p in model.named_parameters() if name in trainable)
    assert all(p.dtype == dtype for name, p in model.named_parameters() if name not in trainable)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    train(cfg, model, reference, tok, tmp_path)
    after = dict(model.named_parameters())
    assert all(torch.equal(after[name], before[name]) for name in before if name not in trainable)
    assert any(not torch.equal(after[name], before[name]) for name in trainable if "lora_B" in name)
    frozen = {k.replace(".base_layer", ""): v for k, v in model.get_base_model().state_dict().items() if "lora_" not in k}
    assert frozen.keys() == original.keys() and all(torch.equal(frozen[k], v) for k, v in original.items())
    assert all(torch.equal(base.state_dict()[k], v) for k, v in original.items())  # the base it was copied from


def test_the_first_step_with_zero_adapters_logs_what_the_full_model_logs(parity_rewards, tmp_path):
    """B = 0: the LoRA policy is the base, so the first step's rollout, loss and statistics are the full model's
    (the KL term on, so the reference path counts too); only the gradient's parameters differ."""
    tok, base = tiny_base()
    rows = {}
    for rank in (0, 8):
        cfg = config(lora_rank=rank, kl_coef=0.1)
        model, reference = hf.policy(cfg, base)
        rows[rank] = train(cfg, model, reference, tok, tmp_path / str(rank))[0]
    full, lora = rows[0], rows[8]
    assert full["reward_mean"] not in (0.0, 1.0)  # mixed rewards: a loss with a gradient
    compared = [k for k in full if not k.startswith("time_") and k != "grad_norm" and isinstance(full[k], float)]
    assert {"loss", "ratio_mean", "kl_base", "entropy", "v_old_mean", "reward_mean"} <= set(compared)
    assert all(lora[k] == pytest.approx(full[k], rel=1e-6, abs=1e-7) for k in compared), \
        {k: (full[k], lora[k]) for k in compared if lora[k] != pytest.approx(full[k], rel=1e-6, abs=1e-7)}
    assert lora["grad_norm"] != pytest.approx(full["grad_norm"], rel=1e-3)


def test_gradient_checkpointing_trains_the_adapters_as_without_it(parity_rewards, tmp_path):
    """--gradient-checkpointing on the LoRA model (hf.training switches it on through peft's wrapper) recomputes
    layers whose base is frozen, and the adapters train as without it."""
    tok, base = tiny_base()
    adapters = {}
    for on in (False, True):
        cfg = config(gradient_checkpointing=on)
        torch.manual_seed(0)
        model, reference = hf.policy(cfg, base)
        before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
        with hf.training(model, on):
            assert model.get_base_model().model.gradient_checkpointing == on
        train(cfg, model, reference, tok, tmp_path / str(on))
        adapters[on] = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    moved = [n for n in before if not torch.equal(adapters[True][n], before[n])]
    assert moved and all(torch.allclose(adapters[True][n], adapters[False][n], rtol=1e-5, atol=1e-7) for n in before)


def test_the_adapters_gradient_is_lora_closed_form():
    """W' = W + (alpha / r) B A with B = 0: dL/dB = (alpha / r) dL/dW' A^T and dL/dA = 0, against the full model's
    dL/dW on the same loss (it fails if --lora-alpha does not reach peft)."""
    tok, base = tiny_base()
    cfg = config(lora_rank=4, lora_alpha=12.0, lora_targets="q_proj")
    model, _ = hf.policy(cfg, base)
    full = copy.deepcopy(base).requires_grad_(True)
    ids = torch.randint(4, len(tok), (3, 7), generator=torch.Generator().manual_seed(1))
    probe = torch.randn(3, 7, len(tok), generator=torch.Generator().manual_seed(2))
    for net in (model, full):
        (net(input_ids=ids).logits * probe).sum().backward()
    q = model.get_base_model().model.layers[0].self_attn.q_proj
    a, b = q.lora_A["default"].weight, q.lora_B["default"].weight
    expected = (12.0 / 4) * full.model.layers[0].self_attn.q_proj.weight.grad @ a.detach().T
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(b.grad, expected, rtol=1e-5, atol=1e-7)
    assert torch.count_nonzero(a.grad) == 0


@pytest.mark.parametrize("head_chunk", [0, 16])
def test_the_reference_with_adapters_off_equals_a_separate_frozen_copy(head_chunk, parity_rewards, tmp_path):
    tok, base = tiny_base()
    frozen = copy.deepcopy(base)
    cfg = config(steps=2, head_chunk=head_chunk)
    model, reference = hf.policy(cfg, base)
    train(cfg, model, reference, tok, tmp_path)
    r = reco_mini.rollout(cfg, model, tok, make_splits(cfg)["test"], n=2, gen=torch.Generator().manual_seed(3))
    seqs = (r["prompt_ids"], r["prompt_mask"], r["resp"], r["mask"])
    mask = r["mask"].bool()
    off, separate = reco_mini.old_stats(cfg, reference, seqs), reco_mini.old_stats(cfg, frozen, seqs)
    for got, want in zip(off, separate):
        torch.testing.assert_close(got[mask], want[mask], rtol=0, atol=1e-6)
    trained = reco_mini.old_stats(cfg, model, seqs)[0]
    assert (trained - separate[0])[mask].abs().max() > 1e-3  # outside the reference the adapters are on


def test_the_merged_export_reloads_and_samples_what_the_adapted_model_samples(parity_rewards, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tok, base = tiny_base()
    cfg = config(steps=2)
    model, reference = hf.policy(cfg, base)
    train(cfg, model, reference, tok, tmp_path)
    hf.save_lora(cfg, model, tok, tmp_path)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    adapters = PeftModel.from_pretrained(copy.deepcopy(base), tmp_path / "adapters")
    assert not any("lora_" in name for name, _ in merged.named_parameters())
    enc = tok([p.prompt for p in make_splits(cfg)["test"]], padding=True, return_tensors="pt")
    samples = {}
    for name, net in (("adapted", model), ("merged", merged), ("adapters", adapters), ("base", base)):
        gen = torch.Generator().manual_seed(5)
        samples[name] = hf.sample(net.eval(), enc.input_ids, enc.attention_mask, 24, 1.0, [tok.eos_token_id],
                                  tok.pad_token_id, gen)[0]
    assert torch.equal(samples["merged"], samples["adapted"]) and torch.equal(samples["adapters"], samples["adapted"])
    assert not torch.equal(samples["base"], samples["adapted"])  # the adapters changed the policy


@pytest.mark.parametrize("flags, message", [
    (["--lora-rank", "-1"], "--lora-rank must be >= 0, got -1"),
    (["--lora-rank", "4"], "--lora-rank needs --model (a Hugging Face model); the tiny model of --task countdown"),
    (["--lora-rank", "4", "--lora-alpha", "0"], "--lora-alpha must be > 0, got 0.0"),
    (["--lora-rank", "4", "--task", "math", "--model", "{model}", "--data", "{data}", "--lora-targets", "q_proj;v_proj"],
     "--lora-targets must be all-linear or comma-separated module names, got 'q_proj;v_proj'"),
    (["--lora-rank", "4", "--task", "math", "--model", "{model}", "--data", "{data}", "--lora-targets", "q_proj,qkv"],
     "--lora-targets qkv: Qwen2ForCausalLM has no linear layer of that name (its linear layers: down_proj,gate_proj,"),
])
def test_every_bad_lora_value_is_one_line_and_exit_2(flags, message, tmp_path):
    tok, base = tiny_base()
    base.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"problem": f"{a}+1", "answer": str(a + 1)}) + "\n"
                                              for a in range(10)))
    flags = [f.format(model=tmp_path / "model", data=tmp_path / "p.jsonl") for f in flags]
    proc = subprocess.run([sys.executable, str(ROOT / "reco_mini.py"), *flags, "--out", "run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert errors[0].startswith(f"reco_mini.py: error: {message}"), errors[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_reco_mini_math_with_lora_runs_on_cpu_and_writes_adapters_and_merged(tmp_path):
    """The issue's command: --task math, a tiny local model, --lora-rank 8, 2 steps; under --dtype bfloat16 the
    merged model keeps the base's bf16."""
    from transformers import AutoModelForCausalLM

    tok, base = tiny_base()
    base.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n"
                                              for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (2, 9)]))
    results = reco_mini.main(["--task", "math", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "p.jsonl"),
                              "--lora-rank", "8", "--steps", "2", "--methods", "grpo", "--prompts-per-step", "2",
                              "--n-eval", "2", "--max-new-tokens", "6", "--dtype", "bfloat16", "--kl-coef", "0.05",
                              "--out", str(tmp_path / "run")])
    assert set(results["methods"]) == {"base", "grpo"}
    run = tmp_path / "run" / "grpo"
    assert len((run / "log.jsonl").read_text().splitlines()) == 2
    assert (run / "adapters" / "adapter_config.json").is_file()
    assert json.loads((run / "adapters" / "adapter_config.json").read_text())["r"] == 8
    assert AutoModelForCausalLM.from_pretrained(run / "merged").dtype == torch.bfloat16
