"""Process group, device and model wrapping (DDP or FSDP2, with rank 0's weights sent to the other ranks),
and the collectives the trainer needs.

A run without torchrun is one process with no process group and no wrapper. Under torchrun the
backend is NCCL on GPUs and gloo on CPUs.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys
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


def init(timeout_minutes: float = 60.0) -> Dist:
    """Join the torchrun process group when there is one; pick this rank's device.

    timeout_minutes (config key train.dist_timeout_minutes): how long a collective waits for the other
    ranks before it fails; long, since rank 0 alone loads or exports a 7B model while the others wait.
    """
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
        dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None,
                                timeout=datetime.timedelta(minutes=timeout_minutes))
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def shutdown(clean: bool | None = None) -> None:
    """Leave the process group: together after a run that finished normally, at once otherwise.

    clean: whether the run finished normally; None reads it from the exception on its way out (a `finally`).
    Clean: without the barrier, a rank that left while the other was still busy aborted at exit ("terminate
    called without an active exception") in 3 of 47 two-rank gloo runs of tests/test_scaled_parallel.py;
    with it, in 0 of 45. Otherwise (an exception, or bad input handled with a `return`: issue 32 item 7) the
    other ranks may be waiting in a collective that this rank will never join, so a barrier would hang the
    job until the process-group timeout; the process group is aborted instead, this rank exits with its
    error, and torchrun ends the others (tests/test_scaled_failfast.py).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if clean is None:
        clean = sys.exc_info()[0] is None
    if not clean:
        abort = getattr(dist.distributed_c10d, "_abort_process_group", None)  # private, torch >= 2.6
        (abort or dist.destroy_process_group)()
        return
    dist.barrier()
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


def wrap(model: nn.Module, layers: list[nn.Module], parallel: str, d: Dist, trainable: bool = True,
         param_dtype: torch.dtype | None = None) -> nn.Module:
    """Move a model to this rank's device, wrap it, and give every rank rank 0's weights.

    Under torchrun only rank 0 needs real weights: the other ranks may build `model` on the meta
    device (model.build_lm does) and receive rank 0's weights here, one tensor at a time.
    fsdp2: one `fully_shard` per decoder layer plus the root; rank 0 sends each rank its shards. With
    `param_dtype` (bf16) the shards stay fp32 (the master weights the optimizer updates); each layer is
    gathered in param_dtype for compute and its gradients are reduce-scattered in fp32.
    ddp: DDP around the model, or the bare model when it has no gradients. No process group: bare.
    """
    if not d.active:
        return model.to(d.device)
    if parallel == "ddp":
        if _on_meta(model):
            to_empty(model, d.device)
        else:
            model.to(d.device)
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
        if not trainable:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # rank 0's full weights, as tensors of their own: fully_shard moves the parameters themselves to the device
    full = {name: p.detach() for name, p in model.named_parameters()} if d.main else {}
    mesh = init_device_mesh(d.device.type, (d.world_size,))
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    if _on_meta(model):
        to_empty(model, d.device)
    _send_shards_from_rank0(model, full, d)
    return model


@torch.no_grad()
def _send_shards_from_rank0(model: nn.Module, full: dict[str, torch.Tensor], d: Dist) -> None:
    """Fill the other ranks' FSDP2 shards from rank 0's full parameters, and every rank's buffers.

    fully_shard keeps dim-0 chunk r of each parameter on rank r (torch.chunk; ranks past the last chunk
    hold none), and rank 0's own chunk came from its real weights. Rank 0 sends each other rank only its
    chunk, so no other rank ever holds a full tensor (a broadcast, as in set_model_state_dict with
    broadcast_from_rank0, would put every full tensor on every rank in turn).
    """
    for name, p in model.named_parameters():  # shared (tied) parameters once
        if d.main:
            for r, chunk in enumerate(full[name].chunk(d.world_size)):
                if r:
                    dist.send(chunk.contiguous().to(d.device), dst=r)
        elif (local := p.to_local()).numel():
            dist.recv(local, src=0)
    for b in model.buffers():  # e.g. rotary inv_freq: outside the state dict, uninitialised on meta-built ranks
        dist.broadcast(b, src=0)


def to_empty(model: nn.Module, device: torch.device) -> nn.Module:
    """Give a meta-device model uninitialised storage on `device`; tied parameters stay tied."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)  # swap in place: a shared Parameter stays shared
    try:
        return model.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)


def _on_meta(model: nn.Module) -> bool:
    return any(t.is_meta for t in [*model.parameters(), *model.buffers()])


@contextlib.contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """DDP: skip the gradient all-reduce unless `enabled` (the last micro-batch of a mini-batch).

    FSDP2 needs nothing here: it reduce-scatters every micro-batch's gradients and adds them to the
    sharded ones, so no rank ever holds a full-size gradient (skipping the sync, FSDP2 would keep an
    unsharded fp32 gradient of every parameter until the last micro-batch; tests/test_scaled_real_shape.py
    measures both).
    """
    if enabled or not hasattr(model, "no_sync"):
        yield
    else:
        with model.no_sync():
            yield


def peak_rss_gib() -> float:
    """This process's peak resident host memory so far (Linux ru_maxrss is in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def per_rank(value: float, d: Dist) -> list[float]:
    """Every rank's `value`, in rank order (on every rank)."""
    x = torch.zeros(d.world_size, dtype=torch.float64, device=d.device)
    x[d.rank] = value
    return all_sum(x).tolist()


def grad_norm_clip(params: list[nn.Parameter], max_norm: float) -> float:
    """Clip the global gradient norm (DTensor-aware) and return the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)

