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
