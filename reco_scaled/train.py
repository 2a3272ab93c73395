"""Entry point: python -m reco_scaled.train --config <yaml> [section.key=value ...]

Under `torchrun --nproc_per_node=N` it runs on N ranks (DDP or FSDP2, see train.parallel).
Exit codes: 0 done; 2 bad input, as one line (config key, batch arithmetic, checkpoint that does not match,
malformed data file, model that cannot be loaded); 1 anything else, including a rollout engine that fails to start.
"""
from __future__ import annotations

import argparse
import os
import sys

from reco_data import DataError
from reco_scaled.config import ConfigError, load_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reco_scaled.train", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML file, e.g. reco_scaled/configs/tiny-cpu.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="e.g. train.steps=4 rollout.engine=hf")
    args = parser.parse_args(argv)
    main_rank = os.environ.get("RANK", "0") == "0"
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        return _fail(f"config error: {e}", 2, main_rank)

    from reco_scaled import distributed
    from reco_scaled.checkpoint import CheckpointError
    from reco_scaled.rollout.factory import EngineStartError
    from reco_scaled.trainer import Trainer

    d = distributed.init(cfg.train.dist_timeout_minutes)
    trainer, finished = None, False
    try:
        trainer = Trainer(cfg, d)
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
        print(f"done: {cfg.train.steps} steps; log {cfg.out_dir / 'log.jsonl'}, checkpoints {cfg.out_dir / 'checkpoints'}")
    return 0


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _fail(message: str, code: int, show: bool) -> int:
    if show:
        print(message, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
