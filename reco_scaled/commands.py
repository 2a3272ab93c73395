"""reco_scaled/commands.py: the commands `pip install .` puts on the PATH (pyproject.toml, [project.scripts]).

reco-mini runs reco_mini.py and reco-eval reco_scaled.evaluate, each exactly as `python reco_mini.py` or
`python -m reco_scaled.evaluate` would: the same flags, output and exit codes. Their `main` returns the run's results
(a dict), which a console script would pass to sys.exit and exit 1 with, so these wrappers drop it; reco-train points
straight at reco_scaled.train's `main`, which returns its exit code. This module sits in reco_scaled because it
imports reco_mini, which nothing in reco/ may.
"""
from __future__ import annotations


def mini() -> None:
    import reco_mini

    reco_mini.main()


def evaluate() -> None:
    from reco_scaled import evaluate

    evaluate.main()
