"""Approximate mode's candidate path (in-kernel query cut, no error window, rerank = exactly the
candidates rescored) checked against exact references computed with scipy."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import cut_reference, ids_for, random_batch

from tokenspace.index import InvertedIndex, kernels


@pytest.fixture(scope="module")
def setup():
    # 40k docs: several accumulator chunks (CHUNK = 16384), dense columns and sparse lists
    docs = random_batch(40000, 300, 0.05, seed=51, zipf=True)
    qs = random_batch(40, 300, 0.04, seed=52, zipf=True)
    ids = ids_for(40000)
    full = (qs.to_scipy().astype(np.float64) @ docs.to_scipy().astype(np.float64).T).toarray()
    return docs, qs, ids, InvertedIndex.build(docs, ids), full


def exact_top(scores, k):
    nz = np.flatnonzero(scores > 0)
    return nz[np.lexsort((nz, -scores[nz]))][:k]


def test_cut_row_matches_reference(setup):
    _, qs, _, _, _ = setup
    for r in range(len(qs)):
        idx, val = qs.row(r)
        for mass in (0.3, 0.7, 0.9, 1.0):
            gi, gv = kernels.cut_row(idx, val, mass)
            wi, wv = cut_reference(idx, val, mass)
            assert gi.tolist() == wi.tolist(), (r, mass)
            assert np.array_equal(gv, wv)


@pytest.mark.parametrize("n", [0, 1, 5, 64, 300])
def test_cut_row_with_tied_weights_matches_reference(n):
    """The cut keeps the earlier of equal weights, which a few distinct weights (zeros among them) make
    decisive at most cuts; an empty row cuts to nothing."""
    rng = np.random.default_rng(n)
    idx = np.sort(rng.choice(10_000, n, replace=False)).astype(np.int32)
    for trial in range(20):
        val = rng.choice(np.array([0.0, 0.25, 0.5, 1.0, 2.0], np.float32), n)
        for mass in (0.1, 0.5, 0.77, 0.9, 0.999):
            gi, gv = kernels.cut_row(idx, val, mass)
            wi, wv = cut_reference(idx, val, mass)
            assert gi.tolist() == wi.tolist(), (trial, mass)
            assert np.array_equal(gv, wv)


def test_no_pruning_equals_exact(setup):
    # query_mass=1, alpha=1 and a rerank covering every doc: nothing is approximated
    docs, qs, ids, index, full = setup
    got = index.search(qs, k=10, mode="approx", query_mass=1.0, alpha=1.0, rerank=len(docs))
    for r, hits in enumerate(got):
        want = exact_top(full[r], 10)
        assert [h.id for h in hits] == [ids[d] for d in want]
        assert np.allclose([h.score for h in hits], full[r, want], rtol=1e-5)


def test_large_rerank_selection(setup):
    # a rerank far above k exercises the two-level selection with a low threshold; the result is
    # still the exact top-k (quantisation cannot push a top-10 doc below rank 300 here)
    docs, qs, ids, index, full = setup
    got = index.search(qs, k=10, mode="approx", query_mass=1.0, alpha=1.0, rerank=300)
    for r, hits in enumerate(got):
        assert [h.id for h in hits] == [ids[d] for d in exact_top(full[r], 10)]


@pytest.mark.parametrize("mass,rerank", [(0.9, 50), (0.7, 100), (0.5, 30)])
def test_cut_rerank_against_reference(setup, mass, rerank):
    """Each hit is a true dot product; the hits are the exact top-k of (about) the `rerank` best docs
    by cut-query score, computed here in float64 from the cut query (the kernel ranks uint8-quantised
    scores, so the two candidate sets may differ at their boundary)."""
    docs, qs, ids, index, full = setup
    pos = {s: i for i, s in enumerate(ids)}
    got = index.search(qs, k=10, mode="approx", query_mass=mass, alpha=1.0, rerank=rerank)
    d64 = docs.to_scipy().astype(np.float64)
    agree, recall = [], []
    for r, hits in enumerate(got):
        idx, val = qs.row(r)
        ci, cv = cut_reference(idx, val, mass)
        part = np.asarray(d64[:, ci] @ cv.astype(np.float64)).ravel()
        cand = np.lexsort((np.arange(len(part)), -part))[:rerank]
        cand = cand[part[cand] > 0]
        ref = cand[np.lexsort((cand, -full[r, cand]))][:10]
        got_docs = [pos[h.id] for h in hits]
        for h, d in zip(hits, got_docs):
            assert abs(h.score - full[r, d]) <= 1e-4 * max(1.0, full[r, d])  # exact rescoring
        assert all(s1 >= s2 for s1, s2 in zip([h.score for h in hits], [h.score for h in hits][1:]))
        agree.append(len(set(got_docs) & set(ref.tolist())) / max(1, len(ref)))
        recall.append(len(set(got_docs) & set(exact_top(full[r], 10).tolist())) / 10)
    assert np.mean(agree) >= 0.97, np.mean(agree)
    # the recall of a cut is reported loosely: heavier cuts may lose more, never everything
    assert np.mean(recall) >= {0.9: 0.97, 0.7: 0.9, 0.5: 0.6}[mass], np.mean(recall)


def test_rerank_bounds_candidates(setup):
    # rerank = k rescores exactly k candidates: every hit must be among the k best cut-query docs
    # up to quantisation; with a generous rerank the recall can only grow
    docs, qs, ids, index, full = setup
    lo = index.search(qs, k=10, mode="approx", query_mass=0.6, alpha=1.0, rerank=10)
    hi = index.search(qs, k=10, mode="approx", query_mass=0.6, alpha=1.0, rerank=200)
    truth = [set(ids[d] for d in exact_top(full[r], 10)) for r in range(len(qs))]
    rec = lambda got: np.mean([len({h.id for h in g} & t) / 10 for g, t in zip(got, truth)])  # noqa: E731
    assert rec(hi) >= rec(lo)
    assert all(len(g) <= 10 for g in lo)
