"""experiments/frontier_study.py: interpolation at matched Pass@1, the selection rule, the forms statistics, and a
quick end-to-end study whose JSON must have the issue's schema."""
import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("frontier_study", ROOT / "experiments" / "frontier_study.py")
fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fs)


def test_matched_level_interpolation_by_hand():
    points = [(0, 0.10, 0.90), (20, 0.14, 0.80), (40, 0.22, 0.60), (60, 0.18, 0.70), (80, 0.26, 0.50)]
    # 0.15 is first crossed between steps 20 and 40: 0.80 + (0.15 - 0.14) / (0.22 - 0.14) * (0.60 - 0.80) = 0.775
    assert fs.at_level(points, 0.15) == pytest.approx(0.775)
    assert fs.at_level(points, 0.20) == pytest.approx(0.80 + 0.06 / 0.08 * -0.20)  # the first crossing, not the later one
    assert fs.at_level(points, 0.25) == pytest.approx(0.70 + 0.07 / 0.08 * -0.20)
    assert fs.at_level(points, 0.10) == pytest.approx(0.90)  # already at the base
    assert fs.at_level(points, 0.30) is None  # never reached


def _result(method, lr, clip, seed, p1, pn, stopped=None):
    row = {"step": 120, "pass_at_k": {"1": p1, "256": pn}}
    return {"spec": {"phase": "select", "method": method, "lr": lr, "clip": clip, "seed": seed}, "stopped": stopped,
            "trajectory": [] if stopped else [row]}


def test_selection_rule_on_synthetic_scores(tmp_path, monkeypatch):
    plan = {"out": str(tmp_path), "methods": ["grpo"], "lrs": (1e-4, 2e-4, 4e-4), "clips": (1.0, 0.0), "select": (10, 11),
            "steps": 120}
    monkeypatch.setattr(fs, "diverged", lambda r, plan: {"diverged": r["spec"]["lr"] == 4e-4 and r["spec"]["clip"] == 0.0})
    scores = {(1e-4, 1.0): (0.20, 0.60), (1e-4, 0.0): (0.21, 0.62), (2e-4, 1.0): (0.245, 0.55),
              (2e-4, 0.0): (0.25, 0.50), (4e-4, 1.0): (0.10, 0.90), (4e-4, 0.0): (0.40, 0.40)}
    results = [_result("grpo", lr, clip, s, p1, pn) for (lr, clip), (p1, pn) in scores.items() for s in (10, 11)]
    sel = fs.selection(results, plan)
    # (4e-4, off) has the best Pass@1 but diverged; 0.25 and 0.245 tie within 0.01, and the tie goes to Pass@256
    assert sel["choices"] == {"grpo": {"lr": 2e-4, "clip": 1.0}}
    assert len(sel["scores"]) == 6 and sel["rule"] == fs.SELECTION_RULE
    # a seed that stopped on a non-finite gradient makes its setting ineligible, not the method unselectable
    results = [r for r in results if not (r["spec"]["lr"] == 2e-4 and r["spec"]["clip"] == 1.0 and r["spec"]["seed"] == 11)]
    results.append(_result("grpo", 2e-4, 1.0, 11, 0, 0, stopped="error: non-finite"))
    assert fs.selection(results, plan)["choices"] == {"grpo": {"lr": 2e-4, "clip": 0.0}}
    assert fs.selection(results[:-1], plan)["choices"] == {}  # an unfinished setting: no choice yet


def test_form_stats_by_hand():
    row = {"counts": [3, 0, 2, 1], "forms": [[2, 1, 0, 0, 0, 0], [0] * 6, [0, 0, 0, 2, 0, 0], [0, 0, 0, 0, 1, 0]]}
    out = fs.form_stats(row, rare_only=[False, True, True, True])
    assert out["shares"] == pytest.approx([2 / 6, 1 / 6, 0, 2 / 6, 1 / 6, 0])
    assert out["entropy_bits"] == pytest.approx(-(2 * (1 / 3) * math.log2(1 / 3) + 2 * (1 / 6) * math.log2(1 / 6)))
    assert out["rare_coverage"] == pytest.approx(2 / 3)  # rare-only problems 1, 2, 3: 2 and 3 solved


@pytest.mark.slow
def test_quick_study_end_to_end_schema_and_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # reco_mini caches the SFT base under ./runs/cache
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n{fs.BEGIN}\nstale\n{fs.END}\nafter\n")
    summary = fs.main(["--quick", "--out", "study", "--write-readme", str(readme)])
    on_disk = json.loads((tmp_path / "study" / "frontier_study.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["partial"] is False and set(on_disk["complete"]) == {"select", "confirm", "stress", "long"}
    for m in fs.QUICK["methods"]:
        entry = on_disk["methods"][m]
        assert entry["seeds"] == list(fs.QUICK["confirm"])
        assert len(entry["final"]["pass_at_1"]) == len(entry["final"]["pass_at_256"]) == len(entry["seeds"])
        for traj in entry["trajectory"]:
            assert [p["step"] for p in traj] == [0, 4, 8] and set(traj[0]) == {"step", "pass_at_1", "pass_at_256"}
    assert set(on_disk["selection"]) == {"rule", "scores", "choices"} and set(on_disk["selection"]["choices"]) == {"grpo", "reco"}
    assert [h["name"] for h in on_disk["hypotheses"]] == ["H1", "H2", "H3"]
    assert all({"name", "estimate", "ci_low", "ci_high", "confirmed"} <= set(h) for h in on_disk["hypotheses"])
    assert on_disk["forms"]["by_method"]["grpo"] and on_disk["stress"]["grpo x5"]["runs"]
    long = on_disk["long"]
    assert long["exploratory"] and set(long["methods"]) == set(fs.QUICK["long_methods"])
    assert list(long["methods"]["grpo"]["pass_at_1_by_step"]) == ["0", "6", "12"]  # from the validation base
    assert (tmp_path / "study" / "frontier_study.png").stat().st_size > 1000
    text = readme.read_text()
    assert "stale" not in text and "**Hypotheses**" in text and text.endswith(f"{fs.END}\nafter\n")
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "study").rglob("result.json")}
    fs.main(["--quick", "--out", "study"])  # a rerun reuses every finished run
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "study").rglob("result.json")}


def _diff(mean, ci):
    return {"mean": mean, "ci95": ci}


def _claims_summary(final_p1, final_pn, matched, hypothesis_confirmed):
    """A minimal summary: grpo against one method `x`, differences given as (mean, ci95)."""
    return {"matched_level": 0.15,
            "hypotheses": [{"name": "H1", "statement": "x beats grpo", "level": 0.15, "estimate": 0.03, "ci_low": -0.01,
                            "ci_high": 0.07, "p_holm": 0.01 if hypothesis_confirmed else 0.2,
                            "confirmed": hypothesis_confirmed}],
            "methods": {"grpo": {}, "x": {}}, "forms": {"by_method": {}}, "stress": {},
            "final_differences": {"x - grpo": {"pass_at_1": _diff(*final_p1), "pass_at_256": _diff(*final_pn)}},
            "frontier": {lv: {"differences": {"x - grpo": _diff(*d)}} for lv, d in matched.items()}}


def test_claims_say_the_null_and_the_trade_off_plainly():
    less_trained = _claims_summary((-0.05, 0.03), (0.07, 0.04), {"0.15": (0.03, 0.04), "0.20": (-0.01, 0.03)}, False)
    text = " ".join(fs.claims(less_trained))
    assert "H1 (x beats grpo, L* = 0.15): **not confirmed**; estimate +0.030" in text
    assert "comes with a lower Pass@1" in text and "above zero at no level" in text
    partly = _claims_summary((-0.05, 0.03), (0.12, 0.03), {"0.15": (0.06, 0.03), "0.20": (0.03, 0.04)}, True)
    text = " ".join(fs.claims(partly))
    assert "**confirmed**" in text and "above zero at 0.15 but not at 0.20" in text
    clean = _claims_summary((0.0, 0.02), (0.05, 0.02), {"0.15": (0.04, 0.01), "0.20": (0.05, 0.02)}, True)
    assert ("without a measurable Pass@1 cost; at matched Pass@1 the gain is above zero at every level"
            in " ".join(fs.claims(clean)))
    null = _claims_summary((0.0, 0.02), (-0.01, 0.03), {"0.15": (0.0, 0.03)}, False)
    assert "No coverage gain over grpo is measurable" in " ".join(fs.claims(null))


def test_crossing_interpolates_the_step_too():
    points = [(0, 0.10, 0.90), (20, 0.14, 0.80), (40, 0.22, 0.60)]
    assert fs.crossing(points, 0.15) == pytest.approx((20 + 20 * 0.01 / 0.08, 0.775))
    assert fs.crossing(points, 0.05) == (0, 0.90) and fs.crossing(points, 0.3) is None


def test_committed_results_block_is_generated_from_the_committed_json():
    summary = json.loads((ROOT / "results" / "frontier_study.json").read_text())
    page = (ROOT / "docs" / "results.md").read_text()
    block = page[page.index(fs.BEGIN) + len(fs.BEGIN): page.index(fs.END)]
    rerun = "rerun: python experiments/frontier_study.py --aggregate-only --write-readme docs/results.md"
    expected = fs.render_readme(summary, "results/frontier_study.json", "../results/frontier_study.png")
    assert block.strip() == expected.strip(), rerun
    assert summary["partial"] is False, "the committed study must be complete"


def test_stress_claim_counts_divergences_per_factor():
    summary = _claims_summary((0.0, 0.02), (0.0, 0.02), {}, False)
    run = {"diverged": True, "non_finite": False, "rho_max": 3.5}
    summary["stress"] = {"reco x5": {"method": "reco", "factor": 5, "lr": 5e-4, "runs": [run, {**run, "diverged": False}]},
                         "reco x20": {"method": "reco", "factor": 20, "lr": 2e-3, "runs": [{**run, "non_finite": True}]}}
    text = " ".join(fs.claims(summary))
    assert "Stress: 1 of 3 runs produced a non-finite value" in text
    assert "at 5× the chosen lr reco 1/2 (lr 0.0005); at 20× the chosen lr reco 1/1 (lr 0.002)" in text
    assert "The largest ρ under stress was 3.50 (the cap is 10)" in text
