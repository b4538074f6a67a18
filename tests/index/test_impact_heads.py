"""Impact heads: each term's postings split by code into disjoint bands (format version 10; nested copies
in versions 4 to 9), and the approximate search knob impact_floor that reads a term's heaviest bands
instead of its whole list or dense column.

The bands are checked against a reference decoded from the forward vectors (two posting chunks, dense
columns included); the floor against hand-made corpora where it must drop, or keep, given documents.
"""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex, kernels
from tokenspace.index.segment import n_chunks
from tokenspace.sparse import SparseBatch

CH = kernels.POSTING_CHUNK


def _batch(rows: list[dict[int, float]], dim: int) -> SparseBatch:
    return SparseBatch.from_dicts(rows, dim)


def _decode(seg, ptr, docs_, codes_, first: int) -> tuple[list[int], list[int]]:
    """(docs, codes) of the chunked list whose chunk-0 cell is ``first``, in stored order, doc ids made
    absolute."""
    nch = n_chunks(seg.n)
    docs, codes = [], []
    for ch in range(nch):
        a, b = int(ptr[first + ch]), int(ptr[first + ch + 1])
        docs += (docs_[a:b].astype(np.int64) + ch * CH).tolist()
        codes += codes_[a:b].tolist()
    return docs, codes


def test_bands_split_each_terms_postings_by_code_in_doc_order():
    n, dim = CH + 700, 60  # two posting chunks
    docs = random_batch(n, dim, 0.05, seed=3, zipf=True)  # zipf: some terms become dense columns
    seg = InvertedIndex.build(docs, ids_for(n))._segments[0]
    whole = InvertedIndex.build(docs, ids_for(n), impact_heads=False)._segments[0]
    nch = n_chunks(n)
    assert (seg.dense_slot >= 0).any() and (seg.dense_slot < 0).any()
    assert len(seg.band_ptr) == len(kernels.HEAD_CODES) * dim * nch + 1 and len(whole.band_ptr) == 1
    csc = docs.to_scipy().tocsc()
    bounds = [256] + kernels.HEAD_CODES.tolist()
    for t in range(dim):
        rows = csc.indices[csc.indptr[t]:csc.indptr[t + 1]]
        w = csc.data[csc.indptr[t]:csc.indptr[t + 1]]
        order = np.argsort(rows)
        rows, w = rows[order], w[order]
        code = np.clip(np.floor(w / seg.scale[t] + 0.5), 1, 255).astype(np.int64) if len(w) else w
        for band in range(len(kernels.HEAD_CODES)):  # disjoint: [HEAD_CODES[band], HEAD_CODES[band - 1])
            got = _decode(seg, seg.band_ptr, seg.band_docs, seg.band_codes, (band * dim + t) * nch)
            keep = (code >= bounds[band + 1]) & (code < bounds[band])
            assert got == (rows[keep].tolist(), code[keep].tolist()), (t, band)
        main = _decode(seg, seg.main_ptr, seg.main_docs, seg.main_codes, t * nch)
        if seg.dense_slot[t] >= 0:  # a dense term keeps its whole column; its bands are copies
            assert main == ([], []) and np.array_equal(seg.dense[seg.dense_slot[t]], whole.dense[whole.dense_slot[t]])
        else:  # a list term's main list keeps what no band holds; without heads it is whole
            keep = code < kernels.HEAD_CODES[-1]
            assert main == (rows[keep].tolist(), code[keep].tolist()), t
            assert _decode(whole, whole.main_ptr, whole.main_docs, whole.main_codes, t * nch) == (rows.tolist(),
                                                                                               code.tolist())
    assert len(seg.band_docs) > 0 and len(seg.main_docs) < len(whole.main_docs)


@pytest.mark.parametrize("dense_fraction", [0.125, 2.0])  # term 0 a dense column / a posting list
def test_impact_floor_skips_light_postings_and_light_terms(dense_fraction):
    # term 0: 40 heavy docs (weight 1.0) and 2,000 light ones (0.05, code 13 < every head level); term
    # 1: only in the last 10 docs, weight 0.2 (its impacts are a fifth of term 0's at most). As a dense
    # column, term 0 reads its head instead only because the head is small (40 * 16 < 2,050 docs).
    n = 2050
    rows = [{0: 1.0} if d < 40 else {0: 0.05} for d in range(2040)] + [{1: 0.2} for _ in range(10)]
    docs = _batch(rows, 4)
    ids = ids_for(n)
    index = InvertedIndex.build(docs, ids, dense_fraction=dense_fraction)
    assert (index._segments[0].dense_slot[0] >= 0) == (dense_fraction < 1)
    q = _batch([{0: 1.0, 1: 1.0}], 4)
    kw = dict(mode="approx", query_mass=1.0, alpha=1.0, rerank=n)
    everyone = {h.id for h in index.search(q, n, **kw)[0]}
    assert everyone == set(ids)  # no floor: every doc holding a query term
    floored = index.search(q, n, impact_floor=0.3, **kw)[0]
    assert {h.id for h in floored} == set(ids[:40])  # light postings and the light term are not read
    assert all(abs(h.score - 1.0) < 1e-6 for h in floored)  # scores stay exact
    # a floor of 0.15 reaches term 1 (0.2 >= 0.15) and reads its postings; term 0 reads its 1/8 level
    # (code >= 32 > 0.15 * 255), which the light postings (code 13) are not in
    assert {h.id for h in index.search(q, n, impact_floor=0.15, **kw)[0]} == set(ids[:40] + ids[2040:])
    # below 1/8 of the largest impact no head holds every posting that may matter: whole lists again
    assert {h.id for h in index.search(q, n, impact_floor=0.1, **kw)[0]} == set(ids)


def test_impact_floor_recall_and_exact_scores():
    docs = random_batch(3000, 400, 0.06, seed=41, zipf=True)
    qs = random_batch(60, 400, 0.03, seed=42, zipf=True)
    ids = ids_for(3000)
    want = ExactIndex.build(docs, ids).search(qs, k=10)
    index = InvertedIndex.build(docs, ids)
    full = (qs.to_scipy().astype(np.float64) @ docs.to_scipy().astype(np.float64).T).toarray()
    pos = {s: i for i, s in enumerate(ids)}
    recalls = []
    for floor in (0.0, 0.1, 0.3, 0.6):
        got = index.search(qs, 10, mode="approx", impact_floor=floor, rerank=100)
        assert all(abs(h.score - full[r, pos[h.id]]) < 1e-4 for r, hs in enumerate(got) for h in hs)
        recalls.append(np.mean([len({h.id for h in g} & {h.id for h in w}) / len(w) for g, w in zip(got, want)]))
    assert recalls[0] == 1.0 and recalls[1] >= 0.95 and recalls[-1] < recalls[0], recalls
    assert index.search(qs, 10, mode="approx", impact_floor=0.0) == index.search(qs, 10, mode="approx")


def test_impact_floor_is_checked():
    index = InvertedIndex.build(random_batch(50, 20, 0.2, seed=1), ids_for(50))
    q = random_batch(1, 20, 0.3, seed=2)
    with pytest.raises(ValueError, match="only apply to mode='approx'"):
        index.search(q, 5, impact_floor=0.2)
    for bad in (-0.1, 1.0, True, "0.2", float("nan")):
        with pytest.raises(ValueError, match="impact_floor must be in"):
            index.search(q, 5, mode="approx", impact_floor=bad)


def test_an_index_without_heads_answers_alike_and_refuses_a_floor(tmp_path):
    """impact_heads=False: no band postings (a one-entry band_ptr), a smaller index, the same hits for
    every search that reads no head (exact against a scipy oracle, approx against the headed index),
    after a save and load, an add and a compact too; an impact floor is refused, not ignored."""
    n = CH + 300  # two posting chunks
    docs = random_batch(n, 80, 0.05, seed=7, zipf=True)  # dense columns and posting lists
    qs = random_batch(40, 80, 0.05, seed=8, zipf=True)
    ids = ids_for(n)
    headed = InvertedIndex.build(docs, ids)
    bare = InvertedIndex.build(docs, ids, impact_heads=False)
    seg = bare._segments[0]
    assert not seg.has_heads and headed._segments[0].has_heads
    assert len(seg.band_ptr) == 1 and len(seg.band_docs) == 0
    assert bare.stats()["index_bytes"] < headed.stats()["index_bytes"]
    assert bare.stats()["impact_heads"] is False and headed.stats()["impact_heads"] is True
    full = (qs.to_scipy().astype(np.float64) @ docs.to_scipy().astype(np.float64).T).toarray()
    oracle = [[ids[i] for i in np.argsort(-row, kind="stable")[:10]] for row in full]

    def check(index):
        got = index.search(qs, 10)
        assert [[h.id for h in hs] for hs in got] == oracle
        for kw in ({}, {"query_mass": 0.7, "rerank": 40}, {"alpha": 0.8}):
            assert index.search(qs, 10, mode="approx", **kw) == headed.search(qs, 10, mode="approx", **kw)
        with pytest.raises(ValueError, match="impact_heads=False"):
            index.search(qs, 10, mode="approx", impact_floor=0.2)

    check(bare)
    bare.save(tmp_path / "bare")
    loaded = InvertedIndex.load(tmp_path / "bare")
    assert not loaded.impact_heads and not loaded._segments[0].has_heads
    check(loaded)
    extra = random_batch(30, 80, 0.05, seed=9, zipf=True)
    loaded.add(extra, [f"x{i}" for i in range(30)])  # a later add follows the built choice
    assert not loaded._segments[-1].has_heads
    loaded.delete([f"x{i}" for i in range(30)])
    loaded.compact()
    assert len(loaded._segments) == 1 and not loaded._segments[0].has_heads
    check(loaded)
    with pytest.raises(ValueError, match="impact_heads must be True or False"):
        InvertedIndex(80, impact_heads="no")
