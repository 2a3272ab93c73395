"""reco/log.py: one logged row per RL step, to JSONL and, when asked, to TensorBoard and Weights & Biases; the
row's first fields, the Pass@k trajectory file, and progress bars that do not flood a log file.

The JSONL file is always written and is the record that the studies, the tests and a resume read; the other
sinks are copies for people who watch runs in those tools. Both trainers use it: reco_mini (`--log
tensorboard,wandb`) and reco_scaled (`train.loggers`). Each row's numeric values go to the sinks as scalars
at its "step"; text values are written to the JSONL only.

- tensorboard: `torch.utils.tensorboard.SummaryWriter` into <run dir>/tensorboard (no network);
  view with `tensorboard --logdir <run dir>`.
- wandb: `wandb.init` with the run's name and config, into <run dir>/wandb. Needs `pip install wandb`; it
  honours WANDB_MODE (offline, disabled), WANDB_PROJECT (default "reco") and the rest of wandb's environment.

step_row gives a reco_mini row's first fields (docs/design.md §2), update_shares where a step's update goes (issue 52),
update_summary the means of the updates' statistics; Trajectory writes trajectory.jsonl (Pass@k along training); tqdm
is tqdm.auto's bar, which in a log file writes a line a minute at most.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path

import torch
from torch import Tensor
from tqdm.auto import tqdm as _tqdm_auto

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


def step_row(step: int, rewards: Tensor, A: Tensor, w: Tensor, v_old_mean: Tensor, entropy: Tensor,
             kl_base: Tensor | None, mask: Tensor) -> dict:
    """The first fields of a reco_mini log row (docs/design.md section 2): the rewards [P, G] and the share of groups
    with a success, mean |A|, the weights' range, V_old's batch mean, the mean token entropy and, when the base was at
    hand, k3 to it [B, T], both over the response tokens (mask), and the mean response length."""
    tokens = mask.sum()
    row = {"step": step, "reward_mean": rewards.mean().item(),
           "pass_rate": (rewards.max(1).values > 0).float().mean().item(), "adv_abs_mean": A.abs().mean().item(),
           "w_min": w.min().item(), "w_mean": w.mean().item(), "w_max": w.max().item(),
           **update_shares(update_sizes(rewards, A, w)), "v_old_mean": float(v_old_mean),
           "entropy": ((entropy * mask).sum() / tokens).item()}
    if kl_base is not None:
        row["kl_base"] = ((kl_base * mask).sum() / tokens).item()
    return row | {"response_length": mask.sum(-1).mean().item()}


def update_sizes(rewards: Tensor, A: Tensor, w: Tensor) -> Tensor:
    """Where a step's update goes (issue 52): sum_i |w_i A_i| (the final advantages [P*G] times every response weight
    [P*G]) over the groups with c <= G/4 correct responses (hard), G/4 < c < 3G/4 (mid) and c >= 3G/4 (easy); rewards
    [P, G], correct: R > 0. -> [3] float64 on A's device (reco_scaled sums it over ranks)."""
    P, G = rewards.shape
    c = (rewards > 0).sum(1).to(A.device)  # [P]
    size = (w.detach().double() * A.detach().double()).abs().view(P, G).sum(1)  # [P]
    bands = (c <= G / 4, (c > G / 4) & (c < 3 * G / 4), c >= 3 * G / 4)
    return torch.stack([size[band].sum() for band in bands])


def update_shares(sizes: Tensor) -> dict[str, float | None]:
    """update_share_{hard,mid,easy}: each band's part of update_sizes' total; None when the step updates nothing."""
    total = sizes.sum().item()
    return {f"update_share_{k}": x / total if total > 0 else None for k, x in zip(("hard", "mid", "easy"), sizes.tolist())}


def update_summary(stats: dict[str, list[float]]) -> dict[str, float]:
    """A step's statistics from its updates' values (policy_loss's per micro-batch): the mean, the largest for *_max."""
    return {k: max(v) if k.endswith("_max") else sum(v) / len(v) for k, v in stats.items()}


class Trajectory:
    """run_dir/trajectory.jsonl: Pass@k along training, one row every `every` RL steps (0: no file)."""

    def __init__(self, run_dir: Path, every: int):
        self.every = every
        self.file = open(Path(run_dir) / "trajectory.jsonl", "w", buffering=1) if every else None

    def due(self, steps_done: int) -> bool:
        return bool(self.every) and steps_done % self.every == 0

    def write(self, steps_done: int, result: dict) -> None:
        self.file.write(json.dumps({"step": steps_done, **result}) + "\n")


class tqdm(_tqdm_auto):  # noqa: N801 (tqdm.auto.tqdm's drop-in)
    """tqdm.auto's progress bar; where stderr is not a terminal (a log file, a pipe) a bar writes nothing for its
    first minute and then a line at most once a minute (LOG_INTERVAL_S), each a line of its own, where tqdm redraws
    every 0.1 s with carriage returns (29 KB of bars in the log of a short run)."""

    def __init__(self, *args, **kwargs):
        stream = kwargs.get("file") or sys.stderr
        if not getattr(stream, "isatty", lambda: False)():
            kwargs |= {"file": _Lines(stream), "mininterval": LOG_INTERVAL_S, "maxinterval": LOG_INTERVAL_S,
                       "delay": LOG_INTERVAL_S}
        super().__init__(*args, **kwargs)


LOG_INTERVAL_S = 60.0


class _Lines:
    """A text stream for tqdm that writes each redraw of a bar as a line of its own and drops the blank redraws
    that clear one (and the cursor moves of nested bars)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").replace("\x1b[A", "").rstrip()
        if line.strip():
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
