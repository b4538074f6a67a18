"""Approximate mode: every knob honoured, recall measured against exact search."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex, kernels
from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def setup():
    docs = random_batch(3000, 400, 0.06, seed=41, zipf=True)
    qs = random_batch(60, 400, 0.03, seed=42, zipf=True)
    ids = ids_for(3000)
    return docs, qs, ids, ExactIndex.build(docs, ids).search(qs, k=10)


def recall(got, want):
    return np.mean([len({h.id for h in g} & {h.id for h in w}) / max(1, len(w)) for g, w in zip(got, want)])


def exact_scores_ok(got, docs, qs, ids):
    pos = {s: i for i, s in enumerate(ids)}
    full = (qs.to_scipy().astype(np.float64) @ docs.to_scipy().astype(np.float64).T).toarray()
    return all(abs(h.score - full[r, pos[h.id]]) < 1e-4 for r, hs in enumerate(got) for h in hs)


def test_approx_alpha_one_is_exact(setup):
    docs, qs, ids, want = setup
    got = InvertedIndex.build(docs, ids).search(qs, k=10, mode="approx", alpha=1.0, query_mass=1.0)
    assert recall(got, want) == 1.0


@pytest.mark.parametrize("opts,bound", [
    ({}, 0.97),  # the defaults
    ({"alpha": 0.8}, 0.9),
    ({"query_mass": 0.9, "rerank": 50}, 0.85),
    ({"alpha": 0.9, "query_mass": 0.95, "rerank": 30}, 0.9),
])
def test_approx_recall(setup, opts, bound):
    docs, qs, ids, want = setup
    index = InvertedIndex.build(docs, ids)
    got = index.search(qs, k=10, mode="approx", **opts)
    r = recall(got, want)
    assert r >= bound, (opts, r)
    assert exact_scores_ok(got, docs, qs, ids)  # reported scores are true dot products


def test_approx_top_n_index(setup):
    docs, qs, ids, want = setup
    index = InvertedIndex.build(docs, ids, approx_top_n=12)
    assert recall(index.search(qs, k=10), want) == 1.0  # exact mode also reads the pruned postings
    got = index.search(qs, k=10, mode="approx", alpha=1.0, query_mass=1.0, rerank=100)
    r = recall(got, want)
    assert 0.8 <= r <= 1.0, r
    assert exact_scores_ok(got, docs, qs, ids)
    # the cut really removes postings: fewer approx candidates than exact on heavy pruning
    tiny = InvertedIndex.build(docs, ids, approx_top_n=1).search(qs, k=10, mode="approx", alpha=1.0, query_mass=1.0)
    assert recall(tiny, want) < 1.0


def test_approx_top_n_prunes_only_what_approx_search_reads(setup):
    docs, qs, ids, _ = setup
    new = InvertedIndex.build(docs, ids, approx_top_n=3)
    assert new.approx_top_n == 3 and new.stats()["approx_top_n"] == 3
    opts = dict(k=10, mode="approx", alpha=1.0, query_mass=1.0)
    assert new.search(qs, **opts) != InvertedIndex.build(docs, ids).search(qs, **opts)  # it does prune
    assert new.search(qs, k=10) == InvertedIndex.build(docs, ids).search(qs, k=10)  # exact reads every term
    with pytest.raises(TypeError, match="top_n"):  # the old name is gone
        InvertedIndex.build(docs, ids, top_n=3)


def test_alpha_skips_blocks():
    # blocks are skipped from the second accumulator chunk (a posting chunk, 65,536 docs) on: the first
    # sets the running threshold
    n = kernels.POSTING_CHUNK + 20000
    docs = random_batch(n, 200, 0.04, seed=43, zipf=True)
    qs = random_batch(30, 200, 0.05, seed=44, zipf=True)
    ids = ids_for(n)
    index = InvertedIndex.build(docs, ids)
    want = index.search(qs, k=10)
    assert recall(index.search(qs, k=10, mode="approx", alpha=1.0, query_mass=1.0), want) == 1.0
    low = recall(index.search(qs, k=10, mode="approx", alpha=0.3, query_mass=1.0), want)
    assert low < 1.0  # the knob is honoured: aggressive skipping loses some hits
    assert recall(index.search(qs, k=10, mode="approx", alpha=0.9, query_mass=1.0), want) >= max(low, 0.9)


@pytest.mark.parametrize("dense_fraction, floor", [(2.0, 0.0), (1e-4, 0.5)])  # float32 pass / 16-bit pass
def test_chunk_below_threshold_leaves_no_score_behind(dense_fraction, floor):
    # Three posting chunks, every query term read as sparse lists (no dense columns; with the floor, term 0
    # is a dense column read through its head). Chunk 0 fills the one-slot heap with doc 5 (1.6); chunk
    # 1's 100 docs score 0.5, below the threshold, so the chunk is reset without a select; chunk 2's doc
    # at the same offset as a chunk-1 doc scores 1.2. A score left in the accumulator would make it
    # 1.7 and win the only rerank slot, so its exact score (1.2) would be the answer instead of doc 5's.
    ch = kernels.POSTING_CHUNK
    rows = [{} for _ in range(3 * ch)]
    rows[5], rows[6] = {0: 1.0, 1: 0.6}, {1: 1.0}
    for off in range(100):
        rows[ch + 7 + off] = {0: 0.5}
    rows[2 * ch + 7] = {0: 0.6, 1: 0.6}
    docs = SparseBatch.from_dicts(rows, 4)
    index = InvertedIndex.build(docs, ids_for(len(rows)), dense_fraction=dense_fraction)
    assert (index._segments[0].dense_slot[0] >= 0) == (dense_fraction < 1)
    q = SparseBatch.from_dicts([{0: 1.0, 1: 1.0}], 4)
    for opts in ({"mode": "exact"},
                 {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": 1, "impact_floor": floor}):
        (hits,) = index.search(q, k=1, **opts)
        assert [h.id for h in hits] == [ids_for(len(rows))[5]], opts
        assert hits[0].score == pytest.approx(1.6, abs=1e-5)
