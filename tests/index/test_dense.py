"""DenseIndex (FAISS flat inner product) against a numpy argsort reference."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the 'dense' extra)")

from tokenspace.index.dense import DenseIndex


def _reference(docs, ids, queries, k):
    scores = queries @ docs.T
    out = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[:k]
        out.append([(ids[j], float(row[j])) for j in order])
    return out


def _assert_same(hits, ref):
    assert len(hits) == len(ref)
    for h, r in zip(hits, ref):
        assert len(h) == len(r)
        np.testing.assert_allclose([x.score for x in h], [s for _, s in r], rtol=1e-5, atol=1e-5)
        # ids may swap only among equal scores; random normal data has none in practice
        assert [x.id for x in h] == [i for i, _ in r]


def test_search_matches_numpy_argsort():
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((300, 24)).astype(np.float32)
    queries = rng.standard_normal((17, 24)).astype(np.float32)
    ids = [f"doc{i}" for i in range(len(docs))]
    index = DenseIndex.build(docs, ids)
    assert len(index) == 300
    _assert_same(index.search(queries, k=10), _reference(docs, ids, queries, 10))
    _assert_same(index.search(queries, k=10, threads=2), _reference(docs, ids, queries, 10))
    # k beyond the collection returns every document
    assert len(index.search(queries[:1], k=1000)[0]) == 300


def test_add_delete_get_save_load(tmp_path):
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    ids = [str(i) for i in range(50)]
    index = DenseIndex.build(docs[:30], ids[:30])
    index.add(docs[30:], ids[30:])
    assert index.delete(["3", "7", "nope"]) == 2
    keep = [i for i in range(50) if i not in (3, 7)]
    q = rng.standard_normal((5, 8)).astype(np.float32)
    ref = _reference(docs[keep], [ids[i] for i in keep], q, 5)
    _assert_same(index.search(q, k=5), ref)
    np.testing.assert_array_equal(index.get(["10", "0"]), docs[[10, 0]])
    with pytest.raises(KeyError):
        index.get(["3"])
    with pytest.raises(ValueError, match="already"):
        index.add(docs[:1], ["0"])

    index.save(tmp_path / "dense")
    loaded = DenseIndex.load(tmp_path / "dense")
    assert len(loaded) == 48
    _assert_same(loaded.search(q, k=5), ref)
    loaded.add(docs[3:4], ["3-again"])  # new handles never collide with the saved ones
    assert loaded.get(["3-again"]).tolist() == docs[3:4].tolist()
    assert loaded.stats()["docs"] == 49


def test_bad_input():
    index = DenseIndex.build(np.eye(4, dtype=np.float32), list("abcd"))
    with pytest.raises(ValueError, match="dimensions"):
        index.search(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="k must"):
        index.search(np.ones((1, 4), np.float32), k=0)
    with pytest.raises(ValueError, match="ids"):
        DenseIndex.build(np.eye(4, dtype=np.float32), ["a"])
