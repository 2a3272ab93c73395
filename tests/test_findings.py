"""docs/findings.md (issue 59): the committed page is what experiments/findings.py renders from the committed JSON, it is
linked from the README's first screen, its words follow its numbers by rule, and its inertness figures are checked
against independent references (bisection for the closed form, a loop for one step's statistics, scipy for the
leave-one-seed-out p-values)."""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import findings  # noqa: E402
import inertness  # noqa: E402
from analysis import holm, leave_one_out_holm  # noqa: E402


def test_the_committed_page_is_the_render_of_the_committed_json():
    assert (ROOT / "docs" / "findings.md").read_text() == findings.render(findings.sources())


def test_the_readme_links_the_page_on_its_first_screen():
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert "(docs/findings.md)" in first_screen


def test_every_config_the_page_recommends_exists():
    page = (ROOT / "docs" / "findings.md").read_text()
    named = [w.strip("`") for w in page.split() if w.startswith("`reco_scaled/configs/")]
    assert len(named) >= 3 and all((ROOT / name.rstrip(":,.`")).exists() for name in named), named


def _bisect_q(length: int, G: int = 8, delta: float = 0.01) -> float:
    lo, hi = 0.0, 1.0  # w(q) = 1 / (1 + (G - 1) q^L) falls from 1 as q rises: find where it reaches 1 - delta
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 / (1 + (G - 1) * mid ** length) > 1 - delta else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize("length", [1, 8, 50, 100, 300, 1000])
def test_the_closed_form_threshold_is_where_the_weight_moves_one_percent(length):
    assert inertness.threshold_q(length) == pytest.approx(_bisect_q(length), rel=1e-12)


def test_step_stats_against_a_loop():
    old_logp = torch.log(torch.tensor([[0.5, 0.5, 1.0], [0.9, 0.0 + 1.0, 1.0], [0.2, 0.3, 0.4]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    w, A = torch.tensor([1.0, 0.995, 1.2]), torch.tensor([1.0, -1.0, 2.0])
    got = inertness.step_stats(w, A, old_logp, mask)
    qs = [0.5, 0.9, (0.2 * 0.3 * 0.4) ** (1 / 3)]  # the geometric mean over each response's own tokens
    assert got["q_mean"] == pytest.approx(sum(qs) / 3, rel=1e-6) and got["q_max"] == pytest.approx(0.9, rel=1e-6)
    assert got["moved"] == pytest.approx(1 / 3) and got["moved_positive"] == pytest.approx(1 / 2)
    assert (got["w_min"], got["w_max"], got["length_mean"]) == pytest.approx((0.995, 1.2, 2.0))


def test_leave_one_out_holm_against_scipy():
    scipy = pytest.importorskip("scipy.stats")
    family = [{"per_seed": {"1": 0.03, "2": 0.05, "3": 0.01, "4": 0.04, "5": None}},
              {"per_seed": {"1": 0.10, "2": -0.02, "3": 0.06, "4": 0.01, "5": 0.03}}]
    got = leave_one_out_holm(family)
    for left, adjusted in got.items():
        ps = [scipy.ttest_1samp([v for s, v in row["per_seed"].items() if s != left and v is not None], 0,
                                alternative="greater").pvalue for row in family]
        assert adjusted == pytest.approx(holm(ps), rel=1e-6), left


def test_the_words_follow_the_numbers():
    s = findings.sources()
    row = {"mean": 0.03, "ci_low": 0.01, "ci_high": 0.05}
    assert findings.reading(row | {"confirmed": True}, True).startswith("**more**")
    assert findings.reading(row, True) == "CI above zero, not confirmed by Holm"
    assert findings.reading(row, False) == "more (CI above zero, unadjusted)"
    assert findings.reading({"mean": -0.03, "ci_low": -0.05, "ci_high": -0.01}, False).startswith("**less**")
    # the mechanism sentence: a winner that did not move weight off easy groups breaks "the common mechanism"
    flipped = copy.deepcopy(s)
    for v in flipped["norm"]["arms"].values():
        if v["arm"] == "f-grpo":
            v["shares"]["update_share_easy"]["mean"] = 0.9
    assert "common mechanism" in findings.mechanism_sentence(s)
    assert "do not explain every gain" in findings.mechanism_sentence(flipped)
    # the transfer verdict reads the measured per-token probability against the closed form at 1,000 tokens
    measured = {"quick": False, "steps": 3, "seed": 1, "lr": 1e-4,
                "threshold_q": {"t_length": 0.5},
                "tasks": {"t": {"first_10": {"moved_positive": 0.5, "q_mean": 0.9},
                                "last_10": {"moved_positive": 0.1, "q_mean": 0.9, "q_p90": 0.95, "length_mean": 40.0},
                                "largest": {"q_max": 0.99, "w_max": 1.5}, "smallest_w_min": 0.6}}}
    assert "what is left of ReCo is its token term" in "\n".join(findings.transfer_lines(s | {"inertness": measured}))
    measured["tasks"]["t"]["last_10"]["q_mean"] = 0.999
    assert "near-deterministic enough" in "\n".join(findings.transfer_lines(s | {"inertness": measured}))
    assert "PARTIAL" in "\n".join(findings.replication_lines(s | {"replication": {"partial": True, "compute": {
        "runs": 3, "runs_planned": 81}}}))


def test_the_replication_section_gives_every_pre_registered_and_pooled_contrast():
    """Section 6 quotes the verdict, both primary contrasts, every secondary (with its TOST p and final Pass@1) and the
    pooled figures from results/replication_study.json, and follows the verdict when it is flipped."""
    s = findings.sources()
    r = s["replication"]
    text = "\n".join(findings.replication_lines(s))
    rows = r["family"] + [x for x in r["secondary"] if x.get("mean") is not None] + r["pooled"]
    assert len(rows) == 2 + 6 + 4
    for x in rows:
        assert f"- {x['name']}: {findings.ci(x)}" in text, x["name"]
    assert ("did not replicate" in text) == (not r["default"]["stays"])
    flipped = copy.deepcopy(s)
    flipped["replication"]["default"] |= {"stays": True, "confirmed_at": [1e-4]}
    assert "the default stays" in "\n".join(findings.replication_lines(flipped))
