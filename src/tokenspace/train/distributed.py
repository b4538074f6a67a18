"""Data-parallel training under torchrun: process groups, sharded global batches, embedding gathers.

    torchrun --nproc_per_node 8 -m tokenspace.train.distributed --recipe stair-paper --out runs/stair

How a step is split (the Trainer does it; everything here is a no-op in a single process):
- Every rank draws the same global batch (same sampler seed) and encodes its contiguous shard of it.
- Image and text embeddings are all-gathered, so each rank computes the *global* loss: the contrastive
  logits over the whole batch and the FLOPs regulariser's mean over the whole batch. Per-rank FLOPs
  means would regularise W small batches instead of one large one, which makes multi-GPU runs sparser
  than the single-GPU run of the same recipe.
- Gradients flow through the rank's own shard only (the other shards are constants here: open_clip's
  ``local_loss=False`` layout). Since every rank computes the identical global loss L, rank r's shard
  gradient dL/de_r is the exact one; scaling it by the world size W cancels DDP's gradient averaging,
  so parameters get exactly the single-process gradient of L, with no backward communication. The
  logit scale, used on the full matrix by every rank, gets dL/ds on each rank; averaging keeps it.
- Rank 0 writes logs and checkpoints; every rank loads the checkpoint to resume.
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
    from torch.nn.parallel import DistributedDataParallel

    ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m tokenspace.train.distributed`` (under torchrun): train a recipe on all ranks."""
    import argparse

    import yaml

    p = argparse.ArgumentParser(description="train a recipe, data-parallel under torchrun")
    p.add_argument("--recipe", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--home", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe key (YAML value)")
    args = p.parse_args(argv)
    overrides = {}
    for kv in args.set or []:
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"--set takes KEY=VALUE, got {kv!r}")
        overrides[k] = yaml.safe_load(v)
    ctx = init()
    try:
        from tokenspace.train.scale import train

        train(args.recipe, args.out, home=args.home, resume=args.resume, progress=ctx.is_main, **overrides)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
