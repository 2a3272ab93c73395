"""Process group, device and model wrapping (DDP or FSDP2), and the collectives the trainer needs.

A run without torchrun is one process with no process group and no wrapper. Under torchrun the
backend is NCCL on GPUs and gloo on CPUs.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return dist.is_available() and dist.is_initialized()


def init() -> Dist:
    """Join the torchrun process group when there is one; pick this rank's device."""
    cuda = torch.cuda.is_available()
    if not cuda and "OMP_NUM_THREADS" not in os.environ:
        # One intra-op thread, as torchrun sets: small CPU models gain little from more, and on shared
        # or oversubscribed cores two threads ran this project's tiny config 20x slower than one.
        torch.set_num_threads(1)
    if "WORLD_SIZE" not in os.environ:
        return Dist(0, 1, torch.device("cuda" if cuda else "cpu"))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (returns a new tensor; identity in a single process)."""
    x = x.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def all_max(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x


def wrap(model: nn.Module, layers: list[nn.Module], parallel: str, d: Dist, trainable: bool = True) -> nn.Module:
    """Move a model to this rank's device and wrap it.

    fsdp2: one `fully_shard` per decoder layer plus the root (it moves each shard to the device);
    ddp: DDP around the model, or the bare model when it has no gradients. No process group: bare.
    """
    if not d.active or parallel == "ddp":
        model.to(d.device)
        if not d.active or not trainable:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(d.device.type, (d.world_size,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP2) on all but the last micro-batch."""
    if enabled or not hasattr(model, "no_sync") and not hasattr(model, "set_requires_gradient_sync"):
        yield  # last micro-batch, or a bare model
    elif hasattr(model, "no_sync"):  # DDP
        with model.no_sync():
            yield
    else:  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)


def grad_norm_clip(params: list[nn.Parameter], max_norm: float) -> float:
    """Clip the global gradient norm (DTensor-aware) and return the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)

