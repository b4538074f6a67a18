"""The contrastive loss over the active tokens only: exact, and cheaper when the batch is sparse.

A FLOPs-regularised batch uses a small share of the vocabulary: the release STAIR model's vectors of
256 emoji pairs are non-zero in a few thousand of the 30,522 columns (docs/scale.md). Every column
that is zero in every image and text row of the *global* batch adds nothing to the loss and receives
no gradient from it:
- score: a row's norm and every dot product sum over its non-zeros only; the gradient of
  (x_i . y_j) / (|x_i| |y_j|) with respect to x_ik is y_jk / (|x_i| |y_j|) - (...) x_ik, zero when
  column k is zero in both sides;
- FLOPs (sum_k (mean_i |a_ik|)^2, or its reference-batch form) and Sparse CLIP's L1: a zero column
  contributes 0 and |.|'s gradient at 0 is 0.
So the trainer keeps only the union of the columns non-zero anywhere in the global batch (the union is
all-reduced across ranks, so every rank keeps the same columns in the same order) before it gathers
the embeddings: the gather moves [b, U] instead of [b, D] per rank, and the logits are dense products
over U columns ([B, U] x [U, B] in one process; each rank's [b, B] and [B, b] blocks under DDP). Loss values and gradients equal the full computation's up to float summation
order (tests/train/test_active_loss.py, and the 2-rank gloo run in tests/scale/test_distributed.py).

The loss, a family's ``contrastive_objective`` and ``regularization`` then see the active columns only,
in ascending order. That is exact for everything they compute today (see above); a future penalty that
depends on *which* column is which, or on zero columns, must not be computed on these embeddings.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from tokenspace.train import ranks


def active_columns(*embs: torch.Tensor) -> torch.Tensor:
    """Ascending indices [U] of the columns that are non-zero in some row of some of ``embs`` on some
    rank (the same on every rank: the union is all-reduced). All ``embs`` are [b, D] with one D."""
    with torch.no_grad():
        active = torch.zeros(embs[0].shape[1], dtype=torch.int32, device=embs[0].device)
        for e in embs:
            active |= (e != 0).any(dim=0).to(torch.int32)  # NaN counts as non-zero: it must stay visible
        if ranks.context().enabled:
            dist.all_reduce(active, op=dist.ReduceOp.MAX)
        return active.nonzero().squeeze(1)


def keep_active(image_emb: torch.Tensor, text_emb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[b, D] image and text embeddings -> [b, U] each: the columns of ``active_columns``. Returned as
    they are when the two sides differ in width (no shared token space) or every column is active (a
    dense model: a copy would only cost). Gradients flow back to the kept columns (index_select)."""
    if image_emb.shape[1] != text_emb.shape[1]:
        return image_emb, text_emb
    cols = active_columns(image_emb, text_emb)
    if len(cols) == image_emb.shape[1]:
        return image_emb, text_emb
    return image_emb.index_select(1, cols), text_emb.index_select(1, cols)
