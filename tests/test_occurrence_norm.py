"""--occurrence-norm (issue 52): what ReCo's 1/m_i is divided by, against closed forms, and where each step's update
goes (update_share_*), by hand; reco_scaled's batch mean over ranks at world size 2 equals world size 1 (gloo).

The closed forms are written here, in plain Python, from docs/design.md §3.2: m = 1 + (G - 1) p for a response of
probability p, so a group of G copies of it has raw total weight G / (1 + (G - 1) p).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reco_mini
from reco.cli import ConfigError
from reco.log import update_shares, update_sizes
from reco_mini import occurrence_weights

ROOT = Path(__file__).resolve().parents[1]


def test_none_gives_a_group_of_copies_total_weight_g_over_one_plus_g_minus_one_p():
    for G, p in ((8, 0.5), (4, 0.9), (16, 0.01)):
        lp = torch.full((1, G), p, dtype=torch.float64).log()
        w = occurrence_weights(lp, "sequence", apply="all", norm="none")
        assert w.sum().item() == pytest.approx(G / (1 + (G - 1) * p), rel=1e-12)
        group = occurrence_weights(lp, "sequence", apply="all", norm="group")
        assert group.sum().item() == pytest.approx(G, rel=1e-12)  # GRPO's total


def test_batch_mean_is_one_and_a_concentrated_group_gives_up_weight():
    G, p_likely, p_rare = 8, 0.5, 1e-3
    lp = torch.tensor([[p_likely] * G, [p_rare] * G], dtype=torch.float64).log()  # a concentrated group, a spread one
    inv = [1 / (1 + (G - 1) * p) for p in (p_likely, p_rare)]
    w = occurrence_weights(lp, "sequence", apply="all", norm="batch")
    assert w.mean().item() == pytest.approx(1.0, rel=1e-12)
    share = w[0].sum().item() / w.sum().item()
    assert share == pytest.approx(inv[0] / (inv[0] + inv[1]), rel=1e-12) and share < 0.25
    group = occurrence_weights(lp, "sequence", apply="all", norm="group")
    assert group[0].sum().item() == pytest.approx(G)  # group: half the batch's weight


def test_batch_mean_of_a_part_equals_the_whole_batch():
    lp = -torch.rand(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5
    whole = occurrence_weights(lp, "sequence", apply="all", norm="batch")
    mean = (1 / (1 + 3 * lp.exp())).mean()
    part = occurrence_weights(lp[:2], "sequence", apply="all", norm="batch", batch_mean=mean)
    assert torch.allclose(part, whole[:2], rtol=0, atol=1e-15)


@pytest.mark.parametrize("norm", ["group", "batch", "none"])
def test_positive_only_composes_with_every_norm(norm):
    lp = torch.tensor([[-0.1, -0.1, -3.0, -3.0], [-0.2, -5.0, -5.0, -5.0]], dtype=torch.float64)
    A = torch.tensor([[1.0, -1.0, 1.0, -1.0], [0.0, 1.0, -1.0, 1.0]])
    inv = 1 / (1 + 3 * lp.exp())
    Z = {"group": inv.mean(1, keepdim=True), "batch": inv.mean(), "none": torch.tensor(1.0, dtype=torch.float64)}[norm]
    expected = torch.where(A > 0, inv / Z, torch.ones_like(inv))
    assert torch.allclose(occurrence_weights(lp, "sequence", advantages=A, apply="positive", norm=norm), expected, atol=1e-15)


def test_unknown_norm_is_an_error_naming_the_flag():
    with pytest.raises(ValueError, match="norm 'mean'"):
        occurrence_weights(torch.zeros(1, 4), "sequence", apply="all", norm="mean")
    with pytest.raises(ConfigError, match="--occurrence-norm must be one of"):
        reco_mini.LossConfig(occurrence_norm="mean")
    assert reco_mini.parse_config(["--method", "reco", "--occurrence-norm", "batch"]).occurrence_norm == "batch"


def test_update_shares_by_hand():
    # G = 4: groups with 0, 1, 2, 3 and 4 correct responses -> hard (c <= 1), hard, mid, easy (c >= 3), easy
    rewards = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float)
    A = torch.tensor([[0, 0, 0, 0], [3, -1, -1, -1], [1, 1, -1, -1], [1, 1, 1, -3], [0, 0, 0, 0]], dtype=torch.float)
    w = torch.tensor([[1, 1, 1, 1], [2, 1, 1, 1], [1, 1, 1, 1], [0.5, 0.5, 0.5, 1], [1, 1, 1, 1]])
    sizes = update_sizes(rewards, A.flatten(), w.flatten())
    assert sizes.tolist() == [9.0, 4.0, 4.5]  # |2*3| + 3 ; 4 ; 1.5 + 3
    shares = update_shares(sizes)
    assert shares == pytest.approx({"update_share_hard": 9 / 17.5, "update_share_mid": 4 / 17.5,
                                    "update_share_easy": 4.5 / 17.5})
    assert update_shares(update_sizes(rewards, torch.zeros(20), w.flatten())) == {
        "update_share_hard": None, "update_share_mid": None, "update_share_easy": None}


def test_train_rl_logs_batch_normalised_weights_and_shares(tmp_path):
    from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

    cfg = reco_mini.parse_config(["--method", "reco", "--occurrence-norm", "batch", "--occurrence-apply", "all", "--n-train",
                                  "16", "--n-test", "2", "--steps", "2", "--prompts-per-step", "4", "--group-size", "4",
                                  "--device", "cpu"])
    tok = char_tokenizer()
    torch.manual_seed(0)
    model = tiny_model(tok, hidden=16, layers=1)
    reco_mini.train_rl(cfg, "reco", model, None, tok, make_splits(cfg)["train"], tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    for row in rows:
        assert row["w_mean"] == pytest.approx(1.0, rel=1e-6) and row["w_min"] < row["w_max"]  # 1 over the batch
        shares = [row[f"update_share_{k}"] for k in ("hard", "mid", "easy")]
        assert shares == [None] * 3 or sum(shares) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- the defaults (issue 52)

OLD_DEFAULTS = ["--occurrence-norm", "group", "--occurrence-apply", "all"]  # before and after the normalisation study's


def test_defaults_are_group_normalised_weights_on_every_response_everywhere():
    """The normalisation study made batch/positive the default; the replication study did not confirm it, and by its
    pre-written rule the default went back to group/all on every path (reco_mini, lab, reco_scaled, TRL, verl)."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import lab

    from reco_scaled.config import AlgoConfig

    for cfg in (reco_mini.LossConfig(), reco_mini.parse_config([]), lab.parse_config([]), AlgoConfig()):
        assert (cfg.occurrence_norm, cfg.occurrence_apply) == ("group", "all")
    assert list(lab.STUDY_PINS) == OLD_DEFAULTS
    old = reco_mini.parse_config(OLD_DEFAULTS)
    assert (old.occurrence_norm, old.occurrence_apply) == ("group", "all")


def test_weights_of_occurrence_none_are_one_under_the_old_and_new_defaults():
    lp = -torch.rand(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3
    A = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    new = occurrence_weights(lp, "none", advantages=A, apply="positive", norm="batch")
    old = occurrence_weights(lp, "none", advantages=A, apply="all", norm="group")
    assert torch.equal(new, old) and torch.equal(new, torch.ones_like(lp))


@pytest.mark.parametrize("method", ["grpo", "f-grpo", "reco-token"])
def test_methods_without_response_weights_train_bit_identically_under_the_old_and_new_defaults(tmp_path, monkeypatch,
                                                                                                method):
    """occurrence "none" (w_i = 1): the move to batch / positive changes no logged value (loss, weights, gradient
    norm, ...) and no final weight of GRPO, F-GRPO or reco-token, bit for bit."""
    from reco.tasks import TASKS
    from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model

    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))  # A != 0
    argv = ["--method", method, "--n-train", "16", "--n-test", "2", "--steps", "3", "--prompts-per-step", "4",
            "--group-size", "4", "--max-new-tokens", "12", "--device", "cpu"]
    tok, runs = char_tokenizer(), {}
    torch.manual_seed(0)
    base = tiny_model(tok, hidden=16, layers=1)
    for name, flags in (("new", []), ("old", OLD_DEFAULTS)):
        cfg = reco_mini.parse_config([*argv, *flags])
        model = tiny_model(tok, hidden=16, layers=1)
        model.load_state_dict(base.state_dict())
        (tmp_path / name).mkdir()
        torch.manual_seed(cfg.seed)
        reco_mini.train_rl(cfg, method, model, None, tok, make_splits(cfg)["train"], tmp_path / name)
        rows = [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
                for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        runs[name] = rows, model.state_dict()
    (new_rows, new_state), (old_rows, old_state) = runs["new"], runs["old"]
    assert len(new_rows) == 3 and new_rows == old_rows
    assert all(row["w_min"] == row["w_max"] == 1 for row in new_rows) and any(row["adv_abs_mean"] > 0 for row in new_rows)
    assert all(torch.equal(new_state[k], old_state[k]) for k in new_state)
    assert not all(torch.equal(new_state[k], base.state_dict()[k]) for k in new_state)  # it did train


# ---------------------------------------------------------------------------- reco_scaled at world size 2

def scaled_case() -> tuple[reco_mini.LossConfig, torch.Tensor, list, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four groups of four with repeats (for count) and a spread of probabilities, one group all correct. Rank 0
    takes the first two groups (mean 1/m 0.875), rank 1 the last two (0.375): a per-rank mean would be wrong."""
    cfg = reco_mini.LossConfig(occurrence="count", occurrence_norm="batch", occurrence_apply="positive")
    g = torch.Generator().manual_seed(3)
    seq_logp = -torch.rand(4, 4, generator=g, dtype=torch.float64) * 4
    responses = [[1], [1], [2], [3], [6], [7], [8], [9], [4], [4], [4], [5], [1], [1], [1], [1]]
    lengths = torch.tensor([len(r) for r in responses], dtype=torch.float64).view(4, 4)
    rewards = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 1], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float)
    return cfg, seq_logp, responses, lengths, rewards, reco_mini.group_advantages(rewards)


def worker(out: str) -> None:
    """Under torchrun: each rank takes two of the four groups; rank 0 saves every rank's weights and the shares."""
    from reco_scaled import distributed
    from reco_scaled.trainer import response_weights

    d = distributed.init()
    cfg, seq_logp, responses, lengths, rewards, A = scaled_case()
    rows = slice(2 * d.rank, 2 * d.rank + 2)
    w = response_weights(cfg, seq_logp[rows], responses[rows.start * 4: rows.stop * 4], lengths[rows], A[rows])
    shares = update_shares(distributed.all_sum(update_sizes(rewards[rows], A[rows].flatten(), w.flatten())))
    parts = [torch.zeros_like(w) for _ in range(d.world_size)]
    torch.distributed.all_gather(parts, w)
    if d.main:
        torch.save({"w": torch.cat(parts), "shares": shares}, out)
    distributed.shutdown()


def test_batch_norm_at_world_size_two_equals_world_size_one(tmp_path):
    from reco_scaled.trainer import response_weights

    out = tmp_path / "w.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = torch.load(out, weights_only=False)
    cfg, seq_logp, responses, lengths, rewards, A = scaled_case()
    inv_m = occurrence_weights(seq_logp, "count", responses, lengths, apply="all", norm="none")
    assert [inv_m[:2].mean().item(), inv_m[2:].mean().item(), inv_m.mean().item()] == [0.875, 0.375, 0.625]
    whole = occurrence_weights(seq_logp, "count", responses, lengths, A, "positive", norm="batch")  # reco_mini's
    torch.testing.assert_close(got["w"], whole, rtol=0, atol=1e-12)
    one = response_weights(cfg, seq_logp, responses, lengths, A)  # a single process: the whole batch
    torch.testing.assert_close(one, whole, rtol=0, atol=1e-12)
    group = occurrence_weights(seq_logp, "count", responses, lengths, A, "positive", norm="group")
    assert not torch.allclose(one, group)
    assert got["shares"] == pytest.approx(update_shares(update_sizes(rewards, A.flatten(), one.flatten())))


def test_reco_scaled_averages_one_over_m_in_float64_as_reco_mini_does():
    """reco_scaled rounded 1/m to float32 before averaging it, so some weights differed from reco_mini's in the
    last bit (issue 60); the float32 log-probs of a large batch must give reco_mini's weights exactly."""
    from reco_scaled.trainer import response_weights

    g = torch.Generator().manual_seed(0)
    seq_logp = -torch.rand(64, 8, generator=g) * 3  # float32, as the trainer's are
    A = torch.randn(64, 8, generator=g)
    cfg = reco_mini.LossConfig(occurrence="sequence", occurrence_norm="batch", occurrence_apply="positive")
    expected = occurrence_weights(seq_logp, "sequence", advantages=A, apply="positive", norm="batch")
    assert torch.equal(response_weights(cfg, seq_logp, None, None, A), expected)


if __name__ == "__main__":
    worker(sys.argv[1])
