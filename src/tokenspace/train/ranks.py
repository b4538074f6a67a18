"""Process groups for data-parallel training: rank contexts, sharded global batches, embedding gathers.

The primitives the Trainer and the ScaleTrainer use; ``python -m tokenspace.train.distributed`` (the
torchrun entry, train/distributed.py) re-exports them. How a step is split across ranks: see
train/distributed.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def shard(self, idx: np.ndarray) -> np.ndarray:
        """This rank's contiguous slice of a global batch (trimmed to a multiple of the world size)."""
        per = len(idx) // self.world
        if per < 1:
            raise ValueError(f"global batch of {len(idx)} cannot be split over {self.world} ranks")
        return idx[self.rank * per:(self.rank + 1) * per]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def launched_by_torchrun() -> bool:
    """torchrun (and torch.distributed.launch) set these for every worker."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"))


def init(backend: str | None = None) -> DistContext:
    """Join the process group torchrun set up (NCCL on GPUs, gloo on CPUs); single process otherwise."""
    if not launched_by_torchrun():
        return DistContext()
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend)
    ctx = context()
    if torch.cuda.is_available():
        torch.cuda.set_device(ctx.local_rank)
    return ctx


def context() -> DistContext:
    """The current process group's rank and size (rank 0 of 1 without one)."""
    if dist.is_available() and dist.is_initialized():
        return DistContext(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return DistContext()


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the gradient by a constant (the world size, see the module doc)."""

    @staticmethod
    def forward(ctx, x, scale: float):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """[b, D] local shard -> [W * b, D] global batch in rank order; gradients reach the local shard
    only, scaled by W (exact under DDP's averaging when every rank computes the same loss)."""
    ctx = context()
    if not ctx.enabled:
        return x
    parts = [torch.empty_like(x) for _ in range(ctx.world)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[ctx.rank] = _ScaleGrad.apply(x, float(ctx.world))
    return torch.cat(parts, dim=0)


def wrap_ddp(module: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    """DDP over the parameters that currently require grad (rebuilt per stage, as freezing changes);
    find_unused_parameters: families leave parts unused (VisualSparta's text side has no network)."""
    if not ctx.enabled:
        return module
    from torch.nn.parallel import DistributedDataParallel  # start-up: DDP only with several ranks

    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)
