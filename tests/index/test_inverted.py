"""InvertedIndex exact search equals the scipy reference (ExactIndex), incl. ties and edge cases."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from _inverted_data import assert_same_hits, ids_for, random_batch

from tokenspace.index import ExactIndex, Hit, InvertedIndex, SparseIndex
from tokenspace.sparse import SparseBatch


@pytest.mark.parametrize("zipf", [False, True])
@pytest.mark.parametrize("dense_fraction", [0.125, 2.0])
def test_exact_equals_scipy(zipf, dense_fraction):
    docs = random_batch(600, 80, 0.12, seed=1, zipf=zipf)
    qs = random_batch(40, 80, 0.1, seed=2, zipf=zipf)
    ids = ids_for(len(docs))
    got = InvertedIndex.build(docs, ids, dense_fraction=dense_fraction).search(qs, k=7)
    want = ExactIndex.build(docs, ids).search(qs, k=7)
    assert_same_hits(got, want)


def test_exact_queries_of_one_to_nine_dense_columns_equal_scipy():
    """Exact search's first pass adds dense columns four at a time, then two, then one: queries of 1 to 9
    dense-column terms (every count of whole and partial passes) give the reference's top k. A wrong
    weight in any pass leaves true hits outside the proven window (checked by mutating the kernel)."""
    docs = random_batch(1500, 24, 0.5, seed=21)  # every dim in about half the docs: all dense columns
    ids = ids_for(len(docs))
    index = InvertedIndex.build(docs, ids, dense_fraction=0.05)
    assert (index._segments[0].dense_slot >= 0).all()
    rng = np.random.default_rng(22)
    rows = [np.sort(rng.choice(24, size=m, replace=False)) for m in range(1, 10) for _ in range(3)]
    qs = SparseBatch(np.cumsum([0] + [len(r) for r in rows]), np.concatenate(rows),
                     rng.uniform(0.1, 2.0, sum(len(r) for r in rows)).astype(np.float32), 24)
    assert_same_hits(index.search(qs, k=10, mode="exact"), ExactIndex.build(docs, ids).search(qs, k=10))


def test_direct_scipy_product_and_ties():
    # weights on a 1/4 grid: float32 sums are exact, so many scores tie exactly
    docs = random_batch(400, 30, 0.2, seed=3, grid=0.25, zipf=True)
    qs = random_batch(30, 30, 0.2, seed=4, grid=0.5)
    index = InvertedIndex.build(docs, ids_for(400))
    got = index.search(qs, k=15)
    scores = (qs.to_scipy().astype(np.float64) @ docs.to_scipy().astype(np.float64).T).toarray()
    ties = 0
    for r, hits in enumerate(got):
        s = scores[r]
        order = [j for j in np.lexsort((np.arange(len(s)), -s)) if s[j] > 0][:15]
        assert [h.id for h in hits] == [f"d{j}" for j in order]  # exact ids incl. tie order
        assert np.allclose([h.score for h in hits], s[order], rtol=1e-6)
        ties += len(order) - len(set(s[order]))
    assert ties > 20  # the data really has ties


def test_duplicate_docs_tie_by_insertion_order():
    row = SparseBatch.from_dicts([{1: 0.5, 3: 2.0}] * 5 + [{2: 1.0}], dim=5)
    index = InvertedIndex.build(row, ["e", "d", "c", "b", "a", "z"])
    hits = index.search(SparseBatch.from_dicts([{3: 1.0, 1: 1.0}], dim=5), k=3)[0]
    assert [h.id for h in hits] == ["e", "d", "c"]
    assert hits[0] == Hit(2.5, "e")


def test_edge_queries():
    small = random_batch(50, 30, 0.1, seed=5)
    docs = SparseBatch(small.indptr, small.indices, small.values, 40)  # dims 30..39 unused
    unused = [35]
    index = InvertedIndex.build(docs, ids_for(50))
    ref = ExactIndex.build(docs, ids_for(50))
    qs = SparseBatch.from_dicts([{}, {unused[0]: 1.0}, {unused[0]: 1.0, 0: 1.0, 5: 0.3},
                                 {d: 1.0 for d in range(40)}], dim=40)
    got = index.search(qs, k=1000)  # k larger than the collection
    want = ref.search(qs, k=1000)
    assert got[0] == [] and got[1] == []
    assert_same_hits(got, want)
    assert len(got[3]) == sum(1 for n in docs.row_nnz() if n > 0)  # every doc with a positive score
    assert index.search(SparseBatch.empty(0, 40), k=3) == []
    assert InvertedIndex(40).search(qs, k=3) == [[], [], [], []]  # nothing added yet: no segment


def test_rejects_bad_input():
    docs = random_batch(20, 10, 0.3, seed=6)
    index = InvertedIndex.build(docs, ids_for(20))
    with pytest.raises(ValueError, match="dim 11"):
        index.search(SparseBatch.empty(1, 11), k=3)
    with pytest.raises(ValueError, match="duplicate id 'x'"):
        InvertedIndex.build(docs[:2], ["x", "x"])
    with pytest.raises(ValueError, match="already in the index"):
        index.add(docs[:1], ["d3"])
    with pytest.raises(ValueError, match="k must be"):
        index.search(docs[:1], k=0)
    with pytest.raises(ValueError, match="mode"):
        index.search(docs[:1], mode="fast")
    with pytest.raises(ValueError, match="only apply to mode='approx'"):
        index.search(docs[:1], alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        index.search(docs[:1], mode="approx", alpha=1.5)
    with pytest.raises(ValueError, match="rerank"):
        index.search(docs[:1], k=5, mode="approx", rerank=2)
    with pytest.raises(ValueError, match="threads"):
        index.search(docs[:1], threads=0)
    neg = SparseBatch(np.array([0, 1]), np.array([2]), np.array([-1.0]), 10)
    with pytest.raises(ValueError, match="weights >= 0"):
        InvertedIndex.build(neg, ["n"])
    with pytest.raises(ValueError, match="weights >= 0"):
        index.search(neg)
    unsorted = SparseBatch(np.array([0, 2]), np.array([3, 1]), np.array([1.0, 1.0]), 10)
    with pytest.raises(ValueError, match="strictly increasing"):
        InvertedIndex.build(unsorted, ["u"])


def test_get_gathers_per_segment_in_the_order_asked(tmp_path):
    """get reads each segment's rows in one gather: rows from three segments, interleaved and repeated,
    come back in the order asked for, before and after a save that memory-maps the arrays."""
    docs = random_batch(90, 40, 0.2, seed=3, zipf=True)
    ids = ids_for(90)
    index = InvertedIndex.build(docs[:30], ids[:30])
    index.add(docs[30:60], ids[30:60])
    index.add(docs[60:], ids[60:])
    order = [61, 2, 45, 2, 89, 30, 0, 59]
    want = docs[order].to_dense()
    assert np.array_equal(index.get([ids[i] for i in order]).to_dense(), want)
    assert np.array_equal(index.get([ids[7], ids[3]]).to_dense(), docs[[7, 3]].to_dense())  # one segment
    index.save(tmp_path / "idx", remap=True)
    assert np.array_equal(index.get([ids[i] for i in order]).to_dense(), want)
    assert len(index.get([])) == 0


def test_add_delete_get_segments():
    docs = random_batch(300, 60, 0.1, seed=7, zipf=True)
    ids = ids_for(300)
    index = InvertedIndex.build(docs[:100], ids[:100])
    index.add(docs[100:250], ids[100:250])
    index.add(docs[250:], ids[250:])
    ref = ExactIndex.build(docs, ids)
    gone = ids[5:300:7]
    assert index.delete(gone + ["nope"]) == len(gone) == ref.delete(gone)
    assert len(index) == 300 - len(gone) == len(ref)
    qs = random_batch(25, 60, 0.15, seed=8, zipf=True)
    assert_same_hits(index.search(qs, k=20), ref.search(qs, k=20))
    got = index.get(["d7", "d150", "d298"])
    assert np.array_equal(got.to_dense(), docs[[7, 150, 298]].to_dense())
    with pytest.raises(KeyError, match="d5"):
        index.get(["d5"])  # deleted
    index.add(docs[5:6], ["d5"])  # a deleted id may come back
    assert index.search(docs[5:6], k=1)[0][0].id in {"d5"} | {h.id for h in ref.search(docs[5:6], k=1)[0]}
    index.compact()
    assert index.stats()["segments"] == 1 and len(index) == 300 - len(gone) + 1
    ref.add(docs[5:6], ["d5"])
    assert_same_hits(index.search(qs, k=20), ref.search(qs, k=20))


def test_loaded_segments_decode_hit_ids_from_disk(tmp_path):
    # after load the ids stay in the memory-mapped blob (ids_of decodes only the hits), across
    # segments and for ids that are not ASCII
    docs = random_batch(240, 40, 0.15, seed=17, zipf=True)
    ids = [f"doc-{i}-{'é' * (i % 3)}" for i in range(240)]
    index = InvertedIndex.build(docs[:90], ids[:90])
    index.add(docs[90:91], ids[90:91])  # a one-doc segment between two larger ones
    index.add(docs[91:], ids[91:])
    index.save(tmp_path / "idx")
    loaded = InvertedIndex.load(tmp_path / "idx")
    assert all(seg._ids is None for seg in loaded._segments)
    qs = random_batch(20, 40, 0.2, seed=18, zipf=True)
    want = ExactIndex.build(docs, ids).search(qs, k=15)
    assert_same_hits(loaded.search(qs, k=15), want)
    assert_same_hits(loaded.search(qs, k=15, mode="approx", rerank=240, query_mass=1.0, alpha=1.0), want)


def test_threads_same_answers():
    docs = random_batch(500, 50, 0.15, seed=9, zipf=True)
    qs = random_batch(33, 50, 0.1, seed=10)
    index = InvertedIndex.build(docs, ids_for(500))
    assert index.search(qs, k=10, threads=3) == index.search(qs, k=10)


def test_protocol_and_stats():
    docs = random_batch(100, 40, 0.1, seed=11)
    index = InvertedIndex.build(docs, ids_for(100))
    assert isinstance(index, SparseIndex)
    st = index.stats()
    assert st["docs"] == 100 and st["nnz"] == docs.nnz and st["index_bytes"] > 0 and st["raw_csr_bytes"] > 0
    assert index.ids() == ids_for(100)


def test_no_torch_import():
    code = "import sys, tokenspace.index, tokenspace.index.inverted; assert 'torch' not in sys.modules, 'torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_from_scipy_roundtrip_matches_direct_product():
    m = sp.random(200, 64, density=0.1, random_state=12, format="csr", dtype=np.float32)
    docs = SparseBatch.from_scipy(m)
    q = SparseBatch.from_scipy(sp.random(5, 64, density=0.2, random_state=13, format="csr", dtype=np.float32))
    hits = InvertedIndex.build(docs, ids_for(200)).search(q, k=3)
    dense = (q.to_scipy() @ m.T).toarray()
    for r in range(5):
        assert [h.id for h in hits[r]] == [f"d{j}" for j in np.argsort(-dense[r], kind="stable")[:3] if dense[r, j] > 0]
