"""Atomic, exactly resumable checkpoints.

Layout: <out>/checkpoints/step_000004/ holds the model's trained parameters (with model.lora_rank: the adapters,
not the frozen base) and the optimizer (torch.distributed.checkpoint, sharded under FSDP2, written once under DDP),
rng_rank<r>.pt (every rank's RNG states) and
trainer.json (step, data position, scheduler, world size, the model's parameter signature and the
config). A checkpoint is written into step_000004.tmp/ and renamed when every rank has finished, and
<out>/checkpoints/latest names the newest one, so a crash never leaves a half checkpoint behind.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from reco_mini import LossConfig
from reco_scaled import distributed
from reco_scaled.model import merged_weights

# loading: a LoRA run's frozen parameters are not in the checkpoint (dcp.load found every trained one, or raised)
INTO_TRAINED = StateDictOptions(ignore_frozen_params=True, strict=False)


class CheckpointError(RuntimeError):
    """The checkpoint is missing, incomplete or does not match this run's model."""


def signature(lm: nn.Module) -> dict[str, list[int]]:
    """Parameter name -> shape of the unwrapped model: what a checkpoint must match."""
    return {k: list(v.shape) for k, v in lm.state_dict().items()}


def latest(root: Path) -> Path | None:
    pointer = root / "latest"
    if pointer.exists():
        path = root / pointer.read_text().strip()
        if (path / "trainer.json").exists():
            return path
    done = sorted(p for p in root.glob("step_*") if not p.name.endswith(".tmp") and (p / "trainer.json").exists())
    return done[-1] if done else None


# The keys that make a run what it is: a checkpoint written under other values is another run's, and resuming it
# would continue that run as this one (a "config keys changed" note was all a resume of ReCo as GRPO used to get).
# Every reco_mini.LossConfig field changes the loss, so all of them are here; lr, steps and the like are not.
IDENTITY_KEYS = ("task", "data.train", "model.path", "algo.method",
                 *(f"algo.{f.name}" for f in dataclasses.fields(LossConfig)))


def resume_point(cfg) -> Path | None:
    """The checkpoint a run resumes (cfg: a reco_scaled.config.RunConfig; checkpoint.resume: "auto", the latest under
    <out>/checkpoints; "never"; or a checkpoint directory), or None. CheckpointError when "never" finds checkpoints,
    a named directory does not exist, or the checkpoint was written for another run (IDENTITY_KEYS differ: each is
    named). It reads trainer.json only, so the entry point asks before it takes the lock or loads a model."""
    from reco_scaled.config import flatten, get

    root, mode = cfg.out_dir / "checkpoints", cfg.checkpoint.resume
    found = latest(root)
    if mode == "never":
        if found is not None:
            raise CheckpointError(f"{root} already holds checkpoints ({found.name}) and checkpoint.resume is 'never'; "
                                  "use resume=auto or a new run name")
        return None
    path = found if mode == "auto" else Path(mode)
    if path is None:
        return None
    if not path.is_dir():
        raise CheckpointError(f"checkpoint.resume: {path} is not a checkpoint directory")
    try:
        written = flatten(json.loads((path / "trainer.json").read_text())["config"])
    except FileNotFoundError:
        raise CheckpointError(f"{path} is not a complete checkpoint (no trainer.json)") from None
    differ = [f"{key}={written.get(key)!r} there, {get(cfg, key)!r} here" for key in IDENTITY_KEYS
              if written.get(key) != get(cfg, key)]
    if differ:
        raise CheckpointError(f"checkpoint {path} is another run's ({'; '.join(differ)}): resuming it would continue "
                              "that run as this one; use another name or out, or set these keys as they were")
    return path


def trained_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """get_state_dict without the frozen parameters: a LoRA run's base is model.path's, and its checkpoints hold the
    adapters (ignore_frozen_params alone keeps the tied copy of a frozen weight, lm_head = embed_tokens)."""
    model_state, optim_state = get_state_dict(model, optimizer, options=StateDictOptions(ignore_frozen_params=True))
    frozen = {n.removeprefix("module.") for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}
    return {k: v for k, v in model_state.items() if k not in frozen}, optim_state


def save(root: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict,
         d: distributed.Dist, keep: int) -> Path:
    """Every rank calls this; returns the checkpoint directory."""
    final, tmp = root / f"step_{step:06d}", root / f"step_{step:06d}.tmp"
    if d.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    distributed.barrier()
    model_state, optim_state = trained_state(model, optimizer)
    with warnings.catch_warnings():  # a single process without a process group is intended here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp)
    torch.save(_rng_state(), tmp / f"rng_rank{d.rank}.pt")
    distributed.barrier()
    if d.main:
        (tmp / "trainer.json").write_text(json.dumps({**meta, "step": step, "world_size": d.world_size}, indent=1))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (root / "latest.tmp").write_text(final.name)
        os.replace(root / "latest.tmp", root / "latest")
        for old in sorted(p for p in root.glob("step_*") if not p.name.endswith(".tmp"))[:-keep]:
            shutil.rmtree(old)
    distributed.barrier()
    return final


def load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, expected: dict[str, list[int]],
         d: distributed.Dist) -> dict:
    """Restore model, optimizer and this rank's RNG from `path`; returns trainer.json's contents."""
    try:
        meta = json.loads((path / "trainer.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} is not a complete checkpoint (no trainer.json)") from None
    if meta["signature"] != expected:
        raise CheckpointError(f"checkpoint {path} was written for a different model: {_diff(meta['signature'], expected)}. "
                              "Refusing to start from scratch; point checkpoint.resume at a matching checkpoint, "
                              "or use a new run name.")
    model_state, optim_state = trained_state(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=path)
    except Exception as e:  # DCP raises several types for missing or mismatched entries
        raise CheckpointError(f"checkpoint {path} does not match this run's model or optimizer: {e}") from e
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=INTO_TRAINED)
    rng = path / f"rng_rank{d.rank}.pt"
    if meta["world_size"] == d.world_size and rng.exists():
        _set_rng_state(torch.load(rng, weights_only=True))
    elif d.main:
        print(f"warning: {path} was written by {meta['world_size']} ranks, this run has {d.world_size}: "
              "model, optimizer and data position are restored, per-rank RNG states are not")
    return meta


def export_hf(path: Path, model: nn.Module, lm: nn.Module, tokenizer, dtype: torch.dtype, d: distributed.Dist) -> None:
    """Write the policy as a Hugging Face model directory (for reco_scaled.evaluate and vLLM); all ranks call it.

    model: the (wrapped) PolicyModel; lm: its inner HF model, whose config and save_pretrained are used.
    The weights are written in `dtype`, and config.json's "dtype" says so (dtype="auto" loads them as such). With
    LoRA adapters, the plain model's weights with the adapters merged in (model.merged_weights).
    """
    if any(".lora_" in name for name, _ in lm.named_parameters()):  # model.lora_rank, under DDP: lm holds it all
        state = {f"lm.{k}": v.cpu() for k, v in merged_weights(lm).items()} if d.main else {}
    else:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered on rank 0 only
        state = get_model_state_dict(model, options=options)
    if d.main:
        # gathered copies of tied weights (lm_head = embed_tokens) are no longer shared: keep each parameter once
        names = {n.replace(".base_layer.", ".") for n, _ in lm.named_parameters() if ".lora_" not in n}
        names |= {n for n, _ in lm.named_buffers()}
        state = {k.removeprefix("lm."): v.to(dtype) for k, v in state.items() if k.removeprefix("lm.") in names}
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        lm.save_pretrained(tmp, state_dict=state)
        config = copy.deepcopy(lm.config)  # save_pretrained records the dtype of lm's (fp32) parameters, not of `state`
        config.dtype = dtype
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    distributed.barrier()


def _diff(saved: dict, expected: dict) -> str:
    missing, extra = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    shapes = [k for k in expected if k in saved and saved[k] != expected[k]]
    parts = []
    if shapes:
        parts.append(f"shape of {shapes[0]} is {saved[shapes[0]]} there, {expected[shapes[0]]} here "
                     f"({len(shapes)} tensors differ)")
    if missing:
        parts.append(f"{len(missing)} parameters missing there (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} unknown parameters there (e.g. {extra[0]})")
    return "; ".join(parts)


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])
