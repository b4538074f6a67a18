"""MilvusIndex against Milvus Lite (the real C++ server from milvus-lite 2.5.1): same top-k as ExactIndex.

Skips only when pymilvus / milvus-lite are not importable; `make test` installs them (the `milvus`
extra), so CI runs it. One module-scoped server keeps the test well under a minute.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="pymilvus is not installed (the 'milvus' extra)")
pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (the 'milvus' extra)")

from tokenspace.index import ExactIndex, InvertedIndex
from tokenspace.index.milvus import MilvusIndex
from tokenspace.sparse import SparseBatch

TOL = 1e-4  # Milvus sums in float32, in its own order


def _random_batch(rng, n, dim, density):
    """Weights from a small set of values so that equal scores (ties) really occur."""
    dense = rng.choice([0.5, 1.0, 1.5, 2.0], size=(n, dim)).astype(np.float32)
    dense *= rng.random((n, dim)) < density
    return SparseBatch.from_dense(dense)


def _exact(docs: SparseBatch, ids, queries: SparseBatch, k, engine=ExactIndex):
    """Top-k of the project's exact reference (or the embedded engine) as (id, score) lists."""
    return [[(h.id, h.score) for h in hits] for hits in engine.build(docs, ids).search(queries, k=k)]


def _assert_same_topk(hits, ref, true_scores, k):
    """Tie-robust: same score list; every returned id's true score matches and makes the cut."""
    assert len(hits) == len(ref)
    for q, (h, r) in enumerate(zip(hits, ref)):
        np.testing.assert_allclose([x.score for x in h], [s for _, s in r], atol=TOL)
        assert len({x.id for x in h}) == len(h)
        if not r:
            continue
        cut = r[-1][1]
        for x in h:
            assert abs(true_scores[q][x.id] - x.score) < TOL, (q, x)
            assert true_scores[q][x.id] >= cut - TOL, (q, x, cut)


def _true_scores(docs, ids, queries):
    scores = (queries.to_scipy() @ docs.to_scipy().T).toarray()
    return [dict(zip(ids, row.tolist())) for row in scores]


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = _random_batch(rng, 400, 60, 0.08)
    queries = _random_batch(rng, 25, 60, 0.1)
    ids = [f"img-{i}" for i in range(len(docs))]
    ids[5] = 'quote"and\\slash'  # ids travel inside Milvus filter expressions: must be escaped
    uri = str(tmp_path_factory.mktemp("milvus") / "lite.db")
    index = MilvusIndex.build(docs, ids, uri=uri, collection="t")
    yield index, docs, ids, queries, uri
    index.close()


def test_same_topk_as_exact(collection):
    index, docs, ids, queries, _ = collection
    assert len(index) == len(docs)
    true = _true_scores(docs, ids, queries)
    for k in (1, 10):
        hits = index.search(queries, k=k)
        _assert_same_topk(hits, _exact(docs, ids, queries, k), true, k)
        _assert_same_topk(hits, _exact(docs, ids, queries, k, engine=InvertedIndex), true, k)


def test_get_restrict_and_empty_query(collection):
    index, docs, ids, queries, _ = collection
    got = index.get([ids[5], ids[0]])
    np.testing.assert_allclose(got.to_dense(), docs[[5, 0]].to_dense())
    with pytest.raises(KeyError):
        index.get(["no-such-id"])
    subset = [ids[5], ids[10], ids[20], ids[30]]
    hits = index.search(queries[:3], k=10, restrict_ids=subset)
    assert all(h.id in subset for row in hits for h in row)
    sub_docs = docs[[5, 10, 20, 30]]
    _assert_same_topk(hits, _exact(sub_docs, subset, queries[:3], 10),
                      _true_scores(docs, ids, queries[:3]), 10)
    empty = SparseBatch.empty(2, docs.dim)
    assert index.search(empty, k=5) == [[], []]


def test_add_delete_save_load(tmp_path):
    rng = np.random.default_rng(3)
    docs = _random_batch(rng, 120, 30, 0.15)
    queries = _random_batch(rng, 8, 30, 0.2)
    ids = [str(i) for i in range(120)]
    index = MilvusIndex.build(docs[:100], ids[:100], uri=str(tmp_path / "m.db"), collection="rw")
    index.add(docs[100:], ids[100:])
    with pytest.raises(ValueError, match="already"):
        index.add(docs[:1], ["0"])
    assert index.delete(["1", "2", "missing"]) == 2
    keep = [i for i in range(120) if i not in (1, 2)]
    kept_docs, kept_ids = docs[keep], [ids[i] for i in keep]
    assert len(index) == 118
    ref = _exact(kept_docs, kept_ids, queries, 10)
    true = _true_scores(docs, ids, queries)
    _assert_same_topk(index.search(queries, k=10), ref, true, 10)

    index.save(tmp_path / "rw.milvus.json")
    index.close()
    loaded = MilvusIndex.load(tmp_path / "rw.milvus.json")
    assert len(loaded) == 118 and loaded.dim == 30
    _assert_same_topk(loaded.search(queries, k=10), ref, true, 10)
    assert loaded.stats()["docs"] == 118
    with pytest.raises(ValueError, match="exists"):
        MilvusIndex.build(docs, ids, uri=loaded.uri, collection="rw")
    loaded.close()
