"""Approximate mode's 16-bit first pass (kernels.search_one with a uint16 accumulator): no overflow, the
float fallback for long queries and queries without dense columns, and agreement with a float64
reference."""
from __future__ import annotations

import numpy as np
from _inverted_data import ids_for, random_batch

from tokenspace.index import InvertedIndex, kernels
from tokenspace.sparse import SparseBatch


def exact_top(scores, k):
    nz = np.flatnonzero(scores > 0)
    return nz[np.lexsort((nz, -scores[nz]))][:k]


def test_largest_possible_score_does_not_wrap():
    # doc 0 has every query term at the term's max weight: the largest score a query can reach.
    # A uint16 wrap-around would rank it near the bottom; with rerank = k = 1 it must come first.
    nt, n = kernels.U16_MAX_TERMS, 300
    rng = np.random.default_rng(3)
    rows = [{t: 3.0 for t in range(nt)}]
    rows += [{int(t): float(rng.uniform(0.1, 2.9)) for t in rng.choice(nt, 30, replace=False)}
             for _ in range(n - 1)]
    docs = SparseBatch.from_dicts(rows, 64)
    index = InvertedIndex.build(docs, ids_for(n), dense_fraction=0.05)  # every term a dense column
    for weights in (np.full(nt, 5.0), rng.uniform(0.01, 10.0, nt), np.r_[100.0, np.full(nt - 1, 1e-3)]):
        q = SparseBatch(np.array([0, nt]), np.arange(nt, dtype=np.int32), weights.astype(np.float32), 64)
        assert kernels.use_u16(q.indices, q.values, index._segments[0].df, index._segments[0].dense_slot)
        hits = index.search(q, k=1, mode="approx", query_mass=1.0, alpha=1.0, rerank=1)
        assert hits[0][0].id == "d0"


def test_dispatch_rule():
    df = np.array([10, 10, 10, 0], np.int64)
    dense_slot = np.array([0, -1, -1, -1], np.int32)
    one = np.ones(3, np.float32)
    assert kernels.use_u16(np.array([0, 1, 2]), one, df, dense_slot)
    assert not kernels.use_u16(np.array([1, 2, 3]), one, df, dense_slot)  # no dense column
    long_q = np.zeros(kernels.U16_MAX_TERMS + 1, np.int64)  # too many terms (all dense here)
    assert not kernels.use_u16(long_q, np.ones(len(long_q), np.float32), df, dense_slot)


def test_u16_and_float_paths_against_reference():
    # short queries take the 16-bit path, long ones (> U16_MAX_TERMS terms) the float one; both must
    # return true dot products and (nearly) the exact top 10 at the default rerank
    docs = random_batch(30000, 300, 0.08, seed=61, zipf=True)
    short = random_batch(30, 300, 0.04, seed=62, zipf=True)
    long_ = random_batch(10, 300, 0.9, seed=63, zipf=True)  # 60-100 distinct terms
    ids = ids_for(30000)
    index = InvertedIndex.build(docs, ids)
    seg = index._segments[0]
    d64 = docs.to_scipy().astype(np.float64)
    for qs, expect_u16 in ((short, True), (long_, False)):
        paths = {kernels.use_u16(*qs.row(r), seg.df, seg.dense_slot) for r in range(len(qs))}
        assert paths == {expect_u16}
        full = (qs.to_scipy().astype(np.float64) @ d64.T).toarray()
        got = index.search(qs, k=10, mode="approx", query_mass=1.0, alpha=1.0)
        rec = []
        for r, hits in enumerate(got):
            for h in hits:
                assert abs(h.score - full[r, int(h.id[1:])]) <= 1e-4 * max(1.0, full[r, int(h.id[1:])])
            rec.append(len({int(h.id[1:]) for h in hits} & set(exact_top(full[r], 10).tolist())) / 10)
        assert np.mean(rec) >= 0.99, (expect_u16, np.mean(rec))
