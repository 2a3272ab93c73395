"""reco_mini's math keeps its inputs' device (issue 18): inputs on the `meta` device give outputs on `meta`.

Every test on CPU would pass if a function built a tensor without `device=` (it lands on the CPU, where
the inputs are too). On `meta` such a tensor is a CPU tensor, and the result either comes back on the
CPU or the function raises "not on the expected device meta" -- what a CUDA run would do.
"""
from __future__ import annotations

import pytest
import torch

from reco_mini import OCCURRENCES, TOKEN_RATIOS, LossConfig, focal_scale, group_advantages, occurrence_weights, policy_loss

META = torch.device("meta")
P, G, T = 3, 4, 5
RESPONSES = [[1, 2], [1, 2], [3], [4, 5, 6]] * P  # P*G token-id lists, row-major; copies within each group
KEYS = ["a+b", "a+b", "c", "a+b"] * P  # P*G canonical keys, for "canonical"


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device=META)


def assert_meta(x):
    assert x.device == META, f"came back on {x.device}"


@pytest.mark.parametrize("apply", ["all", "positive"])
@pytest.mark.parametrize("mode", sorted(OCCURRENCES))
def test_occurrence_weights_stay_on_the_input_device(mode, apply):
    kw = ({"advantages": meta(P, G)} if apply == "positive" else {}) | {"keys": KEYS}
    w = occurrence_weights(meta(P, G), mode, RESPONSES, None, apply=apply, norm="group", **kw)  # lengths built from responses
    assert_meta(w)
    assert w.shape == (P, G)
    w = occurrence_weights(meta(P, G), mode, RESPONSES, meta(P, G), apply=apply, norm="batch", **kw)  # lengths given
    assert_meta(w)


@pytest.mark.parametrize("mode", sorted(OCCURRENCES))
def test_each_registered_occurrence_mode_stays_on_the_input_device(mode):
    m = OCCURRENCES[mode](meta(P, G, dtype=torch.float64), meta(P, G, dtype=torch.float64),
                          [tuple(r) for r in RESPONSES], KEYS)
    assert_meta(m)


# SimKO branches in Python on each response's mask (its entropy quantile), which a meta tensor cannot answer
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("token_ratio", sorted(set(TOKEN_RATIOS) - {"simko"}))
def test_policy_loss_stays_on_the_input_device(token_ratio, aggregation):
    B = P * G
    # every input any registered term reads: the responses and logits (SimKO), a study's token mask (the fork arms)
    batch = {"old_logp": meta(B, T), "mask": meta(B, T), "advantages": meta(B), "weights": meta(B),
             "v_old": meta(B, T), "v_old_mean": meta(()), "ref_logp": meta(B, T),
             "resp": meta(B, T, dtype=torch.long), "select": meta(B, T)}
    cfg = LossConfig(token_ratio=token_ratio, dual_clip=3.0, kl_coef=0.1, aggregation=aggregation)
    logp = meta(B, T).requires_grad_(True)
    loss, stats = policy_loss(logp, batch, cfg, meta(B, T), logits=meta(B, T, 7).requires_grad_(True))
    assert_meta(loss)
    assert loss.shape == ()
    for name, x in stats.items():
        assert isinstance(x, torch.Tensor) and x.device == META, name  # statistics stay tensors: no device sync
    if token_ratio in ("is", "variance", "variance-old"):  # reco_mini's own terms (a study's may report no rho)
        assert ("rho_mean" in stats) == (token_ratio != "is")
    loss.backward()
    assert_meta(logp.grad)
    loss, _ = policy_loss(logp, batch, cfg, v=meta(B, T), num_tokens=meta(()), num_seqs=meta(()))  # global normaliser
    assert_meta(loss)


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_group_advantages_and_focal_scale_stay_on_the_input_device(scale_by_std):
    assert_meta(group_advantages(meta(P, G), scale_by_std=scale_by_std))
    for gamma in (0.0, 1.0, 2.5):
        assert_meta(focal_scale(meta(P, G), gamma))


@pytest.mark.parametrize("with_head", [False, True])
def test_token_stats_stays_on_the_input_device(with_head):
    from reco_mini import token_stats

    B, V, H = 2, 11, 6
    head = torch.nn.Linear(H, V, bias=False, device=META) if with_head else None
    x = meta(B, T, H if with_head else V).requires_grad_(True)
    logp, v, h = token_stats(x, torch.empty(B, T, dtype=torch.long, device=META), 0.7, 4, head)
    for out in (logp, v, h):
        assert_meta(out)
        assert out.shape == (B, T)
    logp.sum().backward()
    assert_meta(x.grad)
    if with_head:
        assert_meta(head.weight.grad)
