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


class _Gather(torch.autograd.Function):
    """all_gather of [b, ...] shards in rank order; backward sums every rank's gradient of the gathered
    batch and keeps this rank's rows (a reduce-scatter): each rank's loss reads every shard."""

    @staticmethod
    def forward(ctx, x):
        ctx.rows = x.shape[0]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad):
        grad, rank, b = grad.contiguous(), dist.get_rank(), ctx.rows
        if dist.get_backend() == dist.Backend.NCCL:
            out = torch.empty_like(grad[:b])
            dist.reduce_scatter_tensor(out, grad)
            return out
        dist.all_reduce(grad)  # gloo has no reduce-scatter: twice the traffic, the same sums
        return grad[rank * b:(rank + 1) * b]


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """[b, D] local shard -> [W * b, D] global batch in rank order. Gradients reach every shard, summed
    over the ranks' losses; DDP's averaging then makes it the gradient of their mean (train/distributed.py)."""
    if not context().enabled:
        return x
    return _Gather.apply(x)


def local_rows(b: int) -> slice | None:
    """This rank's rows of a gathered global batch of shards of ``b`` rows (None in a single process)."""
    ctx = context()
    return slice(ctx.rank * b, (ctx.rank + 1) * b) if ctx.enabled else None


def global_values(parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each scalar part with its mean over the ranks as its value and this rank's own gradient: ranks
    compute different local losses (their rows of the contrastive loss) whose mean is the global batch's
    loss, and the log should show that, not rank 0's share. One all-reduce of a few scalars."""
    ctx = context()
    if not ctx.enabled:
        return parts
    names = list(parts)
    own = torch.stack([parts[n].detach().float() for n in names])
    mean = own.clone()
    dist.all_reduce(mean)
    mean /= ctx.world
    return {n: parts[n] + (mean[i] - own[i]).to(parts[n].dtype) for i, n in enumerate(names)}


def wrap_ddp(module: torch.nn.Module, ctx: DistContext) -> torch.nn.Module:
    """DDP over the parameters that currently require grad (rebuilt per stage, as freezing changes);
    find_unused_parameters: families leave parts unused (VisualSparta's text side has no network)."""
    if not ctx.enabled:
        return module
    from torch.nn.parallel import DistributedDataParallel  # start-up: DDP only with several ranks

    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)
