"""Sparse CLIP's feature-level interpretability metrics: Clarity, L0, active features, modality score.

Definitions (sparse-clip.txt, Sec. 3.1 and Fig. 3):

* I_i = {x in D : a_i(x) > tau} are the images activating feature i; F_active = {i : |I_i| >= n_min}.
* Clarity = 1/|F_active| * sum_{i in F_active} 1/(|I_i|(|I_i|-1)) * sum_{j != k in I_i} cos(e(x_j), e(x_k)),
  the mean pairwise cosine similarity of the images sharing a feature. ``e`` is a *reference* image
  embedding (the paper uses the original OpenAI CLIP vision encoder); it defaults to the activations
  themselves when no reference is given. The paper uses tau = 0.001, n_min = 2.
* L0: mean number of active features per vector. Active-feature fraction: features active (> tau) on
  at least ``min_count`` inputs of the dataset.
* Modality score (Fig. 3b, "image activation ratio", after Papadimitriou et al. 2025): per feature,
  the share of its activation mass that comes from images, mean_img(a_i) / (mean_img(a_i) + mean_txt(a_i)).
  Per-modality *means* make it independent of how many images vs texts were fed in (on a balanced
  set it equals sum_img / sum_all). 1 = image-only, 0 = text-only, NaN = never active. Activation
  density ("magnitude-weighted frequency") is (mean_img + mean_txt) / 2.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tokenspace.eval.scoring import Embeddings, as_matrix, l2_normalize, n_dims, n_rows
from tokenspace.eval.sparsity import active_counts
from tokenspace.sparse import SparseBatch

CLARITY_TAU = 0.001
CLARITY_N_MIN = 2


def l0(x: Embeddings, tau: float = 0.0) -> float:
    """Mean number of features > tau per vector."""
    per_row, _ = active_counts(x, tau)
    return float(per_row.mean()) if len(per_row) else 0.0


def active_feature_fraction(x: Embeddings, tau: float = 0.0, min_count: int = 1) -> float:
    """Fraction of all features that are > tau on at least ``min_count`` rows."""
    _, per_dim = active_counts(x, tau)
    return float(np.mean(per_dim >= min_count)) if len(per_dim) else 0.0


def _indicator(x: Embeddings, tau: float) -> sp.csr_matrix:
    """(features x rows) 0/1 matrix: feature i active on row x."""
    m = as_matrix(x)
    if sp.issparse(m):
        m = m.copy()
        m.data = (m.data > tau).astype(np.float32)
        m.eliminate_zeros()
        return m.T.tocsr()
    return sp.csr_matrix((m > tau).astype(np.float32).T)


def clarity_per_feature(activations: Embeddings, reference: Embeddings | None = None, tau: float = CLARITY_TAU,
                        n_min: int = CLARITY_N_MIN, block_features: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """(feature ids in F_active, their clarity), via sum_{j != k} cos = ||sum_j e_j||^2 - sum_j ||e_j||^2.

    That identity avoids the |I_i|^2 pairs: with unit rows, the squared norm of the sum counts every
    ordered pair once plus the |I_i| self-similarities (each 1; 0 for an all-zero reference row).
    """
    reference = activations if reference is None else reference
    if n_rows(reference) != n_rows(activations):
        raise ValueError("reference embeddings need one row per activation row")
    ind = _indicator(activations, tau)  # F x N
    counts = np.asarray(ind.sum(axis=1)).ravel()
    feats = np.nonzero(counts >= max(n_min, 2))[0]  # a single image has no pair to compare
    e = as_matrix(l2_normalize(reference))
    self_sim = (np.asarray(e.multiply(e).sum(axis=1)) if sp.issparse(e) else (e * e).sum(axis=1)).ravel()
    self_sim = np.asarray(self_sim, np.float64)
    out = np.empty(len(feats), np.float64)
    for a in range(0, len(feats), block_features):  # bounded memory: block x D sums at a time
        f = feats[a:a + block_features]
        sub = ind[f]
        sums = sub @ e
        sq = np.asarray(sums.multiply(sums).sum(axis=1) if sp.issparse(sums) else (sums * sums).sum(axis=1),
                        np.float64).ravel()
        n = counts[f].astype(np.float64)
        out[a:a + len(f)] = (sq - sub @ self_sim) / (n * (n - 1))
    return feats, out


def clarity(activations: Embeddings, reference: Embeddings | None = None, tau: float = CLARITY_TAU,
            n_min: int = CLARITY_N_MIN) -> dict[str, float]:
    """``clarity`` (NaN if no feature qualifies) and ``clarity_features`` = |F_active|."""
    feats, vals = clarity_per_feature(activations, reference, tau, n_min)
    return {"clarity": float(vals.mean()) if len(vals) else float("nan"), "clarity_features": float(len(feats))}


def _mean_activation(x: Embeddings) -> np.ndarray:
    if isinstance(x, SparseBatch):
        s = np.bincount(x.indices, weights=x.values.astype(np.float64), minlength=x.dim)
    else:
        s = np.asarray(x, np.float64).clip(min=0).sum(axis=0)
    return s / max(n_rows(x), 1)


def modality_scores(image_emb: Embeddings, text_emb: Embeddings) -> tuple[np.ndarray, np.ndarray]:
    """Per feature: (modality score in [0, 1], NaN if dead; activation density)."""
    if n_dims(image_emb) != n_dims(text_emb):
        raise ValueError("image and text embeddings must share their dimension")
    mi, mt = _mean_activation(image_emb), _mean_activation(text_emb)
    total = mi + mt
    score = np.divide(mi, total, out=np.full_like(total, np.nan), where=total > 0)
    return score, total / 2


def modality_summary(image_emb: Embeddings, text_emb: Embeddings, band: float = 0.1) -> dict[str, float]:
    """Share of live features that are image-dominant (score > 1-band), text-dominant (< band) or bimodal.

    The paper shows the histogram (Fig. 3b); these three fractions are our one-line summary of it.
    """
    score, _ = modality_scores(image_emb, text_emb)
    live = score[~np.isnan(score)]
    if not len(live):
        return {"modality_image_frac": float("nan"), "modality_text_frac": float("nan"),
                "modality_bimodal_frac": float("nan"), "modality_mean": float("nan")}
    img, txt = float(np.mean(live > 1 - band)), float(np.mean(live < band))
    return {"modality_image_frac": img, "modality_text_frac": txt, "modality_bimodal_frac": 1.0 - img - txt,
            "modality_mean": float(live.mean())}
