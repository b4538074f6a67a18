"""VisualSparta's training objective (eq. 13) with in-batch negatives.

    J = f(q, v+) - log sum_k exp f(q, k)

for each text query q, over the images of the batch: a cross entropy that picks the query's own
image. The paper's sum is written over the negatives V-; like its reference implementation (SPARTA,
Zhao et al. 2020: "we use cross entropy loss") we include the positive in the normaliser, which is
the standard softmax cross entropy and keeps J bounded above by 0. Only the text -> image direction
is trained: VisualSparta is a text-to-image retriever. No temperature multiplies f (the model's
``logit_scale`` is fixed at 1).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def text_to_image_loss(logits: torch.Tensor) -> torch.Tensor:
    """[Bi, Bt] image x text scores, positives on the diagonal -> mean over queries of -J."""
    if logits.shape[0] != logits.shape[1]:
        raise ValueError(f"in-batch negatives need a square score matrix, got {tuple(logits.shape)}")
    target = torch.arange(logits.shape[0], device=logits.device)
    return F.cross_entropy(logits.T, target)  # rows = queries, columns = candidate images
