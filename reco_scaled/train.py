"""Entry point: python -m reco_scaled.train --config <name or yaml> [section.key=value ...] (reco-train once installed)

Under `torchrun --nproc_per_node=N` it runs on N ranks (DDP or FSDP2, see train.parallel). --config takes a YAML
file or a shipped config by name (tiny-cpu; reco_scaled/configs/, installed with the package).
Exit codes: 0 done; 2 bad input, as one line (config key, batch arithmetic, checkpoint that does not match or is
another run's, malformed data file, model that cannot be loaded, a run directory another run is using); 1 anything
else, including a rollout engine that fails to start. Bad input is found before the run directory is touched where
it can be (the config, the data, the model's path, the checkpoint to resume); a later one leaves no directory behind
that this run created.

A run holds an exclusive lock on its directory (<out>/.lock) while it lives, and under torchrun every worker
dies with its launcher (issue 32 item 10): a killed job leaves no orphan writing its log and checkpoints, and
a restart on the same directory refuses while one is still alive.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
from pathlib import Path

from reco import cli, hf
from reco.data.math import DataError, load_problems
from reco_scaled.checkpoint import CheckpointError, resume_point
from reco_scaled.config import CONFIGS, ConfigError, batch_plan, load_config


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(prog=cli.command_name("reco_scaled.train", "python -m reco_scaled.train"),
                                description=__doc__.split("\n")[0])
    shipped = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml")))
    parser.add_argument("--config", required=True, metavar="NAME_OR_FILE",
                        help=f"a YAML file, or a shipped config by name: {shipped}")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. train.steps=4 rollout.engine=hf")
    args = parser.parse_args(argv)
    _die_with_launcher()
    main_rank = os.environ.get("RANK", "0") == "0"
    try:
        cfg = load_config(args.config, args.overrides)
        problems = check_inputs(cfg, int(os.environ.get("WORLD_SIZE", "1")))
    except ConfigError as e:
        return _fail(f"config error: {e}", 2, main_rank)
    except DataError as e:
        return _fail(f"data error: {e}", 2, main_rank)
    except CheckpointError as e:
        return _fail(f"checkpoint error: {e}", 2, main_rank)
    created = not cfg.out_dir.exists()
    lock = _lock_run_dir(cfg.out_dir) if main_rank else contextlib.nullcontext()
    if lock is None:
        return _fail(f"error: out={str(cfg.out_dir)!r} is in use by another run that is still alive "
                     f"(it holds {cfg.out_dir / '.lock'}); wait for it, stop it, or choose another out", 2, main_rank)
    with lock:
        code = _train(cfg, problems)
    if code == 2 and main_rank and created:
        _discard_unused(cfg.out_dir)
    return code


def check_inputs(cfg, world_size: int) -> list[dict] | None:
    """The bad input that can be found before the run directory is touched or a model loads: the batch arithmetic,
    the data (tasks math and code: read and checked whole; returned, so that it is not read twice), the model's path (a
    local directory that exists, or a hub name that can be fetched: hf.model_problem) and the checkpoint to resume."""
    batch_plan(cfg, world_size)
    problems = None
    if cfg.task == "math":
        problems = load_problems(cfg.data.train, problem_key=cfg.data.problem_key, answer_key=cfg.data.answer_key)
    elif cfg.task == "code":
        from reco.data.code import load_code_problems

        problems = load_code_problems(cfg.data.train)
    if cfg.model.path and (problem := hf.model_problem(cfg.model.path)):
        raise ConfigError(f"config key 'model.path' {problem}")
    resume_point(cfg)
    return problems


def _discard_unused(out_dir: Path) -> None:
    """Remove the run directory this run created when bad input stopped it before it wrote anything but its lock
    and an empty log."""
    files = list(out_dir.iterdir())
    if all(f.name in (".lock", "log.jsonl") and f.is_file() and (f.name == ".lock" or not f.stat().st_size)
           for f in files):
        for f in files:
            f.unlink()
        out_dir.rmdir()


def _train(cfg, problems: list[dict] | None = None) -> int:
    from reco_scaled import distributed
    from reco_scaled.rollout.factory import EngineStartError
    from reco_scaled.trainer import Trainer

    d = distributed.init(cfg.train.dist_timeout_minutes)
    trainer, finished = None, False
    try:
        t = time.perf_counter()
        trainer = Trainer(cfg, d, problems)
        set_up = time.perf_counter() - t
        trainer.fit()
        finished = True
    except ConfigError as e:
        return _fail(f"config error: {e}", 2, d.main)
    except CheckpointError as e:
        return _fail(f"checkpoint error: {e}", 2, d.main)
    except DataError as e:
        return _fail(f"data error: {e}", 2, d.main)
    except OSError as e:
        if trainer is not None:  # set-up done: a file error while training is not bad input
            raise
        return _fail(f"error: cannot load model.path={cfg.model.path!r} ({_first_line(e)})", 2, d.main)
    except EngineStartError as e:
        return _fail(f"error: {e}", 1, d.main)
    finally:
        if trainer is not None:
            trainer.close()
        distributed.shutdown(clean=finished)  # bad input returns here too: abort, the other ranks may wait on this one
    if d.main:
        print(f"time: set-up {set_up:.1f} s (model, data, rollout engine, resume), then training, checkpoints and "
              f"export {time.perf_counter() - t - set_up:.1f} s")
        print(f"done: {cfg.train.steps} steps; log {cfg.out_dir / 'log.jsonl'}, checkpoints {cfg.out_dir / 'checkpoints'}")
    return 0


def _die_with_launcher() -> None:
    """Under torchrun (Linux): SIGKILL this worker when its launcher dies. torchrun starts each worker in a session
    of its own, so a SIGKILL to torchrun (a scheduler, `kill -9`) used to leave the workers training on as orphans."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) != 0:  # 1 = PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if _orphaned():  # the launcher died before the prctl: no signal will come, and the rendezvous would wait minutes
        raise SystemExit("error: the launcher (torchrun) died before this worker started; exiting")


def _orphaned() -> bool:
    """Whether init (pid 1) adopted this process. A Python pid 1 may be the launcher itself (a container whose
    entrypoint is torchrun), so that counts as not orphaned; an orphan adopted by a subreaper is not caught."""
    if os.getppid() != 1:
        return False
    try:
        argv0 = Path("/proc/1/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False
    return b"python" not in os.path.basename(argv0)


def _lock_run_dir(out_dir: Path):
    """An exclusive lock on <out_dir>/.lock: the open file (the lock lasts while it is open, and ends with this
    process however it ends), or None when another live process holds it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    f = open(out_dir / ".lock", "w")  # noqa: SIM115 (kept open on purpose)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _fail(message: str, code: int, show: bool) -> int:
    if show:
        print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
