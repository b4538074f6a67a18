"""Pooling shared by the towers: STAIR's max pooling + log(1 + ReLU) (eq. 5) and masked means."""
from __future__ import annotations

import sys

import torch


def in_onnx_export() -> bool:
    """``torch.onnx.is_in_onnx_export()`` without importing torch.onnx (torch loads it on first use of
    ``torch.onnx``: ~0.2 s of a CLI search's start-up): while nothing imported it, nothing exports."""
    return "torch.onnx" in sys.modules and torch.onnx.is_in_onnx_export()

def max_log1p_relu(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """[B, L, V] per-position vocabulary scores -> [B, V] = log(1 + relu(max_j scores[:, j])).

    ``mask`` [B, L] marks valid positions (1) vs padding (0); padded positions never win the max.
    The max is taken before the ReLU (eq. 5); both orders are equal because ReLU and log1p are monotone.
    """
    if mask is not None:
        scores = scores.masked_fill(~mask.bool()[..., None], float("-inf"))
    return log1p_relu(scores.amax(dim=1))


def keep_top(x: torch.Tensor, k: int) -> torch.Tensor:
    """[B, D] -> [B, D] with all but each row's k largest entries zeroed (Sparse CLIP's TopK activation,
    and the top-n pruning of encoded rows: VisualSparta Table 3). k >= D keeps the row as it is.

    Equal entries at the cut are kept lower index first. torch.topk leaves that choice open, and ONNX's
    TopK makes exactly this one (its spec), so an exported model (models/onnx_export.py) keeps the same
    tokens: the release model's tagger gives many tokens one weight, and a quarter of its emoji:test
    image rows had tied weights at the 100th place."""
    if k >= x.shape[-1]:
        return x
    if in_onnx_export():
        idx = x.topk(k, dim=-1).indices  # ONNX TopK: ties by the lower index
    else:
        idx = x.sort(dim=-1, descending=True, stable=True).indices[..., :k]  # stable: ties by the lower index
    return torch.zeros_like(x).scatter(-1, idx, x.gather(-1, idx))


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """[B, L, H] -> [B, H], averaging valid positions only."""
    if mask is None:
        return hidden.mean(dim=1)
    m = mask.to(hidden.dtype)[..., None]
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1.0)


def grid_to_cells(grid: torch.Tensor) -> torch.Tensor:
    """Image feature map [B, C, h, w] -> grid cells [B, h*w, C] (row-major, as heatmaps expect)."""
    return grid.flatten(2).transpose(1, 2)


class _Log1pReluRevive(torch.autograd.Function):
    """log(1 + relu(x)) whose backward also lets a dead unit (x <= 0) receive the part of its gradient
    that would raise it, scaled by ``revive``: the ReLU's zero gradient otherwise leaves a token that
    starts below zero unreachable, however often it occurs in the paired captions."""

    @staticmethod
    def forward(ctx, x, revive):
        ctx.save_for_backward(x)
        ctx.revive = revive
        return torch.log1p(torch.relu(x))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        alive = x > 0
        # descent moves x by -grad: only negative gradients raise a dead unit
        dead = ctx.revive * grad.clamp(max=0)
        return torch.where(alive, grad / (1 + x.clamp_min(0)), dead), None


def log1p_relu(x: torch.Tensor, revive: float = 0.0) -> torch.Tensor:
    """log(1 + relu(x)) (STAIR eq. 5); the forward value never depends on ``revive`` (see above)."""
    if revive <= 0 or not torch.is_grad_enabled():
        return torch.log1p(torch.relu(x))
    return _Log1pReluRevive.apply(x, float(revive))
