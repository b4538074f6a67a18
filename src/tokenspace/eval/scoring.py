"""Scores between two sets of embeddings, sparse or dense, and a memory-safe chunked top-k.

Every evaluator scores through here so that a SparseBatch and a dense numpy array are handled the
same way. Numpy/scipy only: eval never imports torch.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from tokenspace.sparse import SparseBatch

Embeddings = SparseBatch | np.ndarray

METRICS = ("dot", "cosine")

# Score blocks are materialised dense (queries x documents); keep each block under this many bytes so
# 25k x 25k never needs the full 2.5 GB matrix.
DEFAULT_BLOCK_BYTES = 64 * 2**20


def n_rows(x: Embeddings) -> int:
    return len(x) if isinstance(x, SparseBatch) else int(np.asarray(x).shape[0])


def n_dims(x: Embeddings) -> int:
    return x.dim if isinstance(x, SparseBatch) else int(np.asarray(x).shape[1])


def as_matrix(x: Embeddings):
    """scipy CSR for a SparseBatch (or scipy matrix), float32 2-D array for anything dense."""
    if isinstance(x, SparseBatch):
        return x.to_scipy()
    if sp.issparse(x):
        return x.tocsr()
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (rows x dims), got shape {a.shape}")
    return a


def l2_normalize(x: Embeddings) -> Embeddings:
    """Unit-norm rows, keeping the type (a SparseBatch stays sparse). All-zero rows stay zero."""
    if isinstance(x, SparseBatch):
        sq = np.bincount(np.repeat(np.arange(len(x)), x.row_nnz()), weights=x.values.astype(np.float64) ** 2,
                         minlength=len(x))
        norms = np.sqrt(sq)
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        values = x.values * np.repeat(scale, x.row_nnz()).astype(np.float32)
        return SparseBatch(x.indptr, x.indices, values, x.dim, x.vocab)
    a = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return np.divide(a, norms, out=np.zeros_like(a), where=norms > 0)


def _prepare(a: Embeddings, b: Embeddings, metric: str):
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if n_dims(a) != n_dims(b):
        raise ValueError(f"dimension mismatch: {n_dims(a)} vs {n_dims(b)}")
    if metric == "cosine":
        a, b = l2_normalize(a), l2_normalize(b)
    return as_matrix(a), as_matrix(b)


def _block(am, bm_t, start: int, stop: int) -> np.ndarray:
    """Dense float32 scores of rows [start, stop) of ``am`` against all documents."""
    s = am[start:stop] @ bm_t
    if sp.issparse(s):
        s = s.toarray()
    return np.asarray(s, dtype=np.float32)


def score_blocks(a: Embeddings, b: Embeddings, metric: str = "dot", block_rows: int | None = None,
                 block_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, scores[start:start+m, :])`` blocks of the a x b score matrix, in row order."""
    block_bytes = DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes  # read late: tests shrink it
    am, bm = _prepare(a, b, metric)
    bm_t = bm.T.tocsc() if sp.issparse(bm) else bm.T
    n, m = am.shape[0], bm.shape[0]
    if block_rows is None:
        block_rows = max(1, block_bytes // (4 * max(m, 1)))
    for start in range(0, n, block_rows):
        yield start, _block(am, bm_t, start, min(n, start + block_rows))


def similarity(a: Embeddings, b: Embeddings, metric: str = "dot") -> np.ndarray:
    """Full dense (len(a) x len(b)) score matrix: dot product or cosine. For small sets only."""
    blocks = [blk for _, blk in score_blocks(a, b, metric)]
    if not blocks:
        return np.zeros((0, n_rows(b)), np.float32)
    return np.concatenate(blocks, axis=0)


def topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k per row of a dense block, best first; ties go to the lower column (as a stable argsort)."""
    n, m = scores.shape
    k = min(k, m)
    if k <= 0:
        return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
    if k < m:
        # argpartition is not tie-stable: take the k-th value as a threshold, then keep every column
        # at or above it and resolve with a stable sort on (-score, column).
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
        out_i = np.empty((n, k), np.int64)
        for r in range(n):
            cand = np.nonzero(scores[r] >= kth[r])[0]
            order = np.argsort(-scores[r, cand], kind="stable")[:k]
            out_i[r] = cand[order]
    else:
        out_i = np.argsort(-scores, axis=1, kind="stable")
    return np.take_along_axis(scores, out_i, axis=1), out_i


def chunked_topk(queries: Embeddings, docs: Embeddings, k: int, metric: str = "dot",
                 block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, indices), each (len(queries), min(k, len(docs))), best first, computed block by block."""
    s_out, i_out = [], []
    for _, blk in score_blocks(queries, docs, metric, block_rows=block_rows):
        s, i = topk_rows(blk, k)
        s_out.append(s)
        i_out.append(i)
    kk = min(k, n_rows(docs))
    if not s_out:
        return np.zeros((0, kk), np.float32), np.zeros((0, kk), np.int64)
    return np.concatenate(s_out), np.concatenate(i_out)
