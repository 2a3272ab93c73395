"""experiments/replication_study.py, the replication study (issue 59): the reco-prompt arm's pooling against a loop over
each group, the family, leave-one-seed-out against a brute-force recomputation, the pool of two studies, the rule for
the default, the plan the pre-registration states, and the whole pipeline on a tiny model."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import lab  # noqa: E402, F401  (files SimKO's token ratio in reco_mini, for good: before the snapshot below)

import reco_mini as rm  # noqa: E402

_REGISTRIES = (rm.METHODS, rm.TOKEN_RATIOS, rm.OCCURRENCES)
_BEFORE = [set(r) for r in _REGISTRIES]
import replication_study as rs  # noqa: E402
from analysis import holm  # noqa: E402
from protocol import compare  # noqa: E402

# As in tests/test_norm_study.py: the fork arms that importing the studies registers are removed again.
for _registry, _names in zip(_REGISTRIES, _BEFORE):
    for _name in set(_registry) - _names:
        del _registry[_name]
for _module in ("fork_arms", "fork_study"):
    sys.modules.pop(_module, None)
from reco.tasks import TASKS  # noqa: E402


def test_prompt_mean_gives_each_positive_response_its_groups_positive_mean():
    torch.manual_seed(0)
    w = torch.rand(5, 6, dtype=torch.float64) + 0.5
    A = torch.randn(5, 6, dtype=torch.float64)
    A[3] = -1.0  # a group with no positive response keeps its weights
    pooled = lab.pool_positive_mean(w, A)
    for p in range(5):
        positive = [g for g in range(6) if A[p, g] > 0]
        for g in range(6):
            expected = sum(w[p, j].item() for j in positive) / len(positive) if g in positive else w[p, g].item()
            assert pooled[p, g].item() == pytest.approx(expected, rel=1e-12)
        assert pooled[p].sum().item() == pytest.approx(w[p].sum().item())  # a group's total is kept


def test_the_reco_prompt_arm_parses_and_a_bad_pool_is_one_line(capsys):
    method, flags = rs.ARMS["reco-prompt"]
    cfg = lab.parse_config([*lab.STUDY_PINS, *flags, "--method", method])
    loss = lab.loss_config(cfg, method)
    assert (loss.weight_pool, loss.occurrence_norm, loss.occurrence_apply) == ("prompt-mean", "batch", "positive")
    assert lab.loss_config(lab.parse_config(["--method", "reco"]), "reco").weight_pool == "none"
    with pytest.raises(SystemExit) as exc:
        lab.parse_config(["--weight-pool", "median"])
    assert exc.value.code == 2 and "weight_pool" in capsys.readouterr().err.replace("-", "_")


def test_every_reco_arm_writes_the_tested_form_out():
    """The arms name batch/positive (the default they tested) in their flags, so the default's return to group/all
    after the study does not change what they ran."""
    for arm, (method, flags) in rs.ARMS.items():
        cfg = lab.loss_config(lab.parse_config([*lab.STUDY_PINS, *flags, "--method", method]), method)
        if method.startswith("reco"):
            assert (cfg.occurrence_norm, cfg.occurrence_apply) == ("batch", "positive"), arm


def _paths(gaps: dict) -> tuple[dict, dict]:
    """Two arms whose Pass@256 paths differ by a seed's gap over a shared Pass@1 range."""
    ref = {s: [(0.1, 0.9), (0.2, 0.8), (0.3, 0.7)] for s in gaps}
    arm = {s: [(p, v + d) for p, v in ref[s]] for s, d in gaps.items()}
    ones = {s: [(p, p) for p, _ in ref[s]] for s in gaps}
    return {"reco": arm, "grpo": ref}, {"reco": ones, "grpo": ones}


def _curves(gaps_by_lr: dict) -> tuple[dict, dict]:
    curves, ones = {}, {}
    for lr, gaps in gaps_by_lr.items():
        c, o = _paths(gaps)
        for arm in c:
            curves[f"{arm}@{lr:g}"], ones[f"{arm}@{lr:g}"] = c[arm], o[arm]
    return curves, ones


def test_leave_one_seed_out_is_the_family_without_that_seed():
    gaps = {1e-4: dict(zip(range(800, 808), (0.03, 0.04, 0.02, 0.05, 0.03, 0.04, 0.01, 0.035))),
            2e-4: dict(zip(range(800, 808), (0.10, -0.05, 0.02, 0.06, -0.01, 0.07, 0.00, 0.04)))}
    curves, ones = _curves(gaps)
    loso = rs.leave_one_seed_out(curves, ones, rs.LRS)
    assert [d["left_out"] for d in loso] == list(range(800, 808))
    for d in loso:  # brute force: the t-test on the seven remaining gaps, Holm over the two lrs
        ps = []
        for lr in rs.LRS:
            kept = {s: g for s, g in gaps[lr].items() if s != d["left_out"]}
            c, o = _paths(kept)
            ps.append(compare(c["reco"], c["grpo"], statistics=("primary",))["primary"]["p_greater"])
            assert d["rows"][len(ps) - 1]["mean"] == pytest.approx(sum(kept.values()) / 7)
        assert [r["p_holm"] for r in d["rows"]] == pytest.approx(holm(ps))
    assert all(d["rows"][0]["confirmed"] for d in loso)  # every 1e-4 gap is positive and close


def test_the_pool_pairs_both_studies_seeds_and_renames_the_earlier_arm():
    curves, ones = _curves({1e-4: {800: 0.02, 801: 0.04}, 2e-4: {800: 0.01, 801: 0.03}})
    def run(arm, lr, seed, level):
        traj = [{"step": s, "pass_at_k": {"1": p, "256": level - s / 100}} for s, p in ((5, 0.1), (10, 0.2), (20, 0.3))]
        return {"spec": {"phase": "confirm", "arm": arm, "lr": lr, "seed": seed}, "trajectory": traj}
    earlier = [run(a, lr, s, 0.95 + (0.06 if a == "reco-positive-batch" else 0)) for lr in rs.LRS for s in (700, 701)
               for a in ("grpo", "reco-positive-batch", "reco-batch")]
    rows = rs.pooled(curves, ones, earlier, "256", rs.LRS)
    first = next(r for r in rows if r["name"] == "reco - grpo @ 0.0001")
    assert first["n"] == 4 and first["mean"] == pytest.approx((0.06 + 0.06 + 0.02 + 0.04) / 4)
    assert all(r["mean"] is None for r in rows if r["reference"] == "f-grpo")  # no f-grpo runs here


def test_the_default_stays_if_confirmed_at_one_lr_or_both():
    def family(confirmed):
        return [{"lr": lr, "confirmed": lr in confirmed} for lr in rs.LRS]
    assert rs.default_decision(family(()), partial=False)["stays"] is False
    assert rs.default_decision(family((2e-4,)), partial=False)["stays"] is True
    assert rs.default_decision(family(rs.LRS), partial=False)["confirmed_at"] == list(rs.LRS)
    assert rs.default_decision(family(rs.LRS), partial=True)["decided"] is False


def test_fresh_seeds_seed_by_seed_and_the_pre_registration_states_the_projection():
    plan = {"seeds": rs.SEEDS, "lrs": rs.LRS, "base_sha256": "ab" * 32}
    specs = rs.confirm_specs(plan)
    assert len(specs) == 80 and {s["seed"] for s in specs[:len(rs.ARMS) * len(rs.LRS)]} == {rs.SEEDS[0]}
    assert not set(rs.SEEDS) & rs.USED_SEEDS
    p = rs.projection(plan)
    text = " ".join((ROOT / "docs" / "replication_study.md").read_text().replace("−", "-").split())
    assert f"**{p['confirm_hours']:.2f} h** for the 80 runs" in text and p["confirm_hours"] <= rs.BUDGET_HOURS
    for rule in (rs.DEFAULT_RULE.split(".")[0], "Holm at α = 0.05 over the two"):
        assert " ".join(rule.replace("`", "").split()) in text.replace("`", ""), rule


def test_quick_study_end_to_end_resumes_and_renders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # A tiny model seldom solves Countdown: a reward of the response's length gives every band of groups some updates.
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 2 == 0))
    out, results = tmp_path / "runs", tmp_path / "q.json"
    args = ["--quick", "--out", str(out), "--results", str(results)]
    summary = rs.main(args)
    assert not summary["partial"] and summary["compute"]["runs"] == 1 + len(rs.ARMS) * len(rs.LRS) * 2
    assert [r["name"] for r in summary["family"]] == [f"reco - grpo @ {lr:g}" for lr in rs.LRS]
    assert "another base" in summary["pooled_not_possible"] and summary["pooled"] == []  # the quick base is not the study's
    prompt = json.loads(next(out.glob("base-*/confirm/reco-prompt/*/seed800/result.json")).read_text())
    reco = json.loads(next(out.glob("base-*/confirm/reco/*/seed800/result.json")).read_text())
    assert prompt["logged"]["w_mean"][0] == pytest.approx(reco["logged"]["w_mean"][0])  # same step 0, same totals
    assert prompt["logged"]["w_max"][0] <= reco["logged"]["w_max"][0] + 1e-12  # averaging never raises the largest
    lost = next(out.glob("base-*/confirm/grpo/*/seed801/result.json"))
    lost.unlink()
    assert rs.main(args)["compute"]["runs_this_invocation"] == 0 and lost.exists()
    block = rs.render_block(summary, "q.json", "q.png")
    assert "The replication" in block and "PARTIAL" not in block
    summary["partial"] = True
    assert "PARTIAL: the study has not finished" in rs.render_block(summary, "q.json", "q.png")


def test_the_committed_block_is_the_render_of_the_committed_summary():
    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split(rs.BEGIN, 1)[1].split(rs.END, 1)[0].strip()
    path = ROOT / "results" / "replication_study.json"
    if not path.exists():  # pre-registered, no run summarised yet: the block is empty
        assert block == ""
        return
    summary = json.loads(path.read_text())
    assert block == rs.render_block(summary, "results/replication_study.json", "../results/replication_study.png").strip()
    assert ("PARTIAL: the study has not finished" in block) == summary["partial"]
