"""MilvusIndex against Milvus Lite (the real C++ server from milvus-lite 2.5.1): same top-k as ExactIndex.

Skips only when pymilvus / milvus-lite are not importable; `make test` installs them (the `milvus`
extra), so CI runs it. One module-scoped server keeps the test well under a minute.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymilvus", reason="pymilvus is not installed (the 'milvus' extra)")
pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (the 'milvus' extra)")

import inspect

from tokenspace.index import ExactIndex, InvertedIndex
from tokenspace.index.dense import DenseIndex
from tokenspace.index.milvus import MilvusIndex
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

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
    hits = index.search(queries[:3], k=10, subset=subset)
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


# ----------------------------------------------------------------- parity with the embedded engine
WORDS = ["[PAD]", "[UNK]"] + [f"w{i}" for i in range(38)]


@pytest.fixture(scope="module")
def worded(tmp_path_factory):
    rng = np.random.default_rng(11)
    vocab = Vocabulary(WORDS, name="words")
    docs = _random_batch(rng, 300, len(WORDS), 0.15).with_vocab(vocab)
    queries = _random_batch(rng, 12, len(WORDS), 0.2).with_vocab(vocab)
    ids = [f"d{i}" for i in range(len(docs))]
    path = tmp_path_factory.mktemp("milvus-words")
    index = MilvusIndex.build(docs, ids, uri=str(path / "w.db"), collection="words",
                              inverted_index_algo="DAAT_MAXSCORE")
    yield index, InvertedIndex.build(docs, ids), docs, ids, queries, path
    index.close()


@pytest.mark.parametrize("options", [
    {"where": "w1 OR w2"},
    {"where": "(w3 OR w4) NOT w5"},
    {"where": "NOT (w6 AND w7) AND w8"},
    {"where": "NOT w9 NOT w10"},
    {"must": ["w11", 12]},
    {"must_not": ["w13", "w14"]},
    {"must": ["w15"], "must_not": ["w16"], "where": "w17 OR NOT w18", "subset": [f"d{i}" for i in range(0, 300, 3)]},
])
def test_token_filters_give_the_embedded_engines_results(worded, options):
    index, embedded, docs, ids, queries, _ = worded
    true = _true_scores(docs, ids, queries)
    ref = [[(h.id, h.score) for h in hits] for hits in embedded.search(queries, k=10, **options)]
    got = index.search(queries, k=10, threads=2, **options)
    assert any(ref), "the filter leaves some documents"
    _assert_same_topk(got, ref, true, 10)


def test_vocabulary_and_index_algorithm_saved_with_the_collection(worded):
    index, embedded, docs, ids, queries, path = worded
    assert index.stats()["inverted_index_algo"] == "DAAT_MAXSCORE"
    index.save(path / "w.milvus.json")
    loaded = MilvusIndex.load(path / "w.milvus.json")  # no vocab passed: it comes from the save file
    assert loaded.vocab.tokens == WORDS and loaded.vocab.name == "words"
    assert loaded.stats()["index_type"] == "SPARSE_INVERTED_INDEX"
    ref = [[(h.id, h.score) for h in hits] for hits in embedded.search(queries, k=5, where="w1 NOT w2")]
    _assert_same_topk(loaded.search(queries, k=5, where="w1 NOT w2"), ref, _true_scores(docs, ids, queries), 5)


def test_wand_index_type(tmp_path):
    rng = np.random.default_rng(5)
    docs, queries = _random_batch(rng, 150, 40, 0.1), _random_batch(rng, 6, 40, 0.2)
    ids = [str(i) for i in range(150)]
    with MilvusIndex.build(docs, ids, uri=str(tmp_path / "wand.db"), index_type="SPARSE_WAND") as index:
        assert index.stats()["index_type"] == "SPARSE_WAND"
        _assert_same_topk(index.search(queries, k=10), _exact(docs, ids, queries, 10),
                          _true_scores(docs, ids, queries), 10)
    with pytest.raises(ValueError, match="index_type"):
        MilvusIndex.build(docs, ids, uri=str(tmp_path / "bad.db"), index_type="HNSW")


def test_one_search_protocol():
    """The same keyword names on every engine, and no **options swallowing a misspelt one."""
    for engine in (InvertedIndex, MilvusIndex, DenseIndex, ExactIndex):
        params = inspect.signature(engine.search).parameters
        assert {"k", "where", "must", "must_not", "subset", "threads"} <= set(params), engine
        if engine is not DenseIndex:  # the sparse engines also filter on row metadata
            assert "meta" in params, engine
        if engine is not ExactIndex:  # the oracle refuses every other knob by name, in one message
            assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), engine
