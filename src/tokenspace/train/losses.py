"""Losses as small modules returning their named parts, so the training log shows what moved."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def contrastive_loss(logits: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE over an [B, B] image x text logit matrix whose diagonal are the positives (eq. 3)."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def flops_loss(emb: torch.Tensor) -> torch.Tensor:
    """FLOPs regulariser (Paria et al. 2020; STAIR eq. 6): sum_k (mean_i |ENC_k^(i)|)^2.

    The mean is over the batch it is given; under DDP pass the globally gathered batch, or per-rank
    means make multi-GPU runs sparser than single-GPU ones."""
    return emb.abs().mean(dim=0).pow(2).sum()


def quadratic_warmup(step: int, warmup_steps: int) -> float:
    """Weight multiplier that grows quadratically to 1 over ``warmup_steps`` (SPLADE's schedule)."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, (step / warmup_steps) ** 2)


class SparseContrastiveLoss(nn.Module):
    """L = L_CON + lambda_img * L_FLOPs(image) + lambda_txt * L_FLOPs(text)   (STAIR eq. 7).

    With both lambdas 0 it is the plain CLIP loss used by the dense baseline and Sparse CLIP.
    """

    def __init__(self, lambda_image: float = 0.0, lambda_text: float = 0.0, warmup_steps: int = 0):
        super().__init__()
        if lambda_image < 0 or lambda_text < 0:
            raise ValueError("FLOPs weights must be non-negative")
        self.lambda_image = lambda_image
        self.lambda_text = lambda_text
        self.warmup_steps = warmup_steps

    def forward(self, image_emb, text_emb, model, step: int) -> dict[str, torch.Tensor]:
        scale = model.logit_scale
        logits = scale * model.score(image_emb, text_emb)  # [B, B]
        # a family may define its own objective over the logit matrix (VisualSparta's eq. 13 is
        # text -> image only); every other model gets the symmetric CLIP loss
        objective = getattr(model, "contrastive_objective", contrastive_loss)
        parts = {"contrastive": objective(logits)}
        w = quadratic_warmup(step, self.warmup_steps)
        if self.lambda_image:
            parts["flops_image"] = w * self.lambda_image * flops_loss(image_emb)
        if self.lambda_text:
            parts["flops_text"] = w * self.lambda_text * flops_loss(text_emb)
        parts["loss"] = sum(parts.values())
        parts["logit_scale"] = scale.detach()
        return parts
