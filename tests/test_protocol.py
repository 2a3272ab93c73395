"""experiments/protocol.py: the whole-trajectory frontier statistics against hand computations, and the exploratory
re-analysis of the committed frontier study."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
_spec = importlib.util.spec_from_file_location("protocol", ROOT / "experiments" / "protocol.py")
pr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pr)

A = [(0.10, 0.90), (0.20, 0.80), (0.30, 0.60)]  # (Pass@1, Pass@k) at measured checkpoints
REF = [(0.15, 0.85), (0.25, 0.60)]


def test_first_reach_by_hand():
    assert pr.first_reach(A, 0.15) == pytest.approx(0.85)
    assert pr.first_reach(A, 0.25) == pytest.approx(0.70)
    assert pr.first_reach(A, 0.05) is None  # below the first checkpoint: no interpolation to the base
    assert pr.first_reach(A, 0.31) is None  # never reached
    wiggle = [(0.20, 0.80), (0.10, 0.90), (0.30, 0.50)]
    assert pr.first_reach(wiggle, 0.20) == pytest.approx(0.80)  # reached at the first checkpoint
    assert pr.first_reach(wiggle, 0.25) == pytest.approx(0.90 + 0.15 / 0.20 * -0.40)  # on the segment that first reaches it
    assert pr.covered(wiggle) == (0.20, 0.30)


def test_primary_statistic_by_hand():
    # Common range [0.15, 0.25]. gap(0.15) = 0.85 - 0.85 = 0; gap(0.20) = 0.80 - 0.725 = 0.075; gap(0.25) = 0.70 - 0.60
    # = 0.10. Both curves are linear on [0.15, 0.20] and [0.20, 0.25]: mean = (0.05 (0 + 0.075) / 2 + 0.05 (0.075 + 0.10)
    # / 2) / 0.10 = 0.0625.
    assert pr.mean_gap(A, REF) == pytest.approx(0.0625)
    assert pr.mean_gap(REF, A) == pytest.approx(-0.0625)
    assert pr.mean_gap(A, [(0.31, 0.5), (0.4, 0.4)]) is None  # no overlap
    assert pr.mean_gap(A, [(0.30, 0.5)]) == pytest.approx(0.60 - 0.5)  # a single common point


def test_primary_statistic_against_a_fine_grid():
    curve = [(0.12, 0.91), (0.18, 0.86), (0.16, 0.88), (0.24, 0.75), (0.27, 0.71)]
    ref = [(0.14, 0.9), (0.21, 0.8), (0.26, 0.62), (0.22, 0.7)]
    lo, hi = 0.14, 0.26
    grid = [lo + (hi - lo) * i / 200000 for i in range(200001)]
    gaps = [pr.first_reach(curve, p) - pr.first_reach(ref, p) for p in grid]
    reference = (sum(gaps) - (gaps[0] + gaps[-1]) / 2) / 200000  # trapezoid on a fine grid: an independent sum
    assert pr.mean_gap(curve, ref) == pytest.approx(reference, abs=1e-6)


def test_endpoint_and_final_by_hand():
    assert pr.endpoint_gap(A, REF) is None  # A ends at Pass@1 0.30, which the reference never reaches
    assert pr.endpoint_gap(REF, A) == pytest.approx(0.60 - 0.70)  # REF ends at 0.25; A first reaches it at 0.70
    assert pr.final_gap(A, REF) == pytest.approx(0.60 - 0.60)
    slow = [(0.16, 0.84), (0.18, 0.83)]
    assert pr.endpoint_gap(slow, REF) == pytest.approx(0.83 - (0.85 + 0.03 / 0.10 * -0.25))


def test_compare_over_seeds_by_hand():
    curves, refs = {1: A, 2: A, 3: REF}, {1: REF, 2: REF, 3: REF}
    out = pr.compare(curves, refs)
    assert out["seeds"] == [1, 2, 3]
    assert out["primary"]["per_seed"] == pytest.approx({"1": 0.0625, "2": 0.0625, "3": 0.0})
    assert out["primary"]["mean"] == pytest.approx(0.125 / 3)
    assert out["endpoint"]["n"] == 1 and out["endpoint"]["per_seed"]["1"] is None  # None seeds are left out


def test_measured_curve_drops_the_base_and_sorts():
    rows = [{"step": 20, "pass_at_1": 0.2, "pass_at_256": 0.8}, {"step": 0, "pass_at_1": 0.1, "pass_at_256": 0.9},
            {"step": 10, "pass_at_k": {"1": 0.15, "256": 0.85}}]
    assert pr.measured_curve(rows, "256") == [(0.15, 0.85), (0.2, 0.8)]


def test_reanalysis_of_the_committed_frontier_study(tmp_path):
    summary = json.loads((ROOT / "results" / "frontier_study.json").read_text())
    before = json.dumps(summary, sort_keys=True)
    out = pr.reanalyse_frontier(summary)
    assert json.dumps(summary, sort_keys=True) == before  # the confirmatory results are untouched
    assert out["exploratory"] is True and "after the fact" in out["note"]
    assert set(out["comparisons"]) == {"reco - grpo", "reco-positive - grpo", "f-grpo - grpo"}
    reco = out["comparisons"]["reco - grpo"]
    # the exploratory endpoint-matched numbers: -0.005 (-0.054, +0.044) over the 9 seeds GRPO reaches
    assert reco["endpoint"]["n"] == 9 and reco["endpoint"]["mean"] == pytest.approx(-0.005, abs=5e-4)
    seed = str(summary["methods"]["reco"]["seeds"][0])  # one seed by hand from the stored trajectories
    curve = pr.measured_curve(summary["methods"]["reco"]["trajectory"][0], "256")
    ref = pr.measured_curve(summary["methods"]["grpo"]["trajectory"][0], "256")
    assert reco["primary"]["per_seed"][seed] == pytest.approx(pr.mean_gap(curve, ref))
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{pr.BEGIN}\nold\n{pr.END}\nafter\n")
    pr.write_block(doc, pr.render_reanalysis(out, "x.json"))
    text = doc.read_text()
    assert "old" not in text and "added after the fact" in text and text.endswith(f"{pr.END}\nafter\n")
