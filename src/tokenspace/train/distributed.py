"""Data-parallel training under torchrun: process groups, sharded global batches, embedding gathers.

    torchrun --nproc_per_node 8 -m tokenspace.train.distributed --recipe stair-paper --out runs/stair

How a step is split (the Trainer does it; everything here is a no-op in a single process):
- Every rank draws the same global batch (same sampler seed) and encodes its contiguous shard of it.
- Image and text embeddings are all-gathered. Each rank computes its rows of the contrastive loss
  against the whole batch: its images against every text and every image against its texts, [b, B]
  + [B, b] logits instead of [B, B] (open_clip's ``local_loss``; at STAIR's 64 x 256 that is 32x less
  loss compute per rank); the mean of the ranks' shares is the global batch's loss. The FLOPs
  regulariser takes its mean over the whole gathered batch on every rank: per-rank FLOPs means would
  regularise W small batches instead of one large one, which makes multi-GPU runs sparser than the
  single-GPU run of the same recipe.
- Gradients: rank s's loss L_s reads every rank's shard, so the gather's backward sums the ranks'
  gradients of the gathered batch and keeps each rank's rows (a reduce-scatter): rank r gets
  sum_s dL_s/de_r, and DDP's averaging turns that into the gradient of mean_s L_s, the global loss,
  exactly the single-process gradient. A part every rank computes identically (FLOPs) gets W times its
  gradient from the sum, which the averaging cancels. The logged values are the ranks' means.
- Rank 0 writes logs and checkpoints; every rank loads the checkpoint to resume.

The primitives live in train/ranks.py (the trainers import them from there); this module is the
torchrun entry on top of train/scale.py and re-exports them, so the dependency goes one way:
distributed -> scale -> trainer -> ranks.
"""
from __future__ import annotations

import argparse

import torch.distributed as dist

from tokenspace.train.ranks import (  # noqa: F401 - the process-group primitives, re-exported
    DistContext,
    context,
    gather_with_grad,
    init,
    launched_by_torchrun,
    wrap_ddp,
)
from tokenspace.train.recipe import parse_overrides
from tokenspace.train.scale import train


def main(argv: list[str] | None = None) -> int:
    """``python -m tokenspace.train.distributed`` (under torchrun): train a recipe on all ranks."""
    p = argparse.ArgumentParser(description="train a recipe, data-parallel under torchrun")
    p.add_argument("--recipe", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--home", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe key (YAML value)")
    args = p.parse_args(argv)
    try:
        overrides = parse_overrides(args.set)
    except ValueError as e:  # one line, before any process group starts
        raise SystemExit(str(e)) from None
    ctx = init()
    try:
        train(args.recipe, args.out, home=args.home, resume=args.resume, progress=ctx.is_main, **overrides)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
