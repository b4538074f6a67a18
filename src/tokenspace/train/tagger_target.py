"""The tagger's classifier-derived token evidence as a target for a trained image head (STAIR).

The tagger (models/tagger.py) turns EfficientNet-Lite0's own ImageNet classifier into token vectors
with no image-text pairs: a tabby's grid gives tab ##by, cat, domestic, feline, ... Two optional
uses for a model whose image side maps the same backbone grids into the same vocabulary:

- **auxiliary target**: ``TaggerTarget.loss(image_emb, rows)`` = mean over the batch of
  1 - cos(image vector, tagger vector), added with a small weight to the contrastive loss;
- **warm start**: ``warm_start(model, grids, target)`` fits only the image head (not the backbone,
  not the text tower's tied word embeddings) to the tagger vectors for a few steps before training.

Both are labelled options outside the paper recipes (STAIR never sees an ImageNet label). The targets
are computed once per collection from the cached grids and kept sparse (a SparseBatch, ~10^2 tokens
per image), so memory stays at the size of the collection's tagger vectors. Wiring into the trainer's
loss is not done here (train/trainer.py); this module and its test are the building block.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tokenspace.sparse import SparseBatch


class TaggerTarget:
    """Per-image tagger vectors for a collection of cached grids, and the loss against them."""

    def __init__(self, tagger, grids, batch_size: int = 256):
        if not getattr(tagger, "family", "") == "tagger":
            raise TypeError(f"TaggerTarget needs a tagger model, not {getattr(tagger, 'family', type(tagger))!r}")
        self.rows: SparseBatch = tagger.encode_image_grids(grids, batch_size=batch_size)  # L2-normalised
        self.dim = self.rows.dim

    def __len__(self) -> int:
        return len(self.rows)

    def dense(self, index: Sequence[int] | np.ndarray) -> torch.Tensor:
        """Target rows for a batch of collection indices: [B, V] float32."""
        return torch.from_numpy(self.rows[np.asarray(index, dtype=np.int64)].to_dense())

    def loss(self, image_emb: torch.Tensor, index: Sequence[int] | np.ndarray) -> torch.Tensor:
        """mean_b (1 - cos(image_emb_b, target_b)); rows whose target is empty are left out."""
        if image_emb.shape[-1] != self.dim:
            raise ValueError(f"image vectors have {image_emb.shape[-1]} dims, the targets {self.dim}")
        target = self.dense(index).to(image_emb.device, image_emb.dtype)
        has = target.norm(dim=-1) > 0
        if not has.any():
            return image_emb.sum() * 0.0  # keeps the graph; nothing to pull towards
        cos = torch.nn.functional.cosine_similarity(image_emb[has], target[has], dim=-1, eps=1e-12)
        return (1.0 - cos).mean()


def head_parameters(model) -> list[torch.nn.Parameter]:
    """The image side minus the backbone and the text tower (for STAIR: TRANSFORM and the image bias)."""
    skip = {id(p) for p in model.image_tower.parameters()} | {id(p) for p in model.text_tower.parameters()}
    return [p for p in model.image_parameters() if id(p) not in skip]


def warm_start(model, grids, target: TaggerTarget, steps: int = 100, lr: float = 1e-3, batch_size: int = 64,
               seed: int = 0) -> list[float]:
    """Fit the image head to the tagger vectors (AdamW on ``head_parameters``); returns the loss per step.

    Only the head moves: the backbone grids are inputs and the word embeddings stay shared with the text
    tower as they were, so the text side is untouched."""
    if len(grids) != len(target):
        raise ValueError(f"{len(grids)} grids but {len(target)} targets")
    params = head_parameters(model)
    if not params:
        raise ValueError(f"{getattr(model, 'family', type(model).__name__)} has no image head to warm-start")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    gen = np.random.default_rng(seed)
    was_training = model.training
    model.train()
    losses = []
    try:
        for _ in range(steps):
            idx = gen.choice(len(grids), size=min(batch_size, len(grids)), replace=False)
            g = torch.as_tensor(np.asarray(grids[np.sort(idx)]), dtype=torch.float32)
            loss = target.loss(model.image_embed(g), np.sort(idx))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        model.train(was_training)
    return losses
