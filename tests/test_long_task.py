"""countdown-long (reco.tasks.countdown): token labels on hand-made responses, the generator against the parser, the SFT
data's duplicate rate, the canonical occurrence mode on a table, every old mode unchanged, and the diagnostics."""
import math
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import reco_mini as rm
from reco.tasks import TASKS
from reco.tasks import countdown as rc
from reco.tasks.countdown import LongProblem, Problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import diagnostics  # noqa: E402

F, S, D = "fork", "style", "determined"


def _expand(spec: list[tuple[str, str]]) -> tuple[str, list[str]]:
    return "".join(t for t, _ in spec), [label for t, label in spec for _ in t]


def test_token_labels_on_hand_made_responses():
    text, labels = _expand([  # by hand: op2 "+" commutes, so m1's first character is an order choice (style)
        ("p", S), ("ick ", D), ("7", F), (" ", S), ("*", F), (" ", S), ("3", F), ("=", D), ("21", D), (";", S), (" ", D),
        ("t", S), ("hen ", D), ("2", S), ("1", D), (" ", S), ("+", F), ("12", D), (" ", S), ("=", D), (" ", S),
        ("33", D), (".", S), (" ", D), ("a", S), ("nswer:", D), (" ", S), ("7*3+12", D)])
    assert text == "pick 7 * 3=21; then 21 +12 = 33. answer: 7*3+12"
    assert rc.long_labels(text) == labels
    text, labels = _expand([  # op2 "-": the order decides the value, so m1's first character is a fork
        ("u", S), ("sing ", D), ("5*8", F), ("=", D), (" ", S), ("40", D), (";", S), (" ", D), ("s", S), ("ince ", D),
        ("4", F), ("0", D), (" ", S), ("-", F), (" ", S), ("2", D), ("=", D), ("38", D), (",", S), (" ", D), ("d", S),
        ("one:", D), ("5*8-2", D)])
    assert text == "using 5*8= 40; since 40 - 2=38, done:5*8-2"
    assert rc.long_labels(text) == labels
    for bad in ["using 5*8=40 since 40-2=38, done:5*8-2",  # a separator missing
                "go 5*8=40; since 40-2=38, done:5*8-2",  # not an opener
                "using 5*8=40; since 40-2=38, done:5*8-2 ",  # trailing space
                "using 5/8=40; since 40-2=38, done:5*8-2", ""]:
        assert rc.long_labels(bad) is None, bad


def test_token_labels_of_eos_and_unparsed_responses():
    tok = rc.char_tokenizer("countdown-long")
    problem = LongProblem((3, 5, 8), 38)
    texts = ["using 5*8= 40; since 40 - 2=38, done:5*8-2", "using 5*8 40"]
    enc = tok([t + tok.eos_token for t in texts], add_special_tokens=False, padding=True, padding_side="right",
              return_tensors="pt")
    long, short = TASKS["countdown-long"], TASKS["countdown"]
    labels = long.token_labels([problem], 2, texts, enc.input_ids, enc.attention_mask, tok)
    assert labels[0] == rc.long_labels(texts[0]) + [D]  # <eos> is determined
    assert labels[1] == ["other"] * (len(texts[1]) + 1)
    assert long.canonical_keys([problem], 2, texts) == [rc.response_key(problem, t) for t in texts]
    assert short.token_labels([Problem((3, 5, 8), 38)], 2, ["5*8-2", "8*5-2"], enc.input_ids, enc.attention_mask, tok) is None


def test_generator_labels_match_the_parser_and_demonstrations_are_correct_and_long():
    rng, lengths = random.Random(0), []
    for _ in range(400):
        problem, expr = rc.make_problem(rng, rc.LONG_SFT_FORM_PRIOR, long=True)
        text, labels = rc.long_response(rng, expr)
        assert len(labels) == len(text) and rc.long_labels(text) == labels, text
        assert rc.countdown_reward(problem, text) == 1.0, text
        assert rc.response_key(problem, text) == rc.response_key(Problem(problem.numbers, problem.target), expr)
        lengths.append(len(text) + 1)  # + <eos>: one token per character
    assert sum(lengths) / len(lengths) >= 48


def test_reward_reads_only_the_final_expression():
    p = LongProblem((3, 7, 12), 33)
    assert rc.countdown_reward(p, "pick 7 * 3=99; then 1 +1 = 2. answer: 7*3+12") == 1.0  # a wrong derivation is free
    assert rc.countdown_reward(p, "pick 7 * 3=21; then 21 +12 = 33. answer: 7*3+11") == 0.0
    assert rc.countdown_reward(p, "7*3+12") == 0.0  # no tag: nothing is scored
    assert rc.countdown_reward(Problem((3, 7, 12), 33), "answer: 7*3+12") == 0.0  # the short task is unchanged


def test_style_entropy_and_duplicates_by_hand():
    assert rc.STYLE_BITS_MIN == pytest.approx(3 * 3 + 2 * math.log2(3) + 9) and rc.STYLE_BITS_MIN >= 20
    # the duplicate rate against counts made by hand: group 1 has one repeat of 3, group 2 none, group 3 three of 4
    assert rc.duplicate_rate([["a", "a", "b"], ["x", "y", "z"], ["q"] * 4]) == pytest.approx((1 / 3 + 0 + 3 / 4) / 3)
    rng = random.Random(1)  # one expression, 3000 demonstrations: >= 2^20.2 equally likely surfaces, so almost no pairs
    texts = [rc.long_response(rng, "3*7+12")[0] for _ in range(3000)]
    pairs = sum(c * (c - 1) // 2 for c in Counter(texts).values())
    assert pairs <= 10  # expected <= 3000^2 / 2 / 2^21.2 ~ 1.9
    data = rc.sft_duplicate_rate(seed=0, problems=300)
    assert data["duplicate_rate"] < 0.01 and data["mean_tokens"] >= 48


def test_canonical_keys_on_a_table():
    p, lp = Problem((3, 7, 12), 33), LongProblem((3, 7, 12), 33)
    same = ["3*7+12", "12+7*3", "(7*3)+12", "12+(3*7)"]
    assert len({rc.response_key(p, t) for t in same}) == 1
    assert rc.response_key(p, "3*7-12") != rc.response_key(p, "3*7+12")
    assert rc.response_key(p, "3+7+12") == rc.response_key(p, "12+(7+3)")
    assert rc.response_key(p, "3*7+") == "text:3*7+"  # no expression: only exact copies match
    assert rc.response_key(lp, "pick 7 * 3=21; then 21 +12 = 33. answer: 7*3+12") == \
        rc.response_key(lp, "take 3*7=21, next 12+21=33; result: 12+3*7") == rc.response_key(p, "3*7+12")
    math = TASKS["math"]
    assert math.canonical_keys([{}], 2, [r"so \boxed{\frac{1}{2}}", r"\boxed{\frac12}"]) == ["answer:\\frac{1}{2}"] * 2
    assert math.canonical_keys([{}], 2, ["no box", "0.5"]) == ["text:no box", "text:0.5"]


def test_canonical_mode_on_a_table():
    lp = torch.zeros(2, 4, dtype=torch.float64)
    keys = ["a", "a", "b", "c", "x", "x", "x", "x"]
    w = rm.occurrence_weights(lp, "canonical", keys=keys, apply="all", norm="group")
    # m = [2, 2, 1, 1]: 1/m = [1/2, 1/2, 1, 1], mean 3/4 -> w = [2/3, 2/3, 4/3, 4/3]; all equal keys: w = 1
    assert torch.allclose(w, torch.tensor([[2 / 3, 2 / 3, 4 / 3, 4 / 3], [1, 1, 1, 1]], dtype=torch.float64))
    with pytest.raises(ValueError, match="keys for canonical"):
        rm.occurrence_weights(lp, "canonical", apply="all")


def test_every_old_mode_unchanged():
    """The old modes against their formulas, written out here, to the bit; and keys change nothing."""
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 5
    lengths = torch.randint(1, 9, (3, 4), generator=g).double()
    responses = [(1, 2), (1, 2), (3,), (4,), (5,), (5,), (5,), (6,), (7,), (8,), (9,), (7,)]
    adv = torch.randn(3, 4, generator=g, dtype=torch.float64)
    counts = torch.tensor([[2, 2, 1, 1], [3, 3, 3, 1], [2, 1, 1, 2]], dtype=torch.float64)
    expected_m = {"sequence": 1 + 3 * lp.exp(), "token-mean": 1 + 3 * (lp / lengths.clamp(min=1)).exp(), "count": counts,
                  "none": torch.ones_like(lp)}
    for mode, m in expected_m.items():
        for apply in ("all", "positive"):
            want = (1 / m) / (1 / m).mean(dim=1, keepdim=True)
            want = torch.where(adv > 0, want, torch.ones_like(want)) if apply == "positive" else want
            got = rm.occurrence_weights(lp, mode, responses, lengths, adv, apply, norm="group")
            assert torch.equal(got, want), (mode, apply)
            assert torch.equal(rm.occurrence_weights(lp, mode, responses, lengths, adv, apply, keys=list("abcdefghijkl"), norm="group"), got)


def test_step_diagnostics_by_hand():
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    old_logp = torch.tensor([[math.log(0.5), 0, 0], [math.log(0.25), 0, 0]])
    v_old = torch.tensor([[0.5, 0.25, 0.0], [0.5, 0.25, 9.0]])
    v_mean = (v_old * mask).sum() / mask.sum()  # 0.3
    labels = [[F, S, D], [S, D]]
    adv, w = torch.tensor([[1.0, -1.0]]), torch.ones(2)
    args = (old_logp, mask, [[1, 2, 3], [1, 2]], ["k", "k"], labels, adv, w, v_old, v_mean)
    out = diagnostics.step_diagnostics(*args, rm.LossConfig(token_ratio="is"))
    assert out["w_dev_sequence"] == pytest.approx(1 / 11)  # m = 1 + p = [1.5, 1.25]: w = [10/11, 12/11]
    assert out["w_dev_count"] == 0 and out["w_dev_canonical"] == 0 and out["w_dev_none"] == 0
    assert out["dup_exact"] == 0 and out["dup_canonical"] == 0.5
    assert out["v_old_fork"] == pytest.approx(0.5) and out["v_old_style"] == pytest.approx(0.375)
    assert out["v_old_determined"] == pytest.approx(0.125) and out["v_old_other"] is None
    assert [out[f"share_{c}"] for c in ("fork", "style", "determined", "other")] == pytest.approx([0.2, 0.4, 0.4, 0.0])
    out = diagnostics.step_diagnostics(*args, rm.LossConfig(token_ratio="variance"))  # rho = V_old / 0.3: |rho A| = V_old / 0.3
    assert [out[f"share_{c}"] for c in ("fork", "style", "determined")] == pytest.approx([1 / 3, 1 / 2, 1 / 6])
    assert out["tokens_other"] == 0.0


def test_step_diagnostics_size_the_update_by_the_methods_own_token_term(monkeypatch):
    """The shares were sized by min(V_old / mean V_old, c_max) for every token ratio but "is": a new term got a
    variance ratio's shares. Now a term is sized by its own rho on policy, and a term whose update there is not
    -rho A gets no shares (None) rather than wrong ones."""
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    v_old = torch.tensor([[0.5, 0.25, 0.0], [0.5, 0.25, 9.0]])
    args = (torch.zeros(2, 3), mask, [[1, 2, 3], [1, 2]], ["k", "k"], [[F, S, D], [S, D]], torch.tensor([[1.0, -1.0]]),
            torch.ones(2), v_old, (v_old * mask).sum() / mask.sum())
    twice = lambda t, cfg: (2 * rm.importance_ratio(t, cfg)[0], torch.full_like(t.logp, 2.0))  # noqa: E731
    monkeypatch.setitem(rm.TOKEN_RATIOS, "twice-is", twice)
    out = diagnostics.step_diagnostics(*args, rm.LossConfig(token_ratio="twice-is"))
    assert [out[f"share_{c}"] for c in ("fork", "style", "determined", "other")] == pytest.approx([0.2, 0.4, 0.4, 0.0])
    monkeypatch.setitem(rm.TOKEN_RATIOS, "thrice-is", lambda t, cfg: (3 * rm.importance_ratio(t, cfg)[0], None))
    out = diagnostics.step_diagnostics(*args, rm.LossConfig(token_ratio="thrice-is"))
    assert [out[f"share_{c}"] for c in ("fork", "style", "determined", "other")] == [None] * 4
    assert out["v_old_fork"] == pytest.approx(0.5)  # the other fields stay


def test_eval_seed_default_is_seed_plus_one():
    tok = rc.char_tokenizer()
    torch.manual_seed(0)
    model = rc.tiny_model(tok, hidden=16, layers=1).eval()
    problems = [Problem((3, 7, 12), 33), Problem((2, 3, 4), 10)]
    run = {s: rm.evaluate(rm.Config(seed=5, eval_seed=s, n_eval=8, max_new_tokens=4), model, tok, problems, "t")
           for s in (-1, 6, 7)}
    assert run[-1] == run[6]  # the default keeps today's stream, cfg.seed + 1
    cfg = rm.Config(seed=5, eval_seed=7, n_eval=8, max_new_tokens=4)
    gen = torch.Generator().manual_seed(7)
    texts = rm.rollout(cfg, model, tok, problems, 8, gen)["texts"]  # the stream --eval-seed 7 names
    reward = TASKS["countdown"].reward
    assert run[7]["counts"] == [sum(reward(p, t) > 0 for t in texts[i * 8: (i + 1) * 8]) for i, p in enumerate(problems)]


def test_countdown_long_config_and_tokenizer():
    cfg = rm.Config(task="countdown-long")
    assert cfg.max_new_tokens == rc.LONG_MAX_NEW_TOKENS and rm.Config().max_new_tokens == 12
    short, long = rc.char_tokenizer(), rc.char_tokenizer("countdown-long")
    assert short.get_vocab().items() <= long.get_vocab().items()  # every countdown token keeps its id
    splits = rc.make_splits(rm.Config(n_train=40, n_test=8))
    long_splits = rc.make_splits(rm.Config(task="countdown-long", n_train=40, n_test=8))  # the same problems
    assert [(p.numbers, p.target) for p in splits["test"]] == [(p.numbers, p.target) for p in long_splits["test"]]
    assert all(type(p) is LongProblem for p in long_splits["train"])
