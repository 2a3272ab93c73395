"""experiments/norm_study.py, the normalisation study (issue 52): the last-visit reading against a brute-force walk of the
path, the family and the rule for the default on worked inputs, the plan's order, the projection the pre-registration
states, and the whole pipeline on a tiny model: it runs, logs where each update goes, resumes from its archive and
renders its block."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import lab  # noqa: E402, F401  (files SimKO's token ratio in reco_mini, for good: before the snapshot below)

import reco_mini as rm  # noqa: E402

_REGISTRIES = (rm.METHODS, rm.TOKEN_RATIOS, rm.OCCURRENCES)
_BEFORE = [set(r) for r in _REGISTRIES]
import norm_study as ns  # noqa: E402
from protocol import first_reach, last_reach, last_visit_gap, mean_gap  # noqa: E402

# norm_study imports control_study, then fork_study, whose fork_arms registers the fork arms in reco_mini at import; none
# is an arm here, and other modules parametrize over the registries at collection: they are removed again (as in
# tests/test_control_study.py), and fork_arms is dropped so that test_fork_study registers its own.
for _registry, _names in zip(_REGISTRIES, _BEFORE):
    for _name in set(_registry) - _names:
        del _registry[_name]
for _module in ("fork_arms", "fork_study"):
    sys.modules.pop(_module, None)
from reco.tasks import TASKS  # noqa: E402


def _walk_last(curve, level, steps=20000):
    """The last point of the path, walked in small steps along each segment, whose Pass@1 is within a step of level."""
    found = None
    for (p0, v0), (p1, v1) in zip(curve, curve[1:]):
        for i in range(steps + 1):
            t = i / steps
            p = p0 + t * (p1 - p0)
            if abs(p - level) <= abs(p1 - p0) / steps + 1e-12:
                found = v0 + t * (v1 - v0)
    return found


def test_last_reach_is_the_last_crossing_of_the_path():
    curve = [(0.1, 0.9), (0.5, 0.6), (0.3, 0.8), (0.6, 0.5), (0.45, 0.55)]
    for level in (0.12, 0.2, 0.3, 0.35, 0.44, 0.5, 0.58, 0.6):
        assert last_reach(curve, level) == pytest.approx(_walk_last(curve, level), abs=1e-3), level
    assert last_reach(curve, 0.05) is None and last_reach(curve, 0.61) is None
    monotone = [(0.1, 0.9), (0.2, 0.8), (0.4, 0.7)]  # a path that never falls back: both readings agree
    assert all(last_reach(monotone, x) == pytest.approx(first_reach(monotone, x)) for x in (0.1, 0.15, 0.3, 0.4))
    assert last_visit_gap(monotone, [(0.1, 0.8), (0.4, 0.6)]) == pytest.approx(mean_gap(monotone, [(0.1, 0.8), (0.4, 0.6)]))


def test_a_contrast_reads_the_primary_statistic_the_final_gaps_and_the_last_visit():
    ref = {s: [(0.1, 0.90), (0.2, 0.80), (0.3, 0.70)] for s in range(3)}
    arm = {s: [(0.1, 0.90 + d), (0.2, 0.80 + d), (0.25, 0.75 + d)] for s, d in enumerate((0.05, 0.10, 0.15))}
    ones = {"a@0.0001": {s: [(p, p) for p, _ in c] for s, c in arm.items()},
            "grpo@0.0001": {s: [(p, p) for p, _ in c] for s, c in ref.items()}}
    row = ns.contrast({"a@0.0001": arm, "grpo@0.0001": ref}, ones, "a", "grpo", 1e-4)
    assert row["mean"] == pytest.approx(0.10) and row["n"] == 3  # the gap over Pass@1 0.1 to 0.25
    assert row["final_pass_at_1"]["mean"] == pytest.approx(-0.05)  # 0.25 against 0.3
    assert row["final_pass_at_k"]["mean"] == pytest.approx(0.85 - 0.70)
    assert row["last_visit"]["mean"] == pytest.approx(0.10)
    assert ns.contrast({}, {}, "a", "grpo", 1e-4)["mean"] is None


def test_the_default_changes_only_for_a_form_confirmed_at_both_lrs():
    def family(confirmed: set):
        return [{"arm": a, "reference": b, "lr": lr, "confirmed": (a, b, lr) in confirmed}
                for lr in ns.LRS for a, b in ns.FAMILY]
    assert ns.default_decision(family(set()), partial=False)["change"] is None
    one_lr = {("reco-batch", "grpo", 1e-4)}
    assert ns.default_decision(family(one_lr), partial=False)["change"] is None
    both = {("reco-positive-batch", "grpo", lr) for lr in ns.LRS}
    assert ns.default_decision(family(both), partial=False)["change"] == "reco-positive-batch"
    assert ns.default_decision(family(both), partial=True)["decided"] is False
    reco_only = {("reco-batch", "reco", lr) for lr in ns.LRS}  # against today's ReCo, not against grpo: no change
    assert ns.default_decision(family(reco_only), partial=False)["change"] is None


def test_runs_go_seed_by_seed_and_the_pre_registration_states_the_projection():
    plan = {"seeds": ns.SEEDS, "lrs": ns.LRS, "base_sha256": "ab" * 32}
    specs = ns.confirm_specs(plan)
    per_seed = len(ns.ARMS) * len(ns.LRS)
    assert len(specs) == 96 and {s["seed"] for s in specs[:per_seed]} == {ns.SEEDS[0]}
    assert not {700, 701, 702, 703, 704, 705, 706, 707} & {*range(0, 5), 10, 11, 20, 21, 40, 41, 60, 61, 62,
                                                           *range(100, 110), 200, 201, 202, 300, 301, 302,
                                                           *range(400, 410), *range(500, 508)}
    p = ns.projection(plan)
    text = " ".join((ROOT / "docs" / "norm_study.md").read_text().split())
    assert f"**{p['confirm_hours']:.2f} h** for the confirmation" in text
    assert f"**{p['exploratory_hours']:.2f} h** for the exploratory arm" in text
    assert p["confirm_hours"] + p["exploratory_hours"] <= ns.BUDGET_HOURS


def test_quick_study_end_to_end_logs_shares_resumes_and_renders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the tiny base's cache, runs/cache, goes here
    # A tiny model seldom solves Countdown: a reward of the response's length gives every band of groups some updates.
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 2 == 0))
    out, results = tmp_path / "runs", tmp_path / "q.json"
    args = ["--quick", "--out", str(out), "--results", str(results)]
    summary = ns.main(args)
    assert not summary["partial"] and summary["complete"]["exploratory"]
    assert summary["compute"]["runs"] == summary["compute"]["runs_planned"] + summary["compute"]["exploratory_runs_planned"]
    assert [r["name"] for r in summary["family"]] == [f"{a} - {b} @ {lr:g}" for lr in ns.LRS for a, b in ns.FAMILY]
    assert all(r["n"] == len(ns.QUICK["seeds"]) for r in summary["family"] + summary["secondary"])
    run = json.loads(next(out.glob("base-*/confirm/reco-batch/*/seed700/result.json")).read_text())
    assert [row["step"] for row in run["trajectory"]] == list(ns.QUICK["eval_steps"])
    for t in range(ns.QUICK["steps"]):
        shares = [run["logged"][name][t] for name in ns.SHARES]
        assert shares == [None] * 3 or sum(shares) == pytest.approx(1.0)
    assert any(s is not None for s in run["logged"]["update_share_mid"])
    assert run["logged"]["w_mean"][0] == pytest.approx(1.0)  # batch-normalised: mean 1 over the batch
    assert summary["arms"]["reco-batch@0.0001"]["shares"]["update_share_mid"]["mean"] is not None
    assert summary["default"]["decided"] and results.with_suffix(".png").exists()
    # resume: a lost run comes back from the archive; a fresh checkout restores every run
    lost = next(out.glob("base-*/confirm/grpo/*/seed701/result.json"))
    lost.unlink()
    assert ns.main(args)["compute"]["runs_this_invocation"] == 0 and lost.exists()
    shutil.rmtree(out / next(out.glob("base-*")).name)
    assert ns.main(args + ["--aggregate-only"])["compute"]["runs"] == summary["compute"]["runs"]
    block = ns.render_block(summary, "q.json", "q.png")
    assert "Answer and family" in block and "PARTIAL" not in block and "update share hard / mid / easy" in block
    summary["partial"] = True
    assert "PARTIAL: the study has not finished" in ns.render_block(summary, "q.json", "q.png")


def test_the_committed_block_is_the_render_of_the_committed_summary():
    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split(ns.BEGIN, 1)[1].split(ns.END, 1)[0].strip()
    path = ROOT / "results" / "norm_study.json"
    if not path.exists():  # pre-registered, no run summarised yet: the block is empty
        assert block == ""
        return
    summary = json.loads(path.read_text())
    assert block == ns.render_block(summary, "results/norm_study.json", "../results/norm_study.png").strip()
    assert ("PARTIAL: the study has not finished" in block) == summary["partial"]
