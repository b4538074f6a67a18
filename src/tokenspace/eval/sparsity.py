"""Sparsity statistics: mean active dimensions per image / text and the SPLADE-style FLOPs.

FLOPs here is the expected number of multiply-adds of one image-text dot product through an inverted
index: sum over dims d of p_img(d) * p_txt(d), where p(d) is the fraction of vectors with d active
(Paria et al. 2020; Formal et al. 2021; STAIR Fig. 8 reports the nnz side of the same trade-off).
"""
from __future__ import annotations

import numpy as np

from tokenspace.eval.scoring import Embeddings, n_dims, n_rows
from tokenspace.sparse import SparseBatch


def active_counts(x: Embeddings, tau: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(per-row number of entries > tau, per-dim number of rows with that dim > tau)."""
    if isinstance(x, SparseBatch):
        keep = x.values > tau
        rows = np.repeat(np.arange(len(x)), x.row_nnz())
        return (np.bincount(rows[keep], minlength=len(x)),
                np.bincount(x.indices[keep], minlength=x.dim))
    active = np.asarray(x) > tau
    return active.sum(axis=1), active.sum(axis=0)


def activation_probability(x: Embeddings, tau: float = 0.0) -> np.ndarray:
    """p(d): fraction of rows where dim d is active."""
    _, per_dim = active_counts(x, tau)
    return per_dim / max(n_rows(x), 1)


def flops(image_emb: Embeddings, text_emb: Embeddings, tau: float = 0.0) -> float:
    """Expected multiply-adds per image-text pair: sum_d p_img(d) * p_txt(d)."""
    if n_dims(image_emb) != n_dims(text_emb):
        raise ValueError("image and text embeddings must share their dimension")
    return float(np.dot(activation_probability(image_emb, tau), activation_probability(text_emb, tau)))


def sparsity_stats(image_emb: Embeddings, text_emb: Embeddings | None = None, tau: float = 0.0) -> dict[str, float]:
    """``nnz_image`` / ``nnz_text`` (mean active dims per vector) and ``flops`` (needs both sides)."""
    out = {"nnz_image": float(np.mean(active_counts(image_emb, tau)[0])) if n_rows(image_emb) else 0.0}
    if text_emb is not None:
        out["nnz_text"] = float(np.mean(active_counts(text_emb, tau)[0])) if n_rows(text_emb) else 0.0
        out["flops"] = flops(image_emb, text_emb, tau)
    return out


class SparsityEvaluator:
    """Call with image (and optionally text) embeddings; primary metric is ``nnz_image`` (always present)."""

    def __init__(self, tau: float = 0.0, primary_metric: str = "nnz_image"):
        self.tau = tau
        self.primary_metric = primary_metric

    def __call__(self, image_emb: Embeddings, text_emb: Embeddings | None = None) -> dict[str, float]:
        return sparsity_stats(image_emb, text_emb, self.tau)
