"""The HF rollout engine: per-sample seeds, sampler log-probs, top-p, EOS handling and weight sync."""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

from reco.tasks.countdown import char_tokenizer, tiny_model
from reco_scaled.loss import collate
from reco_scaled.model import PolicyModel
from reco_scaled.rollout.hf_engine import HFEngine

PROMPTS = [[1, 4, 5, 21, 6], [1, 7, 21, 8, 9, 23], [1, 10, 11]]  # different lengths: left padding is exercised


@pytest.fixture(scope="module")
def setup():
    tok = char_tokenizer()
    torch.manual_seed(0)
    lm = tiny_model(tok, hidden=32, layers=2)
    engine = HFEngine(copy.deepcopy(lm), eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id, batch_size=4)
    return tok, lm, engine


def test_samples_do_not_depend_on_the_rest_of_the_batch(setup):
    _, _, engine = setup
    both = engine.generate(PROMPTS, 3, max_new_tokens=10, seed=100)
    alone = engine.generate(PROMPTS[1:2], 3, max_new_tokens=10, seed=103)  # prompt 1 starts at row 3
    assert both.response_ids[3:6] == alone.response_ids
    flat = [x for lp in both.sampler_logprobs[3:6] for x in lp]
    assert flat == pytest.approx([x for lp in alone.sampler_logprobs for x in lp], abs=1e-5)
    assert engine.generate(PROMPTS, 3, max_new_tokens=10, seed=100).response_ids == both.response_ids
    assert engine.generate(PROMPTS, 3, max_new_tokens=10, seed=7).response_ids != both.response_ids


def test_responses_stop_at_eos_and_log_probs_match_the_trainer(setup):
    tok, lm, engine = setup
    ro = engine.generate(PROMPTS, 4, temperature=0.7, max_new_tokens=12, seed=1)
    for r in ro.response_ids:
        assert tok.eos_token_id not in r[:-1] and (r[-1] == tok.eos_token_id or len(r) == 12)
    batch, sampler_logp = collate(ro, tok.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        logp, _, _ = PolicyModel(lm)(batch["prompt_ids"], batch["prompt_mask"], batch["resp"], batch["mask"], 0.7)
    mask = batch["mask"].bool()
    torch.testing.assert_close(logp[mask], sampler_logp[mask], rtol=0, atol=1e-5)


def test_each_row_is_the_inverse_cdf_draw_of_its_own_uniforms(setup):
    """Issue 32 item 8, the batched equivalent of one generator per row: token t of row r is the first token whose
    cumulative probability (under the model, teacher-forced without a KV cache) exceeds u_t times the total, where
    u = torch.rand(T, float64) of a generator seeded with seed + r. The reference is a Python loop per row; before
    the fix each row called multinomial once per token (about two host syncs per row per token)."""
    tok, lm, engine = setup
    T, seed, temperature = 8, 11, 0.9
    ro = engine.generate(PROMPTS, 2, temperature=temperature, max_new_tokens=T, seed=seed)
    drawn = 0
    for r, (prompt, response) in enumerate(zip(ro.prompt_ids, ro.response_ids)):
        u = torch.rand(T, generator=torch.Generator().manual_seed(seed + r), dtype=torch.float64).tolist()
        with torch.no_grad():
            logits = lm(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1:]
        want = []
        for t in range(len(response)):
            probs = torch.softmax(logits[t].double() / temperature, -1).tolist()
            k = next(k for k, c in enumerate(itertools.accumulate(probs)) if c > u[t] * sum(probs))
            want.append(k)
            if k == tok.eos_token_id:
                break
        assert response == want, r
        drawn += len(response)
    assert drawn > len(ro.response_ids)  # more than one token per row on average


def test_batched_draw_frequencies_match_the_nucleus_distribution():
    """The inverse-CDF draw against closed-form probabilities: 20,000 rows of the same logits, u of a fixed seed;
    every count within 5 standard deviations of its expectation, and the tokens outside the nucleus never drawn."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0]).repeat(20_000, 1)
    u = torch.rand(20_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    probs = torch.softmax(logits[0].double(), -1)
    nucleus = probs[:4] / probs[:4].sum()  # sorted already: the first 4 reach 0.9, the first 3 do not
    assert probs[:3].sum() < 0.9 <= probs[:4].sum()
    nxt, logp = HFEngine._draw(logits, u, 1.0, 0.9)
    counts = torch.bincount(nxt, minlength=6).double()
    expected = 20_000 * torch.cat([nucleus, torch.zeros(2, dtype=torch.float64)])
    assert counts[4:].sum() == 0
    assert ((counts - expected).abs() <= 5 * (expected * (1 - expected / 20_000)).sqrt()).all(), (counts, expected)
    torch.testing.assert_close(logp.double(), nucleus.log()[nxt], rtol=0, atol=1e-6)


def test_top_p_samples_from_the_renormalised_nucleus(setup):
    _, lm, engine = setup
    with torch.no_grad():
        probs = F.softmax(lm(input_ids=torch.tensor([PROMPTS[0]])).logits[0, -1] / 1.3, -1)
    sorted_p, order = probs.sort(descending=True)
    nucleus = order[: int((sorted_p.cumsum(0) < 0.6).sum()) + 1]
    ro = engine.generate(PROMPTS[:1], 64, temperature=1.3, top_p=0.6, max_new_tokens=1, seed=0)
    first = torch.tensor([r[0] for r in ro.response_ids])
    assert set(first.tolist()) <= set(nucleus.tolist()) and len(set(first.tolist())) > 1
    expected = (probs[first] / probs[nucleus].sum()).log()
    torch.testing.assert_close(torch.tensor([lp[0] for lp in ro.sampler_logprobs]), expected, rtol=0, atol=1e-5)


def test_sync_weights_changes_greedy_generations(setup):
    tok, lm, _ = setup
    engine = HFEngine(copy.deepcopy(lm), eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    before = engine.generate(PROMPTS, 1, temperature=0, max_new_tokens=8).response_ids
    trained = copy.deepcopy(lm)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5 * torch.randn_like(p))
    expected = HFEngine(copy.deepcopy(trained), eos_token_ids=[tok.eos_token_id], pad_token_id=tok.pad_token_id)
    engine.sync_weights(trained)
    after = engine.generate(PROMPTS, 1, temperature=0, max_new_tokens=8).response_ids
    assert after == expected.generate(PROMPTS, 1, temperature=0, max_new_tokens=8).response_ids
    assert after != before


def test_stop_tokens_include_im_end_for_the_qwen_template():
    from reco_scaled.rollout.factory import stop_token_ids

    tok = char_tokenizer()
    assert stop_token_ids(tok, "qwen-boxed") == [tok.eos_token_id]
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(tok, "qwen-boxed") == [tok.eos_token_id, im_end]
    assert stop_token_ids(tok, "plain") == [tok.eos_token_id]
    assert stop_token_ids(tok, None) == []  # no prompt template (countdown)


def test_engine_built_without_weights_matches_a_loaded_one_after_sync(setup, tmp_path):
    """The trainer's HF engine never reads the weights from disk: sync_weights fills it (buffers included)."""
    from reco_scaled.rollout.factory import make_engine

    tok, lm, _ = setup
    lm.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    kw = dict(template=None, device=torch.device("cpu"), dtype=torch.float32)
    empty = make_engine("hf", str(tmp_path), tok, load_weights=False, **kw)
    with pytest.raises(RuntimeError, match="sync_weights"):
        empty.generate(PROMPTS, 1)
    empty.sync_weights(lm)
    assert empty.model.lm_head.weight is empty.model.model.embed_tokens.weight  # still tied
    loaded = make_engine("hf", str(tmp_path), tok, **kw)
    a, b = (e.generate(PROMPTS, 2, max_new_tokens=8, seed=3) for e in (empty, loaded))
    assert a.response_ids == b.response_ids and a.sampler_logprobs == b.sampler_logprobs
