"""Document reordering: put similar documents next to each other before indexing.

The index skips 64-document blocks whose upper bound (block-max codes of the head terms' dense columns)
cannot reach the running threshold. On vectors of a learned sparse model, documents are clustered
(topics, shared expansions), but in arrival order every block mixes topics, so its block max is high on
every head term and little is skipped. Indexing the documents cluster by cluster makes the block maxima
tight: exact mode skips more blocks and stays exact (the bounds are still bounds). docs/history.md
has the measurements ("document reordering").

How: spherical k-means on a random Gaussian projection of the rows (dot products are kept in
expectation, and a dense 256-d copy is cheap to cluster with BLAS), then within each cluster the rows
sorted by their heaviest term, so that a cluster larger than a block is still cut into coherent
blocks. Numpy and scipy only (the index never imports torch); deterministic for a given seed.
"""
from __future__ import annotations

import numpy as np

from tokenspace.sparse import SparseBatch

DIMS = 256  # projection width: enough to separate topics, small enough for BLAS k-means
DOCS_PER_CLUSTER = 256  # default cluster size (four blocks): finer clusters cost more than they skip
MAX_CLUSTERS = 4096
TRAIN_PER_CLUSTER = 32  # k-means is trained on this many sampled rows per cluster
ITERS = 8
ASSIGN_ROWS = 65536  # rows per assignment pass (bounds the n x k score matrix)


def cluster_order(batch: SparseBatch, n_clusters: int | None = None, *, seed: int = 0,
                  iters: int = ITERS) -> np.ndarray:
    """A permutation of ``range(len(batch))`` that lists the rows cluster by cluster (see the module
    doc); ``batch[order]`` is the reordered batch. n_clusters: default len(batch) / 256, at most 4096."""
    n = len(batch)
    if n_clusters is None:
        n_clusters = min(MAX_CLUSTERS, n // DOCS_PER_CLUSTER)
    if not isinstance(n_clusters, (int, np.integer)) or n_clusters < 0:
        raise ValueError(f"n_clusters must be a non-negative int, got {n_clusters!r}")
    top = _top_terms(batch)
    if n_clusters <= 1 or n <= n_clusters:
        return np.lexsort((np.arange(n), top))
    rng = np.random.default_rng(seed)
    x = _project(batch, rng)
    centroids = _train(x, int(n_clusters), iters, rng)
    label = _assign(x, centroids)
    return np.lexsort((np.arange(n), top, label))  # by cluster, then heaviest term, then arrival


def _top_terms(batch: SparseBatch) -> np.ndarray:
    """Each row's heaviest dim (-1 for an empty row; ties: the lower dim)."""
    n = len(batch)
    nnz = np.diff(batch.indptr)
    out = np.full(n, -1, np.int64)
    rows = np.repeat(np.arange(n), nnz)
    # within each row, order by weight descending then dim: the first entry of each row is its top term
    order = np.lexsort((batch.indices, -batch.values, rows))
    firsts = batch.indptr[:-1][nnz > 0]
    out[nnz > 0] = batch.indices[order[firsts]]
    return out


def _project(batch: SparseBatch, rng: np.random.Generator) -> np.ndarray:
    """Rows as unit vectors of a DIMS-wide Gaussian projection (empty rows stay zero)."""
    # scipy is imported here, not with the module: every index import loads this module, only a reordering
    # build needs scipy, and importing it was ~0.1 s of the first build in a process
    import scipy.sparse as sp

    csr = sp.csr_matrix((batch.values.astype(np.float32), batch.indices, batch.indptr), shape=(len(batch), batch.dim))
    r = rng.standard_normal((batch.dim, DIMS), dtype=np.float32)
    x = np.asarray(csr @ r, dtype=np.float32)
    return _normalise(x)


def _normalise(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norm, out=x, where=norm > 0)
    return x


def _train(x: np.ndarray, k: int, iters: int, rng: np.random.Generator) -> np.ndarray:
    """Spherical k-means (cosine) on a sample of the rows; returns unit centroids [k, DIMS]."""
    import scipy.sparse as sp  # see _project

    sample = x[rng.choice(len(x), min(len(x), k * TRAIN_PER_CLUSTER), replace=False)]
    centroids = sample[rng.choice(len(sample), k, replace=False)].copy()
    for _ in range(iters):
        label = _assign(sample, centroids)
        member = sp.csr_matrix((np.ones(len(sample), np.float32), (label, np.arange(len(sample)))),
                               shape=(k, len(sample)))
        sums = np.asarray(member @ sample, dtype=np.float32)
        empty = ~np.any(sums, axis=1)
        sums[empty] = sample[rng.choice(len(sample), int(empty.sum()), replace=False)]  # reseed empty clusters
        centroids = _normalise(sums)
    return centroids


def _assign(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The nearest centroid (largest dot product) of every row, in passes of ASSIGN_ROWS rows."""
    out = np.empty(len(x), np.int64)
    for a in range(0, len(x), ASSIGN_ROWS):
        out[a : a + ASSIGN_ROWS] = np.argmax(x[a : a + ASSIGN_ROWS] @ centroids.T, axis=1)
    return out
