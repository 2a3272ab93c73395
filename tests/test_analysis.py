"""experiments/analysis.py: t quantiles, the t CDF, paired and equivalence tests, Holm, against closed forms and tables."""
import importlib.util
import math
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("analysis", ROOT / "experiments" / "analysis.py")
analysis = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(analysis)


def test_t_quantiles_and_summary_stats():
    for df, t in {1: 12.706, 4: 2.776, 10: 2.228, 30: 2.042, 60: 2.000, 120: 1.980}.items():
        assert analysis.t975(df) == pytest.approx(t, abs=2e-3)
    stats = analysis.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats["mean"] == 3.0 and stats["std"] == pytest.approx(math.sqrt(2.5))
    assert stats["ci95"] == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5))
    assert analysis.summarize([0.5])["ci95"] is None  # one seed: no CI


def test_t_cdf_closed_forms_and_printed_table():
    for t in (-3.0, -0.4, 0.0, 0.7, 5.0):
        assert analysis.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)  # Cauchy
        assert analysis.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(t * t + 2)), abs=1e-12)
        assert analysis.t_cdf(t, 2000) == pytest.approx(statistics.NormalDist().cdf(t), abs=1e-3)
    for df, t in enumerate(analysis.T975, 1):  # the printed two-sided 95% quantiles, to their 3 decimals
        assert analysis.t_cdf(t, df) == pytest.approx(0.975, abs=4e-5)  # rounding of the table: 5e-4 x pdf(t)


def test_t_cdf_against_scipy_when_installed():
    stats = pytest.importorskip("scipy.stats", reason="scipy (requirements.txt) is not installed: pip install scipy")
    for df in (3, 4, 9, 10, 17):
        for t in (-2.5, -1.0, 0.3, 1.8, 4.0):
            assert analysis.t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12)


def test_paired_and_equivalence_tests_by_hand():
    diffs = [0.1, 0.3, -0.1, 0.2, 0.1]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    t = mean / (sd / math.sqrt(5))
    out = analysis.paired_test(diffs)
    assert out["mean"] == pytest.approx(mean) and out["p_greater"] == pytest.approx(1 - analysis.t_cdf(t, 4))
    tost = analysis.equivalence_test(diffs, 0.5)
    lower = 1 - analysis.t_cdf((mean + 0.5) / (sd / math.sqrt(5)), 4)
    upper = analysis.t_cdf((mean - 0.5) / (sd / math.sqrt(5)), 4)
    assert tost["p_equivalent"] == pytest.approx(max(lower, upper))
    assert analysis.equivalence_test(diffs, 0.01)["p_equivalent"] > 0.5  # a margin far inside the noise
    assert analysis.paired_test([0.2])["p_greater"] is None


def test_holm_step_down():
    # sorted p: 0.01 (x3 = 0.03), 0.02 (x2 = 0.04), 0.04 (x1 = 0.04, but never below the previous)
    assert analysis.holm([0.04, 0.01, None, 0.02]) == [pytest.approx(0.04), pytest.approx(0.03), None, pytest.approx(0.04)]
    assert analysis.holm([0.5, 0.6]) == [pytest.approx(1.0), pytest.approx(1.0)]


def test_divergence_kl_limit():
    log = [{"reward_mean": 0.5, "kl_base": 0.1 * i} for i in range(30)]
    assert not analysis.divergence(log, None)["diverged"]
    flags = analysis.divergence(log, None, kl_limit=2.0)
    assert flags["kl_base_last_window"] == pytest.approx(sum(0.1 * i for i in range(20, 30)) / 10)  # 2.45
    assert flags["kl_too_high"] and flags["diverged"]
