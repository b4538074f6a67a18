"""Exact top-k of one query over one segment in numpy: the kernels' exact answer (kernels.search_query in
exact mode) for a small index in a process that has not loaded numba (road.py says when, and why).

Every document's dot product is worked out from the forward store (the exact float32 rows) as the
kernels' rescoring works it out, term by term in the row's order in float32, so the scores are the
kernels' to the bit and ties fall the same way: by the smaller document number. What the kernels take
as options and this road takes too: a mask of searchable documents (filters, deletions), a per-document
penalty (the hub prior) and per-dim query-weight factors (idf). Approximate search stays the kernels'.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tokenspace.index.layout import BAD_QUERY, QUERY_OUT_OF_RANGE


class ExactOptions(NamedTuple):
    """A segment's exact search, as kernels.SearchOptions holds it for exact mode (None: not used)."""

    k: int  # hits (at most the segment's size)
    mask: np.ndarray | None  # uint8[n], 1 = searchable
    penalty: np.ndarray | None  # float32[n] >= 0, subtracted from each dot product
    weights: np.ndarray | None  # float32[dim] factors of the query weights


def search_query(fwd: tuple[np.ndarray, np.ndarray, np.ndarray], opt: ExactOptions, q_idx: np.ndarray,
                 q_val: np.ndarray, dim: int, out_docs: np.ndarray, out_scores: np.ndarray) -> int:
    """kernels.search_query for an exact search: the query (int32 dims, float32 weights) checked, then
    the segment's top opt.k written to out_docs/out_scores (local doc numbers, float32 scores, best
    first, ties to the smaller number); returns how many, or QUERY_OUT_OF_RANGE / BAD_QUERY as it does.
    fwd: the segment's forward store (fwd_indptr, fwd_indices, fwd_values: Segment.fwd_views)."""
    if len(q_idx) and (int(q_idx.min()) < 0 or int(q_idx.max()) >= dim):
        return QUERY_OUT_OF_RANGE
    if not (bool(np.all((q_val >= 0) & (q_val < np.inf))) and bool(np.all(q_idx[1:] > q_idx[:-1]))):
        return BAD_QUERY
    if opt.weights is not None:
        q_val = q_val * opt.weights[q_idx]
    indptr, indices, values = fwd
    qdense = np.zeros(dim, np.float32)
    qdense[q_idx] = q_val
    prod = qdense[indices] * values  # float32, as the kernels multiply; 0 off the query's dims
    where = np.flatnonzero(prod)
    if not len(where):
        return 0
    rows = np.searchsorted(indptr, where, side="right") - 1  # each product's document
    prod = prod[where]
    # Each document's products summed in row order, one float32 addition at a time: the kernels' sum
    # (their zero products leave it unchanged, and their first addition to 0 is exact), so the scores
    # match bit for bit. Step j adds the j-th product of the documents that have one: as many steps as
    # the query has terms at most, each over those documents only.
    first = np.empty(len(rows), bool)
    first[0] = True
    np.not_equal(rows[1:], rows[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    docs = rows[starts]
    counts = np.diff(starts, append=len(rows))
    scores = prod[starts]
    live = np.flatnonzero(counts > 1)
    for j in range(1, int(counts.max())):
        live = live[counts[live] > j]
        scores[live] += prod[starts[live] + j]
    keep = scores > 0  # a document whose dot product is 0 is never a hit
    if opt.mask is not None:
        keep &= opt.mask[docs] != 0
    docs, scores = docs[keep], scores[keep]
    if opt.penalty is not None:
        scores = scores - opt.penalty[docs]  # float32, as the kernels subtract it
    m = min(opt.k, len(docs))
    if len(docs) > m:  # the best m by score (ties: smaller doc), without sorting them all
        cut = np.partition(-scores, m - 1)[m - 1]
        near = np.flatnonzero(-scores <= cut)
        docs, scores = docs[near], scores[near]
    order = np.lexsort((docs, -scores))[:m]
    out_docs[:m] = docs[order]
    out_scores[:m] = scores[order]
    return m
