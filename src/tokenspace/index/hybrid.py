"""Hybrid search: a sparse index and a dense index of the same collection, searched together and their
hit lists fused into one ranking.

Two fusions, both over each index's top ``depth`` hits per query:

- ``"rrf"``, reciprocal-rank fusion (Cormack et al. 2009): a document scores
  ``w_sparse / (rrf_k + rank_sparse) + w_dense / (rrf_k + rank_dense)``, ranks from 1, a list that
  lacks the document adds nothing. Needs no score calibration; ``rrf_k`` = 60 as in the paper.
- ``"weighted"``: each list's scores min-max normalised to [0, 1] over its own hits, then
  ``w_sparse * s_sparse + w_dense * s_dense`` (a list that lacks the document adds 0, its minimum).
  The two indexes' scores live on different scales (a sparse dot product vs a cosine), hence the
  normalisation; a list whose scores are all equal normalises to 1 for each of its hits.

``weight`` is the sparse side's share (``w_sparse = weight``, ``w_dense = 1 - weight``); a side whose
weight is 0 is left out, so weight 1 (0) ranks as the sparse (dense) index alone. Ties in the fused
score are broken by id, so a fusion is a pure function of its inputs. Numpy only, like all of index/.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.index.base import Hit, Hits

FUSIONS = ("rrf", "weighted")
RRF_K = 60  # Cormack, Clarke and Buettcher (SIGIR 2009)
DEPTH = 100  # hits taken from each index per query before fusing


def fuse(sparse_hits: Sequence[Hit], dense_hits: Sequence[Hit], k: int, fusion: str = "rrf",
         weight: float = 0.5, rrf_k: int = RRF_K) -> Hits:
    """One query's fused top ``k`` from its sparse and dense hit lists (each best first)."""
    _check(k, fusion, weight, rrf_k)
    total: dict[str, float] = {}
    for hits, w in ((sparse_hits, weight), (dense_hits, 1.0 - weight)):
        if w == 0:
            continue  # a side with no weight brings no documents either (weight 1: the sparse index alone)
        part = _rrf(hits, w, rrf_k) if fusion == "rrf" else _min_max(hits, w)
        for doc, score in part.items():
            total[doc] = total.get(doc, 0.0) + score
    ranked = sorted(total.items(), key=lambda item: (-item[1], item[0]))
    return Hits.of((score, doc) for doc, score in ranked[:k])


def hybrid_search(sparse_index, sparse_queries, dense_index, dense_queries, k: int = 10, *,
                  fusion: str = "rrf", weight: float = 0.5, depth: int = DEPTH, rrf_k: int = RRF_K,
                  threads: int | None = None, sparse_options: dict | None = None) -> list[Hits]:
    """Top ``k`` per query of ``sparse_index`` (any SparseIndex; queries a SparseBatch) and
    ``dense_index`` (a DenseIndex; queries float32 rows ``[n, d]``) fused (see the module docstring).
    Row i of both query sets is the same query, encoded by each index's model. Token and metadata
    filters are not taken: a dense index has neither, so its hits could not honour them.
    ``sparse_options``: the sparse side's ranking keywords (``prior_weight``), as its search takes them."""
    _check(k, fusion, weight, rrf_k)
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, got {depth!r}")
    dense_queries = np.atleast_2d(np.asarray(dense_queries, np.float32))  # one query may come as [d]
    n_sparse, n_dense = len(sparse_queries), len(dense_queries)
    if n_sparse != n_dense:
        raise ValueError(f"got {n_sparse} sparse and {n_dense} dense query rows; give both for each query")
    depth = max(depth, k)
    extra = {} if threads is None else {"threads": threads}
    sparse = sparse_index.search(sparse_queries, k=depth, **extra, **dict(sparse_options or {}))
    dense = dense_index.search(dense_queries, k=depth, **extra)
    return [fuse(s, d, k, fusion, weight, rrf_k) for s, d in zip(sparse, dense)]


def _rrf(hits: Sequence[Hit], w: float, rrf_k: int) -> dict[str, float]:
    return {h.id: w / (rrf_k + rank) for rank, h in enumerate(hits, 1)}


def _min_max(hits: Sequence[Hit], w: float) -> dict[str, float]:
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    span = hi - lo
    return {h.id: w * ((h.score - lo) / span if span > 0 else 1.0) for h in hits}


def _check(k, fusion: str, weight: float, rrf_k) -> None:
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight (the sparse side's share) must be in [0, 1], got {weight!r}")
    if not isinstance(rrf_k, int) or rrf_k < 0:
        raise ValueError(f"rrf_k must be a non-negative int, got {rrf_k!r}")
