"""reco_mini's math against independent references (docs/design.md section 3.6)."""
import itertools
import math
import random
import statistics

import pytest
import sympy
import torch

from reco_mini import LossConfig, group_advantages, occurrence_weights, pass_at_k, policy_loss, variance_stat

GROUP_ALL = dict(apply="all", norm="group")  # the paper's per-group weights on every response (the default until issue 52)


def loss_of(logp, old_logp, advantages, mask, *, v=None, num_tokens=None, num_seqs=None, weights=None, v_old=None,
            v_old_mean=None, ref_logp=None, **settings):
    """reco_mini.policy_loss from loose tensors and loss settings (the tests' shorthand)."""
    batch = {"old_logp": old_logp, "advantages": advantages, "mask": mask, "weights": weights, "v_old": v_old,
             "v_old_mean": v_old_mean, "ref_logp": ref_logp}
    cfg = LossConfig(**{"token_ratio": "is", **settings})
    return policy_loss(logp, batch, cfg, v, num_tokens=num_tokens, num_seqs=num_seqs)

# ----------------------------------------------------------------------------- Pass@k


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_matches_enumeration_of_subsets(n):
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)


def test_pass_at_k_matches_binomial_closed_form_at_large_n():
    for n, c, k in [(256, 3, 1), (256, 3, 64), (256, 1, 256), (256, 0, 16), (256, 250, 8), (100, 7, 50)]:
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


# ----------------------------------------------------------------------------- advantages


def test_group_advantages_match_statistics_module():
    rng = random.Random(0)
    rewards = [[float(rng.random() < 0.4) for _ in range(8)] for _ in range(20)]
    A = group_advantages(torch.tensor(rewards, dtype=torch.float64))
    A_dr = group_advantages(torch.tensor(rewards, dtype=torch.float64), scale_by_std=False)
    for row, a, a_dr in zip(rewards, A, A_dr):
        mean = statistics.fmean(row)
        std = statistics.stdev(row)  # unbiased (n - 1)
        for r, x, y in zip(row, a.tolist(), a_dr.tolist()):
            assert x == pytest.approx((r - mean) / (std + 1e-6), abs=1e-9)
            assert y == pytest.approx(r - mean, abs=1e-12)


def test_equal_rewards_give_zero_advantage_not_nan():
    A = group_advantages(torch.tensor([[1.0] * 8, [0.0] * 8]))
    assert torch.equal(A, torch.zeros(2, 8))


# ----------------------------------------------------------------------------- response weights


def _weights_reference(probs_of_group, G):
    """design 3.2 written out in plain Python, independent of the project's code."""
    inv_m = [1.0 / (1.0 + (G - 1) * p) for p in probs_of_group]
    return [G * x / sum(inv_m) for x in inv_m]


def test_occurrence_weights_expectation_enumeration_vs_monte_carlo():
    pi = [0.55, 0.25, 0.15, 0.05]  # a categorical "policy" over 4 responses
    G = 4
    exact = [0.0] * 4
    for group in itertools.product(range(4), repeat=G):  # every group, with its probability
        prob = math.prod(pi[y] for y in group)
        w = _weights_reference([pi[y] for y in group], G)
        for y, wi in zip(group, w):
            exact[y] += prob * wi
    gen = torch.Generator().manual_seed(0)
    samples = torch.multinomial(torch.tensor(pi), 200_000 * G, replacement=True, generator=gen).view(-1, G)
    seq_logprobs = torch.tensor(pi, dtype=torch.float64).log()[samples]  # [P, G]
    w = occurrence_weights(seq_logprobs, "sequence", **GROUP_ALL)
    mc = [float((w * (samples == y)).sum(1).mean()) for y in range(4)]
    for e, m in zip(exact, mc):
        assert m == pytest.approx(e, rel=0.01)
    # GRPO weights a response by how often it is drawn: E[#copies] = G * pi, ratio pi_max / pi_min = 11.
    # ReCo's expected weights are flatter.
    assert exact[0] / exact[3] < pi[0] / pi[3]


def test_certain_response_has_total_raw_weight_one():
    G = 8
    raw = 1.0 / (1.0 + (G - 1) * 1.0)
    assert G * raw == 1.0
    w = occurrence_weights(torch.zeros(1, G, dtype=torch.float64), "sequence", **GROUP_ALL)  # log p = 0: p = 1 for every copy
    assert torch.allclose(w, torch.ones(1, G, dtype=torch.float64))  # normalised, all equal


def test_occurrence_weights_modes():
    P, G = 2, 4
    lp = torch.tensor([[-0.1, -2.0, -5.0, -0.1], [-3.0, -3.0, -9.0, -1.0]], dtype=torch.float64)
    for p_row, w_row in zip(lp.exp().tolist(), occurrence_weights(lp, "sequence", **GROUP_ALL).tolist()):
        assert w_row == pytest.approx(_weights_reference(p_row, G), abs=1e-12)
    assert torch.equal(occurrence_weights(lp, "none", **GROUP_ALL), torch.ones(P, G, dtype=torch.float64))
    lengths = torch.tensor([[1, 4, 5, 2], [3, 3, 3, 1]], dtype=torch.float64)
    tm = occurrence_weights(lp, "token-mean", lengths=lengths, **GROUP_ALL)
    for p_row, n_row, w_row in zip(lp.tolist(), lengths.tolist(), tm.tolist()):
        assert w_row == pytest.approx(_weights_reference([math.exp(a / n) for a, n in zip(p_row, n_row)], G), abs=1e-12)
    responses = [[1, 2], [1, 2], [3], [1, 2], [5], [5], [6], [7]]  # flat, row-major
    count = occurrence_weights(lp, "count", responses=responses, **GROUP_ALL)
    raw = [[1 / 3, 1 / 3, 1, 1 / 3], [1 / 2, 1 / 2, 1, 1]]
    for r, w_row in zip(raw, count.tolist()):
        assert w_row == pytest.approx([G * x / sum(r) for x in r], abs=1e-12)
    nested = occurrence_weights(lp, "count", responses=[responses[:4], responses[4:]], **GROUP_ALL)
    assert torch.equal(nested, count)
    for w in (occurrence_weights(lp, "sequence", **GROUP_ALL), tm, count):
        assert torch.allclose(w.mean(1), torch.ones(P, dtype=torch.float64))


def test_occurrence_weights_positive_only():
    lp = torch.tensor([[-0.1, -0.1, -3.0, -3.0]], dtype=torch.float64)
    A = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    w_all = occurrence_weights(lp, "sequence", **GROUP_ALL)
    w_pos = occurrence_weights(lp, "sequence", advantages=A, apply="positive", norm="group")
    assert w_pos[0, 1] == 1.0 and w_pos[0, 3] == 1.0
    assert w_pos[0, 0] == w_all[0, 0] and w_pos[0, 2] == w_all[0, 2]


# ----------------------------------------------------------------------------- variance statistic


@pytest.mark.parametrize("tau", [0.6, 1.0])
def test_variance_stat_matches_float64_sum_of_p_one_minus_p(tau):
    z = torch.randn(5, 7, 33) * 3
    p = torch.exp(z.double() / tau - torch.logsumexp(z.double() / tau, -1, keepdim=True))
    reference = (p * (1 - p)).sum(-1)
    assert torch.allclose(variance_stat(z, tau).double(), reference, atol=1e-6)
    assert variance_stat(torch.tensor([0.0, -1e4, -1e4])).item() == pytest.approx(0.0, abs=1e-6)  # saturated
    assert variance_stat(torch.zeros(10)).item() == pytest.approx(0.9, abs=1e-6)  # uniform: 1 - 1/V


# ----------------------------------------------------------------------------- policy loss


def _one_position(z, y, logp_old, A, token_ratio, v_old_mean=0.5, **kw):
    logp = torch.log_softmax(z, -1)[y].view(1, 1)
    v = variance_stat(z.detach()).view(1, 1)
    loss, _ = loss_of(logp, torch.tensor([[logp_old]], dtype=z.dtype), torch.tensor([A], dtype=z.dtype),
                          torch.ones(1, 1), token_ratio=token_ratio, v=v, v_old=v, v_old_mean=v_old_mean, **kw)
    return loss


def test_grpo_gradient_on_policy_is_reinforce_gradient():
    """At theta = theta_old the clipped surrogate's gradient is -A * (e_y - pi) / N (no factor 2)."""
    torch.manual_seed(0)
    B, T, V = 3, 4, 6
    z = torch.randn(B, T, V, dtype=torch.float64, requires_grad=True)
    y = torch.randint(V, (B, T))
    A = torch.tensor([1.5, -0.5, 0.7], dtype=torch.float64)
    logp = torch.log_softmax(z, -1).gather(-1, y[..., None]).squeeze(-1)
    loss, _ = loss_of(logp, logp.detach(), A, torch.ones(B, T))
    loss.backward()
    pi = torch.softmax(z.detach(), -1)
    reference = -A[:, None, None] * (torch.nn.functional.one_hot(y, V) - pi) / (B * T)
    assert torch.allclose(z.grad, reference, atol=1e-12)


def test_clip_zeroes_gradient_exactly_where_it_should_and_keep_matches():
    """Zero-gradient set of the clipped surrogate (autograd) == the analytic set == variance ratio's keep = 0."""
    eps_low, eps_high = 0.2, 0.3
    for log_r, A in itertools.product([-0.5, -0.21, 0.0, 0.15, 0.25, 0.5], [1.0, -1.0]):
        r = math.exp(log_r)
        analytic_zero = (r > 1 + eps_high and A > 0) or (r < 1 - eps_low and A < 0)
        grads = {}
        for mode in ("is", "variance", "variance-old"):
            z = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
            logp_now = torch.log_softmax(z.detach(), -1)[0].item()
            _one_position(z, 0, logp_now - log_r, A, mode, clip_low=eps_low, clip_high=eps_high).backward()
            grads[mode] = z.grad
        for mode, g in grads.items():
            assert bool((g == 0).all()) == analytic_zero, (mode, log_r, A)


def test_variance_ratio_logit_gradient_sympy_and_finite_differences():
    """d l_t / d z = -rho * A * keep * (e_y - pi) on a 3-token vocabulary."""
    z1, z2, z3 = sympy.symbols("z1 z2 z3", real=True)
    Zs = [z1, z2, z3]
    pi = [sympy.exp(z) / sum(sympy.exp(w) for w in Zs) for z in Zs]
    rho, A = sympy.Rational(13, 10), sympy.Rational(-7, 10)
    y = 1
    # l = -rho * A * exp(logp - sg(logp)): its gradient is that of -rho * A * logp with the sg'd term constant.
    sym_grad = [sympy.diff(-rho * A * sympy.log(pi[y]), z) for z in Zs]
    point = {z1: 0.2, z2: -0.4, z3: 1.1}
    expected = [float(g.subs(point)) for g in sym_grad]
    closed = [float(-rho * A * ((1 if i == y else 0) - pi[i].subs(point))) for i in range(3)]
    assert expected == pytest.approx(closed, abs=1e-12)

    z = torch.tensor([0.2, -0.4, 1.1], dtype=torch.float64, requires_grad=True)
    v = variance_stat(z.detach()).item()
    v_old_mean = v / 1.3  # so rho = 1.3
    loss = _one_position(z, y, torch.log_softmax(z.detach(), -1)[y].item(), -0.7, "variance", v_old_mean=v_old_mean)
    assert loss.item() == pytest.approx(1.3 * 0.7, abs=1e-12)  # value -rho * A
    loss.backward()
    assert z.grad.tolist() == pytest.approx(expected, abs=1e-12)

    def surrogate_with_frozen_rho(zz):  # finite differences need rho and the sg'd log-prob held fixed
        return 1.3 * 0.7 * torch.log_softmax(zz, -1)[y]

    h = 1e-6
    for i in range(3):
        e = torch.zeros(3, dtype=torch.float64)
        e[i] = h
        fd = (surrogate_with_frozen_rho(z.detach() + e) - surrogate_with_frozen_rho(z.detach() - e)) / (2 * h)
        assert z.grad[i].item() == pytest.approx(fd.item(), abs=1e-7)


def test_variance_ratio_is_capped_and_stop_gradient():
    z = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)  # V = 0.75
    logp0 = torch.log_softmax(z.detach(), -1)[0].item()
    loss = _one_position(z, 0, logp0, 1.0, "variance", v_old_mean=0.01, variance_cap=10.0)
    assert loss.item() == pytest.approx(-10.0)  # 0.75 / 0.01 = 75, capped at 10
    loss.backward()
    assert z.grad.tolist() == pytest.approx([-10 * 0.75, 10 * 0.25, 10 * 0.25, 10 * 0.25])


def test_variance_old_equals_variance_on_policy():
    torch.manual_seed(1)
    B, T, V = 4, 5, 7
    z = torch.randn(B, T, V, dtype=torch.float64)
    y = torch.randint(V, (B, T))
    A = torch.randn(B, dtype=torch.float64)
    vs = variance_stat(z)
    out = {}
    for mode in ("variance", "variance-old"):
        zz = z.clone().requires_grad_(True)
        logp = torch.log_softmax(zz, -1).gather(-1, y[..., None]).squeeze(-1)
        loss, _ = loss_of(logp, logp.detach(), A, torch.ones(B, T), token_ratio=mode, v=vs, v_old=vs,
                              v_old_mean=vs.mean())
        loss.backward()
        out[mode] = (loss.item(), zz.grad)
    assert out["variance"][0] == pytest.approx(out["variance-old"][0], abs=1e-12)
    assert torch.allclose(out["variance"][1], out["variance-old"][1], atol=1e-12)


def test_reco_with_every_term_off_is_grpo_bit_for_bit():
    torch.manual_seed(2)
    B, T, V = 6, 5, 9
    z = torch.randn(B, T, V)
    y = torch.randint(V, (B, T))
    old = torch.log_softmax(z + 0.3 * torch.randn(B, T, V), -1).gather(-1, y[..., None]).squeeze(-1)
    A = torch.randn(B)
    mask = (torch.rand(B, T) > 0.2).float()
    results = []
    for weights in (None, occurrence_weights(torch.randn(B // 2, 2), "none", **GROUP_ALL).flatten()):
        zz = z.clone().requires_grad_(True)
        logp = torch.log_softmax(zz, -1).gather(-1, y[..., None]).squeeze(-1)
        loss, _ = loss_of(logp, old, A, mask, token_ratio="is", weights=weights)
        loss.backward()
        results.append((loss, zz.grad))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("mode", ["is", "variance", "variance-old"])
def test_sign_correctness_one_small_step(mode):
    """A positive advantage never lowers the sampled token's probability; a negative one never raises it."""
    gen = torch.Generator().manual_seed(3)
    for trial in range(200):
        z0 = torch.randn(5, generator=gen, dtype=torch.float64) * 2
        y = int(torch.randint(5, (1,), generator=gen))
        A = 1.0 if trial % 2 else -1.0
        z = z0.clone().requires_grad_(True)
        logp_old = torch.log_softmax(z0, -1)[y].item() + 0.1 * float(torch.randn(1, generator=gen))
        _one_position(z, y, logp_old, A, mode).backward()
        p_before = torch.softmax(z0, -1)[y]
        p_after = torch.softmax(z0 - 1e-3 * z.grad, -1)[y]
        if A > 0:
            assert p_after >= p_before - 1e-15
        else:
            assert p_after <= p_before + 1e-15


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.tensor([[0.0, 0.0]], dtype=torch.float64)
    old = torch.tensor([[-3.0, -0.05]], dtype=torch.float64)  # ratios e^3 ~ 20.1 and ~1.05
    A = torch.tensor([-1.0], dtype=torch.float64)
    loss, _ = loss_of(logp, old, A, torch.ones(1, 2), dual_clip=3.0)
    r2 = math.exp(0.05)
    assert loss.item() == pytest.approx((3.0 + max(r2, 0.8)) / 2)  # token 1: min(20.1, 3) * 1; token 2 unclipped


def test_k3_kl_term_value():
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    loss_kl, _ = loss_of(logp, logp, torch.zeros(1, dtype=torch.float64), torch.ones(1, 2), ref_logp=ref, kl_coef=0.1)
    expected = sum(math.exp(q) - q - 1 for q in (-0.5, 1.0)) / 2 * 0.1
    assert loss_kl.item() == pytest.approx(expected)


def test_aggregations_and_micro_batch_normalisation():
    torch.manual_seed(4)
    B, T = 6, 5
    logp = torch.randn(B, T, dtype=torch.float64, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(B, T, dtype=torch.float64)
    A = torch.randn(B, dtype=torch.float64)
    mask = torch.tensor([[1] * t + [0] * (T - t) for t in (5, 3, 1, 4, 2, 5)], dtype=torch.float64)
    per_token = -torch.min((logp - old).exp() * A[:, None], (logp - old).exp().clamp(0.8, 1.2) * A[:, None])
    tm, _ = loss_of(logp, old, A, mask)
    assert tm.item() == pytest.approx(((per_token * mask).sum() / mask.sum()).item())
    sm, _ = loss_of(logp, old, A, mask, aggregation="seq-mean-token-mean")
    assert sm.item() == pytest.approx(((per_token * mask).sum(1) / mask.sum(1)).mean().item())
    # Two micro-batches with the global token count sum to the full-batch loss and gradient.
    full_grad = torch.autograd.grad(tm, logp)[0]
    parts = [loss_of(logp[i:i + 3], old[i:i + 3], A[i:i + 3], mask[i:i + 3], num_tokens=mask.sum())[0]
             for i in (0, 3)]
    assert (parts[0] + parts[1]).item() == pytest.approx(tm.item(), abs=1e-12)
    assert torch.allclose(torch.autograd.grad(parts[0] + parts[1], logp)[0], full_grad, atol=1e-14)


def test_dual_clip_caps_variance_ratio_loss_and_zeroes_its_gradient():
    z = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64, requires_grad=True)  # V = 0.75
    logp0 = torch.log_softmax(z.detach(), -1)[0].item()
    loss = _one_position(z, 0, logp0, -1.0, "variance", v_old_mean=0.15, dual_clip=3.0)  # rho = 5 > C = 3
    assert loss.item() == pytest.approx(3.0)
    loss.backward()
    assert torch.equal(z.grad, torch.zeros(4, dtype=torch.float64))


def test_occurrence_weights_clear_errors():
    lp = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="needs responses"):
        occurrence_weights(lp, "count", **GROUP_ALL)
    with pytest.raises(ValueError, match="needs responses"):
        occurrence_weights(lp, "token-mean", **GROUP_ALL)
    with pytest.raises(ValueError, match="needs advantages"):
        occurrence_weights(lp, "sequence", apply="positive")
    with pytest.raises(ValueError, match="expected P\\*G"):
        occurrence_weights(lp, "count", responses=[[1], [2]], **GROUP_ALL)


# ----------------------------------------------------------------------------- F-GRPO, the registry


def test_focal_scale_hand_formula():
    from reco_mini import focal_scale

    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [0.0] * 4, [1.0] * 4])
    for gamma in (0.0, 0.5, 1.0, 2.0):
        expected = [(1 - 0.25) ** gamma, (1 - 0.75) ** gamma, 1.0, 0.0 ** gamma]
        assert focal_scale(rewards, gamma).tolist() == pytest.approx(expected)
    assert torch.equal(focal_scale(rewards, 0.0), torch.ones(4))  # gamma 0 is plain GRPO


def test_f_grpo_is_grpo_with_focal_scaled_advantages():
    from reco_mini import METHODS, loss_config

    assert loss_config(LossConfig(), "f-grpo") == LossConfig(occurrence="none", token_ratio="is", focal_gamma=1.0)
    assert loss_config(LossConfig(focal_gamma=0.5), "reco").focal_gamma == 0.5  # the flag combines with any method
    assert all(loss_config(LossConfig(), m).focal_gamma == (1.0 if m == "f-grpo" else 0.0) for m in METHODS)


def test_a_new_variant_is_one_registered_function():
    from reco_mini import TOKEN_RATIOS, importance_ratio, register

    @register(TOKEN_RATIOS, "half-is")  # a toy variant: half of GRPO's token loss
    def half(t, cfg):
        return 0.5 * importance_ratio(t, cfg)[0], None

    try:
        logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
        old = logp + 0.05
        full, _ = loss_of(logp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2))
        halved, _ = loss_of(logp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), token_ratio="half-is")
        assert halved.item() == pytest.approx(0.5 * full.item())
    finally:
        del TOKEN_RATIOS["half-is"]
    with pytest.raises(ValueError, match="token-ratio must be one of"):
        LossConfig(token_ratio="half-is")


def test_count_means_identical_token_ids():
    lp = torch.zeros(1, 4, dtype=torch.float64)
    # responses 0 and 1 decode to the same text in many tokenizers but are different token-id sequences
    w = occurrence_weights(lp, "count", responses=[[5, 6], [11], [5, 6], [7]], **GROUP_ALL)
    inv = [1 / 2, 1, 1 / 2, 1]
    assert w[0].tolist() == pytest.approx([4 * x / sum(inv) for x in inv])


def test_occurrence_weights_defaults_are_loss_configs():
    """One set of defaults: a call that names neither apply nor norm weighs as LossConfig's defaults do."""
    lp = torch.log(torch.tensor([[0.5, 0.5, 0.1, 0.01], [0.2, 0.2, 0.2, 0.3]], dtype=torch.float64))
    A = torch.tensor([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    cfg = LossConfig()
    named = occurrence_weights(lp, "sequence", advantages=A, apply=cfg.occurrence_apply, norm=cfg.occurrence_norm)
    assert torch.equal(occurrence_weights(lp, "sequence", advantages=A), named)
    inv_m = 1 / (1 + 3 * lp.exp())
    assert (cfg.occurrence_apply, cfg.occurrence_norm) == ("all", "group")  # since the replication study (issue 59)
    assert torch.allclose(named, inv_m / inv_m.mean(dim=1, keepdim=True), rtol=0, atol=1e-15)  # per group, every response
