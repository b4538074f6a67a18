"""Losses as small modules returning their named parts, so the training log shows what moved."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenspace.models.capabilities import OwnObjective, Regularized


def contrastive_loss(logits: torch.Tensor, cols: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
    """Symmetric InfoNCE over an image x text logit matrix whose diagonal are the positives (eq. 3).

    ``logits`` is the [B, B] matrix, or one rank's blocks of it under data parallelism (the ``rows`` of
    SparseContrastiveLoss): its images against every text [b, B], ``cols`` every image against its texts
    [B, b], ``offset`` its first row in the global batch. The ranks' mean is the [B, B] loss."""
    cols = logits if cols is None else cols
    target = offset + torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(cols.T, target))


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      cols: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
    """In-batch distillation (SPLADE++ / D2S style; a labelled deviation from STAIR): the student's softmax
    over the batch pulled toward the teacher's, in both retrieval directions of the [B, B] image x text
    logit matrices (teacher_logits a constant):
        0.5 * (KL(softmax(T) || softmax(S)) over rows + the same over columns), each a batch mean.
    It is 0 exactly when each row and column of S equals T's up to a constant shift. The student may be
    one rank's blocks, as in ``contrastive_loss``; the teacher is always the whole [B, B] matrix."""
    b = student_logits.shape[0]
    if student_logits.shape[1] != teacher_logits.shape[1] or offset + b > teacher_logits.shape[0]:
        raise ValueError(f"student logits {tuple(student_logits.shape)} (rows from {offset}) and teacher "
                         f"logits {tuple(teacher_logits.shape)} differ in shape")
    teacher_logits = teacher_logits.to(student_logits.dtype).detach()
    cols = student_logits if cols is None else cols

    def kl(s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:  # softmax over dim 1, mean over rows
        return F.kl_div(F.log_softmax(s, dim=1), F.log_softmax(t, dim=1), reduction="batchmean",
                        log_target=True)

    rows = slice(offset, offset + b)
    return 0.5 * (kl(student_logits, teacher_logits[rows]) + kl(cols.T, teacher_logits[:, rows].T))


def flops_loss(emb: torch.Tensor, reference_batch: int | None = None) -> torch.Tensor:
    """FLOPs regulariser (Paria et al. 2020; STAIR eq. 6): sum_k (mean_i |ENC_k^(i)|)^2.

    The mean is over the batch it is given; under DDP pass the globally gathered batch, or per-rank
    means make multi-GPU runs sparser than single-GPU ones.

    Its value depends on the batch size B: E[(batch mean)^2] = mu_k^2 + Var_k / B, and the Var / B part
    is a per-sample L2 pressure (a token active in one sample only is pushed down 2 lambda a / B^2,
    i.e. 2 lambda a / B relative to the per-sample contrastive gradient). With ``reference_batch`` R
    the loss is instead an unbiased estimate of eq. 6 *at batch R* from a batch of any size B >= 2:
        (1 - 1/R) * U + (1/R) * mean_i a_i^2,   U = (S^2 - Q) / (B (B - 1)),   S = sum_i a_i, Q = sum_i a_i^2
    (U is the unbiased estimate of mu^2); at B == R it equals eq. 6 exactly. No rescaling of lambda
    can do this: the two parts scale differently with B."""
    a = emb.abs()
    if reference_batch is None:
        return a.mean(dim=0).pow(2).sum()
    b = a.shape[0]
    if b < 2:
        raise ValueError("flops_loss with a reference batch needs at least 2 rows")
    s, q = a.sum(dim=0), a.pow(2).sum(dim=0)
    mu2 = (s.pow(2) - q) / (b * (b - 1))
    r = float(reference_batch)
    return ((1 - 1 / r) * mu2 + q / (b * r)).sum()


def quadratic_warmup(step: int, warmup_steps: int) -> float:
    """Weight multiplier that grows quadratically to 1 over ``warmup_steps`` (SPLADE's schedule)."""
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, (step / warmup_steps) ** 2)


class SparseContrastiveLoss(nn.Module):
    """L = L_CON + lambda_img * L_FLOPs(image) + lambda_txt * L_FLOPs(text)   (STAIR eq. 7)
           [+ distill * distillation_loss(student logits, teacher logits)   (not STAIR: train/distill.py)]

    With both lambdas 0 it is the plain CLIP loss used by the dense baseline and Sparse CLIP.
    """

    def __init__(self, lambda_image: float = 0.0, lambda_text: float = 0.0, warmup_steps: int = 0,
                 reference_batch: int | None = None, distill: float = 0.0):
        super().__init__()
        if lambda_image < 0 or lambda_text < 0:
            raise ValueError("FLOPs weights must be non-negative")
        if distill < 0:
            raise ValueError("the distillation weight must be non-negative")
        self.distill = distill
        self.lambda_image = lambda_image
        self.lambda_text = lambda_text
        self.warmup_steps = warmup_steps
        self.reference_batch = reference_batch  # flops_loss: eq. 6 as at this batch size

    def forward(self, image_emb, text_emb, model, step: int, teacher_logits: torch.Tensor | None = None,
                rows: slice | None = None) -> dict[str, torch.Tensor]:
        """``step`` drives the FLOPs warm-up: the step within the stage or the run (Recipe).
        ``teacher_logits`` [B, B]: the teacher's scores of this batch, needed when ``distill`` > 0.
        ``rows``: under data parallelism, this rank's rows of the gathered batch: the contrastive and
        distillation parts are then this rank's share (``contrastive_loss``), [b, B] + [B, b] logits
        instead of [B, B] (open_clip's local loss), and the FLOPs parts the global batch's as before."""
        scale = model.logit_scale
        if rows is None:
            logits, cols, offset = scale * model.score(image_emb, text_emb), None, 0  # [B, B]
        else:
            logits = scale * model.score(image_emb[rows], text_emb)  # [b, B]
            cols, offset = scale * model.score(image_emb, text_emb[rows]), rows.start  # [B, b]
        # a family may define its own objective over the logit matrix (VisualSparta's eq. 13 is
        # text -> image only); every other model gets the symmetric CLIP loss
        objective = model.contrastive_objective if isinstance(model, OwnObjective) else contrastive_loss
        parts = {"contrastive": objective(logits, cols, offset)}
        if self.distill:
            if teacher_logits is None:
                raise ValueError("a distillation weight needs the batch's teacher logits")
            parts["distill"] = self.distill * distillation_loss(logits, teacher_logits, cols, offset)
        w = quadratic_warmup(step, self.warmup_steps)
        if self.lambda_image:
            parts["flops_image"] = w * self.lambda_image * flops_loss(image_emb, self.reference_batch)
        if self.lambda_text:
            parts["flops_text"] = w * self.lambda_text * flops_loss(text_emb, self.reference_batch)
        # a family may add its own penalties, as named parts (Sparse CLIP's L1 arm of Fig. 2b)
        if isinstance(model, Regularized):
            parts.update(model.regularization(image_emb, text_emb))
        parts["loss"] = sum(parts.values())
        parts["logit_scale"] = scale.detach()
        return parts
