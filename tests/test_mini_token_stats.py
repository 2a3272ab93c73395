"""hf.token_stats, the memory-saving path: log pi(y_t), V(s_t), H(s_t) slice by slice, against the readable
token_logprobs, variance_stat and token_entropy that reco_mini runs by default (bit for bit in float32) and against
float64 references written here from the definitions, values and gradients of log pi. With an lm head
(--head-chunk), from hidden states: against the logits it makes in one product, values and gradients (hidden states
and head weight), and on a model, reco_mini.policy_stats' two paths against each other (as llm.c tests its fast path
against its reference)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reco import hf
from reco_mini import token_entropy, token_logprobs, token_stats, variance_stat


def _logits(B=3, T=7, V=50, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = (3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).to(dtype)
    z[0, 0, 0] = 40.0  # one near-deterministic position
    return z, torch.randint(V, (B, T), generator=g)


@pytest.mark.parametrize("chunk", [1, 4, 7, 10_000])  # one position per slice, uneven slices, one slice
@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_float32_equals_todays_functions_bit_for_bit(chunk, tau):
    z, y = _logits()
    logp, v, h = token_stats(z, y, tau, chunk)
    assert torch.equal(logp, token_logprobs(z, y, tau))
    assert torch.equal(v, variance_stat(z, tau))
    assert torch.equal(h, token_entropy(z, tau))
    leaf = z.clone().requires_grad_(True)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    (grad,) = torch.autograd.grad((token_stats(leaf, y, tau, chunk)[0] * weights).sum(), leaf)
    (ref,) = torch.autograd.grad((token_logprobs(leaf, y, tau) * weights).sum(), leaf)
    assert torch.equal(grad, ref)


@pytest.mark.parametrize("chunk", [1, 5, 10_000])
def test_float64_against_the_definitions(chunk):
    z, y = _logits(dtype=torch.float64)
    tau = 0.7
    leaf = z.clone().requires_grad_(True)
    logp, v, h = token_stats(leaf, y, tau, chunk)
    assert logp.dtype == v.dtype == h.dtype == torch.float64
    p = torch.exp(z / tau - torch.logsumexp(z / tau, -1, keepdim=True))  # the definitions, in float64
    torch.testing.assert_close(v, (p * (1 - p)).sum(-1), rtol=0, atol=1e-13)
    torch.testing.assert_close(v, variance_stat(z, tau), rtol=0, atol=1e-13)  # today's, float64 in float64
    torch.testing.assert_close(h, -(p * p.log()).sum(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(h, token_entropy(z, tau).double(), rtol=0, atol=2e-5)  # today's computes in float32
    torch.testing.assert_close(logp, p.gather(-1, y[..., None]).squeeze(-1).log(), rtol=0, atol=1e-12)
    torch.testing.assert_close(logp, token_logprobs(z, y, tau).double(), rtol=0, atol=2e-5)
    assert not v.requires_grad and not h.requires_grad
    weights = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (grad,) = torch.autograd.grad((logp * weights).sum(), leaf)
    onehot = F.one_hot(y, z.shape[-1]).double()
    torch.testing.assert_close(grad, weights[..., None] * (onehot - p) / tau, rtol=0, atol=1e-13)  # d log p_y / dz


def test_bfloat16_logits_are_upcast_once_and_match_todays_functions():
    z, y = _logits(dtype=torch.bfloat16)
    logp, v, h = token_stats(z, y, 1.0, 4)
    assert logp.dtype == v.dtype == h.dtype == torch.float32
    assert torch.equal(logp, token_logprobs(z, y)) and torch.equal(v, variance_stat(z)) and torch.equal(h, token_entropy(z))
    leaf = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(token_stats(leaf, y, 1.0, 4)[0].sum(), leaf)
    (ref,) = torch.autograd.grad(token_logprobs(leaf, y).sum(), leaf)
    assert grad.dtype == torch.bfloat16 and torch.equal(grad, ref)


def test_the_backward_pass_recomputes_each_slice_instead_of_keeping_it():
    """What autograd keeps for backward: today's token_logprobs keeps an fp32 [B, T, V] log-softmax;
    token_stats keeps only views of the logits (the checkpointed slices' inputs)."""
    z, y = _logits(B=2, T=16, V=64, dtype=torch.bfloat16)
    leaf = z.clone().requires_grad_(True)
    kept = []

    def pack(t):
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_logprobs(leaf, y)
    assert any(t.dtype == torch.float32 and t.shape == z.shape for t in kept)
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_stats(leaf, y, 1.0, 8)
    assert not any(t.dtype == torch.float32 and t.numel() >= 8 * 64 for t in kept)


@pytest.mark.parametrize("chunk", [1, 6, 10_000])
def test_head_slices_equal_the_full_logits_in_float64(chunk):
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(3, 7, 16, dtype=torch.float64, generator=g).requires_grad_(True)
    head = torch.nn.Linear(16, 50, bias=False).double()
    y = torch.randint(50, (3, 7), generator=g)
    weights = torch.randn(3, 7, dtype=torch.float64, generator=g)
    logp, v, h = token_stats(hidden, y, 0.7, chunk, head)
    z = hidden @ head.weight.T  # the reference: one product, then the definitions
    p = torch.softmax(z / 0.7, -1)
    torch.testing.assert_close(v, (p * (1 - p)).sum(-1), rtol=0, atol=1e-13)
    torch.testing.assert_close(h, -(p * p.log()).sum(-1), rtol=0, atol=1e-12)
    torch.testing.assert_close(logp, p.gather(-1, y[..., None]).squeeze(-1).log(), rtol=0, atol=1e-12)
    grads = torch.autograd.grad((logp * weights).sum(), (hidden, head.weight))
    refs = torch.autograd.grad((p.gather(-1, y[..., None]).squeeze(-1).log() * weights).sum(), (hidden, head.weight))
    for grad, ref in zip(grads, refs):
        torch.testing.assert_close(grad, ref, rtol=0, atol=1e-12)


def test_head_slices_keep_no_vocabulary_sized_tensor_for_backward():
    hidden = torch.randn(2, 16, 8).requires_grad_(True)
    head = torch.nn.Linear(8, 64, bias=False)
    kept = []

    def pack(t):
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp, _, _ = token_stats(hidden, torch.randint(64, (2, 16)), 1.0, 8, head)
    assert logp.requires_grad and kept and not any(t.shape[-1] == 64 and t.numel() > 64 * 8 for t in kept)


def test_the_memory_saving_path_equals_the_readable_one_on_a_model():
    """policy_stats with --head-chunk 5 (decoder, then the lm head on slices of 5 row-tokens, hf.token_stats)
    against --head-chunk 0 (one forward to the logits, then token_logprobs, variance_stat and token_entropy), on left-
    padded rollout rows of a tiny model in float64: the statistics, and the gradient of log pi on every weight."""
    from reco.tasks.countdown import char_tokenizer, tiny_model
    from reco_mini import Config, policy_stats

    torch.manual_seed(0)
    model = tiny_model(char_tokenizer(), 32, 2).double()
    g = torch.Generator().manual_seed(1)
    prompt_ids, resp = torch.randint(3, 20, (4, 6), generator=g), torch.randint(3, 20, (4, 5), generator=g)
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6, [0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]])
    resp_mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    seqs, rows, weights = (prompt_ids, prompt_mask, resp, resp_mask), torch.tensor([0, 2, 3]), torch.randn(3, 5, generator=g)
    out = {}
    for chunk in (0, 5):
        model.zero_grad()
        logp, v, h, logits = policy_stats(Config(head_chunk=chunk, device="cpu"), model, seqs, rows, entropy=True)
        assert (logits is None) == (chunk > 0)  # the memory-saving path keeps no logits
        (logp * weights.double()).sum().backward()
        out[chunk] = (logp, v, h, [p.grad.clone() for p in model.parameters()])
    for readable, sliced in zip(out[0][:3], out[5][:3]):
        torch.testing.assert_close(sliced, readable, rtol=0, atol=1e-12)
    for readable, sliced in zip(out[0][3], out[5][3]):
        torch.testing.assert_close(sliced, readable, rtol=0, atol=1e-12)


def test_check_lm_head_refuses_a_model_whose_logits_are_more_than_the_head():
    """A logit scale (as Cohere has) or a soft cap (Gemma 2) after the head would be lost by --head-chunk."""
    from reco.tasks.countdown import char_tokenizer, tiny_model

    model = tiny_model(char_tokenizer(), 32, 1)
    hf.check_lm_head(model)
    forward = model.forward
    model.forward = lambda *a, **k: type("Out", (), {"logits": 1.5 * forward(*a, **k).logits})()
    with pytest.raises(ValueError, match="--head-chunk 0"):
        hf.check_lm_head(model)
    model.get_decoder = None  # no decoder to call apart: the same one-line refusal, not an AttributeError
    with pytest.raises(ValueError, match="no decoder and lm head"):
        hf.check_lm_head(model)
