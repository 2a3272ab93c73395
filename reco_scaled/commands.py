"""reco_commands.py: the commands `pip install .` puts on the PATH (pyproject.toml, [project.scripts]).

reco-mini runs reco_mini.py, reco-train reco_scaled.train and reco-eval reco_scaled.evaluate, each exactly as
`python reco_mini.py` or `python -m reco_scaled.<module>` would: the same flags, output and exit codes.
"""
from __future__ import annotations


def mini() -> None:
    import reco_mini

    reco_mini.main()


def train() -> int:
    from reco_scaled import train

    return train.main()


def evaluate() -> None:
    from reco_scaled import evaluate

    evaluate.main()
