"""reco_log.py: one logged row per RL step, to JSONL and, when asked, to TensorBoard and Weights & Biases.

The JSONL file is always written and is the record that the studies, the tests and a resume read; the other
sinks are copies for people who watch runs in those tools. Both trainers use it: reco_mini (`--log
tensorboard,wandb`) and reco_scaled (`train.loggers`). Each row's numeric values go to the sinks as scalars
at its "step"; text values are written to the JSONL only.

- tensorboard: `torch.utils.tensorboard.SummaryWriter` into <run dir>/tensorboard (no network);
  view with `tensorboard --logdir <run dir>`.
- wandb: `wandb.init` with the run's name and config, into <run dir>/wandb. Needs `pip install wandb`; it
  honours WANDB_MODE (offline, disabled), WANDB_PROJECT (default "reco") and the rest of wandb's environment.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

SINKS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # sink -> the package it needs


def check_sinks(names: str) -> str:
    """'' if every comma-separated sink in `names` is known and installed, else why not (for a one-line error)."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name == "jsonl":
            continue
        if name not in SINKS:
            return f"must be a comma-separated subset of {['jsonl', *SINKS]}, got {name!r}"
        if importlib.util.find_spec(SINKS[name]) is None:
            return f"asks for {name}, which is not installed (pip install {SINKS[name]})"
    return ""


class RunLogger:
    """Appends rows to `path` (JSONL, line-buffered: a stopped run keeps every row) and copies them to the sinks."""

    def __init__(self, path: str | Path, sinks: str = "", run_name: str = "", config: dict | None = None,
                 mode: str = "w"):
        if problem := check_sinks(sinks):
            raise ValueError(f"loggers {problem}")
        self.path = Path(path)
        self.file = open(self.path, mode, buffering=1)
        self.names = [n.strip() for n in sinks.split(",") if n.strip() and n.strip() != "jsonl"]
        self.tensorboard = self.wandb = None
        run_dir = self.path.parent
        if "tensorboard" in self.names:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if "wandb" in self.names:
            import wandb

            self.wandb = wandb.init(project=os.environ.get("WANDB_PROJECT", "reco"), name=run_name or run_dir.name,
                                    dir=str(run_dir), config=config or {})

    def log(self, row: dict) -> None:
        self.file.write(json.dumps(row) + "\n")
        step = int(row.get("step", 0))
        scalars = {k: float(v) for k, v in row.items()
                   if k != "step" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
        if self.tensorboard is not None:
            for key, value in scalars.items():
                self.tensorboard.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
