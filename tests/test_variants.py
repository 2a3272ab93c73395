"""The rarely used response weights (`--occurrence token-mean | count | canonical`, in reco/cli.py) and the budget of
reco_mini.py that keeps them out of it.

- reco_mini files them in its registry, which keeps the order of `--occurrence`'s values (design 3.2): the studies'
  w_dev_* log keys, the flag's error message and its --help, which lists the registry itself, follow it
  (experiments/diagnostics.py, reco.cli.loss_checks, reco.cli.parse_config).
- reco_mini.py stays within 500 lines, none over 100 characters (issues 35, 43 and 54), formatted by `ruff format` at
  line length 100 rather than packed by hand. That nothing in reco/ imports reco_mini (a second copy of its registries
  when `python reco_mini.py` runs it as __main__) is tests/test_boundary.py's.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import reco_mini
from reco import cli

ROOT = Path(__file__).resolve().parent.parent


def test_occurrences_keep_the_order_of_the_flags_help(capsys):
    assert list(reco_mini.OCCURRENCES) == ["sequence", "token-mean", "count", "canonical", "none"]
    try:
        reco_mini.parse_config(["--help"])
    except SystemExit:
        pass
    assert "sequence | token-mean | count | canonical | none" in " ".join(capsys.readouterr().out.split())


def test_the_variants_are_filed_under_their_flag_values():
    assert reco_mini.OCCURRENCES["token-mean"] is cli.copies_token_mean
    assert reco_mini.OCCURRENCES["count"] is cli.copies_count
    assert reco_mini.OCCURRENCES["canonical"] is cli.copies_canonical


def test_reco_mini_stays_within_its_reading_budget():
    """Issues 35, 43 and 54: reco_mini.py reads in one sitting, at most 500 lines and none over 100 characters."""
    lines = (ROOT / "reco_mini.py").read_text().splitlines()
    assert len(lines) <= 500, f"reco_mini.py has {len(lines)} lines (budget 500)"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 100]
    assert not long, f"reco_mini.py lines over 100 characters: {long}"


def test_reco_mini_is_formatted_not_packed():
    """Issue 43: the lines are ruff format's at line length 100 (CI runs the same check, .ci/run)."""
    pytest.importorskip("ruff")
    cmd = [sys.executable, "-m", "ruff", "format", "--check", "--line-length", "100", "reco_mini.py"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
