"""The Countdown task, its verifier, the tokenizer and the KV-cache sampler."""
import random
from pathlib import Path

import torch

from reco.tasks.countdown import (
    FORMS,
    Problem,
    char_tokenizer,
    countdown_reward,
    countdown_value,
    make_problem,
    make_splits,
    tiny_model,
)
from reco_mini import Config, response_logits, sample


def test_countdown_verifier_table():
    p = Problem((3, 7, 12), 33)
    cases = {
        "3*7+12": 1, "7*3+12": 1, "12+3*7": 1, "(3*7)+12": 1, "((12))+7*3": 1,
        "3*7+11": 0,  # wrong number
        "3*7": 0,  # a number unused
        "3*7+12+3": 0,  # a number used twice
        "3*7-12": 0,  # wrong value
        "3 * 7 + 12": 0,  # spaces are outside the grammar
        "": 0, "*": 0, "3*7+12)": 0, "(3*7+12": 0,
        "3*7+12/1": 0, "3**7+12": 0, "21+12": 0,
    }
    for response, expected in cases.items():
        assert countdown_reward(p, response) == expected, response


def test_countdown_value_is_exact_and_refuses_everything_else():
    assert countdown_value("(20-19)*18") == 18
    assert countdown_value("2*3-10") == -4
    for bad in ["__import__('os').system('true')", "9**9**9**9", "1/3", "2.5*2", "a+1", "(1).__class__", "1" * 100,
                "True+1", "-3+4"]:
        assert countdown_value(bad) is None, bad


def test_problems_are_solvable_and_splits_disjoint():
    rng = random.Random(0)
    for _ in range(200):
        problem, expr = make_problem(rng, [1.0] * len(FORMS))
        assert countdown_reward(problem, expr) == 1.0
        assert sorted(problem.numbers) == sorted(int(x) for x in expr.replace("(", " ").replace(")", " ")
                                                  .replace("*", " ").replace("+", " ").replace("-", " ").split())
    splits = make_splits(Config(n_train=200, n_test=50))
    assert len(set(splits["train"]) | set(splits["val"]) | set(splits["test"])) == 300


def test_char_tokenizer_round_trip_and_save_load(tmp_path: Path):
    from transformers import AutoTokenizer

    tok = char_tokenizer()
    text = "07,03,12>033:"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    tok.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(text).input_ids == ids


def test_kv_cache_sampler_matches_full_forward():
    """Greedy-limit sampling with the cache equals argmax decoding with full forwards, and the
    sampler's token distribution is the one the trainer recomputes."""
    torch.manual_seed(0)
    tok = char_tokenizer()
    model = tiny_model(tok, hidden=32, layers=2).eval()
    enc = tok(["07,03,12>033:", "1,2>3:", "15,01,04>020:"], padding=True, return_tensors="pt")
    gen = torch.Generator().manual_seed(0)
    resp, mask = sample(model, enc.input_ids, enc.attention_mask, 6, 1e-4, tok.eos_token_id, tok.pad_token_id, gen)
    ids, attn = enc.input_ids, enc.attention_mask
    for t in range(resp.shape[1]):  # reference: no cache, recompute everything each step
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            nxt = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, -1].argmax(-1)
        live = mask[:, t].bool()
        assert torch.equal(resp[live, t], nxt[live])
        ids, attn = torch.cat([ids, nxt[:, None]], 1), torch.cat([attn, torch.ones_like(attn[:, :1])], 1)
    # Sampled frequencies of the first token match softmax(logits / tau) from response_logits.
    tau = 0.7
    prompts = enc.input_ids[:1].repeat(4000, 1)
    pmask = enc.attention_mask[:1].repeat(4000, 1)
    resp, mask = sample(model, prompts, pmask, 1, tau, tok.eos_token_id, tok.pad_token_id, gen)
    with torch.no_grad():
        probs = torch.softmax(response_logits(model, prompts[:1], pmask[:1], resp[:1], mask[:1])[0, 0] / tau, -1)
    freq = torch.bincount(resp[:, 0], minlength=probs.numel()).float() / 4000
    assert (freq - probs).abs().max() < 0.03


def test_countdown_form_table():
    from reco.tasks.countdown import countdown_form

    table = {  # expression -> index in FORMS, by hand
        "3*7+12": 0, "7*3+12": 0, "12+3*7": 0, "12+(7*3)": 0, "(3*7)+12": 0,
        "3*7-12": 1, "(7*3)-12": 1,
        "(3+7)*12": 2, "12*(7+3)": 2, "(7+3)*12": 2, "((3+7))*12": 2,
        "(12-3)*7": 3, "7*(12-3)": 3,
        "3+7+12": 4, "3+(7+12)": 4, "(12+3)+7": 4,
        "12-3*7": None, "3*7*12": None, "3-7-12": None, "3-(7-12)": None, "(3-7)-12": None, "3*(7*12)": None,
        "3+7": None, "3": None, "": None, "3*7+": None, "-3*7+12": None, "3**7+12": None,
        "3 * 7 + 12": 0,  # a structure only: the verifier, not the form, rejects the spaces
        "__import__('os')": None, "(3+7)/12": None, "9" * 70: None,
    }
    for expr, form in table.items():
        assert countdown_form(expr) == form, expr


def test_parser_rejects_invalid_literals_without_warning():
    import warnings

    from reco.tasks.countdown import parse_arithmetic

    with warnings.catch_warnings(record=True) as caught:  # "error" would not do: compile turns it into a SyntaxError
        warnings.simplefilter("always")
        assert [parse_arithmetic(t) for t in ("3or 4", "1in 2", "7if 1", "0x1for")] == [None] * 4
    assert [str(w.message) for w in caught] == []


def test_form_counts_by_hand():
    from reco.tasks.countdown import LongProblem, form_counts

    short = Problem((3, 7, 12), 33)
    assert form_counts(short, ["3*7+12", "12+7*3", "(3+7)*12", "3+7+12", "12-3*7"]) == [2, 0, 1, 0, 1, 1]
    assert form_counts(short, []) == [0] * (len(FORMS) + 1)
    long = LongProblem((3, 7, 12), 33)
    assert form_counts(long, ["pick 3*7=21. answer: 3*7+12", "answer:(3+7)*12", "no answer"]) == [1, 0, 1, 0, 0, 1]


def test_solving_forms_by_enumeration():
    from reco.tasks.countdown import solving_forms

    assert solving_forms(Problem((3, 7, 12), 33)) == {0}  # 3*7+12; no other form gives 33
    assert solving_forms(Problem((2, 3, 4), 10)) == {0, 1}  # 2*3+4 and 3*4-2; 2+3+4 is 9
    assert solving_forms(Problem((2, 3, 4), 20)) == {2}  # (2+3)*4
    assert solving_forms(Problem((5, 3, 4), 8)) == {3}  # (5-3)*4; 5*4-3 = 17, 3*4-5 = 7
