"""The peers' methods of reco/peers.py (issue 42), each against an independent reference: Pass@k training's analytic
advantage against enumerating every subset of k, UCPO's weights against the self-normalised importance weights written
out term by term and the numbers of the authors' estimator, SimKO's gradient against its closed form through the softmax
Jacobian, and zero-success gating against a replay of its rule; then each runs in experiments/lab.py's loop."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch

import reco_mini as rm
from reco import peers as rv
from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import lab  # noqa: E402

# ==== Pass@k training (arXiv 2508.10751, Eqs. 11-15)

def enumerated_pass_at_k_advantage(rewards: list[float], k: int) -> list[float]:
    """Every k-subset rewarded by its best response, normalised by the subsets' mean and population std; a response's
    advantage is the mean over the subsets that hold it (the definition the closed form is derived from)."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    score = {s: max(rewards[i] for i in s) for s in subsets}
    mean = sum(score.values()) / len(subsets)
    std = math.sqrt(sum((v - mean) ** 2 for v in score.values()) / len(subsets))
    if std == 0:
        return [0.0] * len(rewards)
    return [sum((score[s] - mean) / std for s in subsets if i in s) / math.comb(len(rewards) - 1, k - 1)
            for i in range(len(rewards))]


@pytest.mark.parametrize("n", [4, 6, 8])
def test_pass_at_k_advantage_equals_the_enumeration_over_every_subset(n):
    for k in range(1, n + 1):
        groups = [[float(i < pos) for i in range(n)] for pos in range(n + 1)]  # every count of correct responses
        got = rv.pass_at_k_advantages(torch.tensor(groups, dtype=torch.float64), k)
        want = torch.tensor([enumerated_pass_at_k_advantage(g, k) for g in groups], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_pass_at_1_is_grpo_with_the_population_std():
    rewards = torch.tensor([[1.0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.float64)
    grpo = (rewards - rewards.mean(1, keepdim=True)) / rewards.std(1, unbiased=False, keepdim=True)
    torch.testing.assert_close(rv.pass_at_k_advantages(rewards, 1), grpo)
    with pytest.raises(ValueError, match="k <= group size"):
        rv.pass_at_k_advantages(rewards, 9)


# ==== UCPO (arXiv 2605.00365; the authors' estimator `iq`)

def snis_weights(correct: list[bool], scores: list[float], tau: float) -> list[float]:
    """w_i = n_c [(1 - tau) / n_c + tau s_i], s_i the self-normalised importance weight of the uniform target u = 1/n_c
    against the sampling distribution q = softmax(scores) over the correct responses; 1 elsewhere, or below 2 correct."""
    idx = [i for i, c in enumerate(correct) if c]
    if len(idx) < 2:
        return [1.0] * len(correct)
    z = sum(math.exp(scores[i]) for i in idx)
    ratio = {i: (1 / len(idx)) / (math.exp(scores[i]) / z) for i in idx}  # u / q
    total = sum(ratio.values())
    return [len(idx) * ((1 - tau) / len(idx) + tau * ratio[i] / total) if i in ratio else 1.0 for i in range(len(correct))]


def test_ucpo_weights_equal_the_importance_weights_written_out():
    gen = torch.Generator().manual_seed(0)
    rewards = (torch.rand(6, 8, generator=gen) < 0.5).double()
    rewards[0] = 0  # no correct response
    rewards[1] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])  # one: plain GRPO
    rewards[2] = 1  # all correct
    lp = -torch.rand(6, 8, generator=gen, dtype=torch.float64) * 20
    lengths = torch.randint(1, 12, (6, 8), generator=gen).double()
    for tau in (0.0, 0.2, 1.0):
        for mean in (True, False):
            got = rv.ucpo_weights(rewards, lp, lengths, tau, length_norm=mean)
            scores = lp / lengths if mean else lp
            want = [snis_weights([bool(x) for x in r], s.tolist(), tau) for r, s in zip(rewards, scores)]
            torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12, atol=1e-12)
            correct = rewards > 0
            keep = correct.sum(1) >= 2
            torch.testing.assert_close((got * correct)[keep].sum(1), correct[keep].sum(1).double())  # total kept


def test_ucpo_weights_reproduce_the_authors_estimator_on_a_worked_group():
    # the group of 8 with 3 correct responses of mean token log-prob -0.2, -0.5, -1.0, worked through the authors'
    # compute_dgrpo_advantage_outcome_invq_l by hand: weights (n_c * blended) at tau 0.2 and 1.0
    rewards = torch.tensor([[1.0, 1, 1, 0, 0, 0, 0, 0]])
    lengths = torch.full((1, 8), 10.0)
    lp = torch.tensor([[-2.0, -5.0, -10.0, -3, -3, -3, -3, -3]], dtype=torch.float64)
    for tau, want in ((0.2, [0.931136, 0.977015, 1.091849]), (1.0, [0.655680, 0.885076, 1.459244])):
        w = rv.ucpo_weights(rewards, lp, lengths, tau)
        assert w[0, :3].tolist() == pytest.approx(want, abs=2e-6) and w[0, 3:].tolist() == [1.0] * 5


# ==== SimKO (arXiv 2510.14807, Eqs. 3-5)

def _terms(logits: torch.Tensor, y: torch.Tensor, A: float, old_shift: float = 0.0):
    """TokenTerms of one response [1, T] at the policy `logits` [1, T, V] (leaf), with pi_old = pi shifted by old_shift."""
    logp = torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)
    r = torch.exp(logp - (logp.detach() - old_shift))
    mask = torch.ones_like(logp)
    return rm.TokenTerms(logp, r, torch.tensor([[A]]), torch.ones_like(logp), None, None, None, logits=logits, y=y,
                         mask=mask)


def closed_form_grad(z: torch.Tensor, y: int, A: float, r: float, cfg: rm.LossConfig, hot: bool) -> torch.Tensor:
    """d l_t / d z of one token, unclipped: GRPO's -A r (e_y - pi); at a hot token of a correct response,
    -A r [(1 - alpha)(e_y - pi) + (alpha / K) sum_top-K (e_v - pi)]; at a hot incorrect top-1 token, lambda times
    GRPO's (the softmax Jacobian: d log pi(v) / dz = e_v - pi)."""
    pi = torch.softmax(z, -1)
    eye = torch.eye(len(z), dtype=z.dtype)
    g = eye[y] - pi
    if hot and A > 0:
        top = torch.topk(z, cfg.simko_k).indices
        g = (1 - cfg.simko_alpha) * g + cfg.simko_alpha * (eye[top] - pi).mean(0)
    if hot and A < 0 and y == int(z.argmax()):
        g = cfg.simko_lambda * g
    return -A * r * g


@pytest.mark.parametrize("A", [1.0, -1.0])
@pytest.mark.parametrize("scale", ["advantage", "ratio"])
def test_simko_gradient_equals_its_closed_form(A, scale):
    torch.manual_seed(1)
    T, V = 10, 7
    z = torch.randn(1, T, V, dtype=torch.float64) * torch.linspace(0.2, 3.0, T).view(1, T, 1)  # entropies spread out
    y = z.argmax(-1)  # every token is its position's top-1: the incorrect-response rule can act
    y[0, 1::3] = z[0, 1::3].argmin(-1)  # and some are not
    cfg = lab.LossConfig(token_ratio="simko", simko_scale=scale, simko_alpha=0.3, simko_lambda=1.5)
    logits = z.clone().requires_grad_(True)
    loss, _ = rv.simko_ratio(_terms(logits, y, A, old_shift=0.05), cfg)
    loss.sum().backward()
    entropy = -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum(-1)[0]
    cut = np.quantile(entropy.numpy(), cfg.simko_quantile)  # numpy's linear interpolation, as torch.quantile's
    r = math.exp(0.05)  # inside the clip range 1 +- 0.2
    for t in range(T):
        want = closed_form_grad(z[0, t], int(y[0, t]), A, r, cfg, hot=bool(entropy[t] > cut))
        torch.testing.assert_close(logits.grad[0, t], want, rtol=1e-10, atol=1e-12)
    assert int((entropy > cut).sum()) == 2  # the top 20% of 10 tokens


def test_simko_matches_the_worked_logit_gradient_and_keeps_grpo_s_value():
    # one response of three tokens; the middle one, z = [2, 1, 0.5, 0, -1] with sampled y = 1, has the highest entropy,
    # so it alone is above the median (quantile 0.5): A = +1, r = 1, alpha 0.01, K 3 give the objective's (-loss)
    # gradient worked out from Eq. 4 by hand
    z = torch.tensor([[[3.0, 0, 0, 0, 0], [2, 1, 0.5, 0, -1], [5, 0, 0, 0, 0]]], dtype=torch.float64, requires_grad=True)
    cfg = lab.LossConfig(token_ratio="simko", simko_quantile=0.5)
    terms = _terms(z, torch.tensor([[0, 1, 0]]), 1.0)
    loss, _ = rv.simko_ratio(terms, cfg)
    (-loss.sum()).backward()
    assert z.grad[0, 1].tolist() == pytest.approx([-0.559688, 0.786209, -0.122294, -0.076197, -0.028031], abs=1e-6)
    pi = torch.softmax(z[0, 0].detach(), -1)
    torch.testing.assert_close(z.grad[0, 0], torch.eye(5, dtype=torch.float64)[0] - pi)  # not hot: GRPO's
    grpo, _ = rm.importance_ratio(terms, cfg)
    torch.testing.assert_close(loss, grpo)  # the smoothing moves the gradient, not the value


def test_simko_needs_the_logits():
    t = rm.TokenTerms(torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 1), torch.ones(1, 2), None, None, None)
    with pytest.raises(ValueError, match="needs the policy's logits"):
        rv.simko_ratio(t, lab.LossConfig(token_ratio="simko"))


# ==== Zero-success gating (in the spirit of arXiv 2606.15455)

def test_zero_success_gate_updates_only_prompts_never_solved_before():
    solved, history = set(), {}
    steps = [(["a", "b", "c"], [[0, 0], [1, 0], [0, 0]]), (["a", "b", "d"], [[0, 1], [1, 1], [0, 0]]),
             (["a", "b", "c"], [[0, 0], [0, 0], [1, 1]]), ([{"id": "m"}, {"id": "m"}], [[1, 0], [0, 0]])]
    for problems, rewards in steps:
        gate = rv.zero_success_gate(problems, torch.tensor(rewards, dtype=torch.float32), solved)
        want = [0.0 if history.get(rv.problem_key(p)) else 1.0 for p in problems]  # replay: solved in an earlier step?
        assert gate.tolist() == want
        for p, row in zip(problems, rewards):
            history[rv.problem_key(p)] = history.get(rv.problem_key(p), False) or any(row)
    assert solved == {"a", "b", "c", "m"}


# ==== in experiments/lab.py's loop

@pytest.mark.parametrize("flags", [["--advantage", "pass-at-k", "--pass-k", "2"], ["--prompt-gate", "zero-success"],
                                   ["--response-weight", "ucpo"], ["--token-ratio", "simko"]])
def test_each_peer_trains_in_lab(tmp_path, monkeypatch, flags):
    from reco.tasks import TASKS
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))
    cfg = lab.parse_config(["--method", "grpo", *flags, "--steps", "2", "--prompts-per-step", "4", "--group-size", "4",
                            "--n-train", "16", "--n-test", "4"])
    tok = char_tokenizer(cfg.task)
    torch.manual_seed(0)
    model = tiny_model(tok, 32, 2)
    lab.train_rl(cfg, "grpo", model, None, tok, make_splits(cfg)["train"], tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) for row in rows)


def test_reco_mini_has_none_of_the_peers(capsys):
    """Issue 54: the peers' settings are lab's. reco_mini's Config has none of them and refuses their flags; SimKO's
    token ratio is filed in its registry only by importing lab (a fresh reco_mini.py refuses it)."""
    assert not {f.name for f in fields(rv.PeerSettings)} & {f.name for f in fields(rm.Config)}
    with pytest.raises(SystemExit):
        rm.parse_config(["--advantage", "pass-at-k"])
    assert "unrecognized arguments: --advantage" in capsys.readouterr().err
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "reco_mini.py"), "--token-ratio", "simko"], capture_output=True,
                          text=True, cwd=root, timeout=300)
    assert proc.returncode == 2 and "--token-ratio must be one of ['is', 'variance', 'variance-old'], got 'simko'" in proc.stderr


def test_bad_peer_settings_name_their_flag():
    for kwargs, flag in (({"advantage": "pass@k"}, "--advantage"), ({"pass_k": 0}, "--pass-k"),
                         ({"prompt_gate": "x"}, "--prompt-gate"), ({"ucpo_tau": 1.5}, "--ucpo-tau"),
                         ({"simko_quantile": -0.1}, "--simko-quantile"), ({"simko_scale": "both"}, "--simko-scale")):
        with pytest.raises(rm.ConfigError, match=flag):
            lab.LossConfig(**kwargs)
