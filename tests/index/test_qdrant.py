"""Qdrant sparse vectors (index/qdrant.py): the real qdrant-client in its embedded local mode (no server)
returns the same top-10 as InvertedIndex on a tiny index, without and with Qdrant's IDF modifier (which
is BM25's idf: search(idf=1)); the REST export folder holds the same points and queries."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.index._inverted_data import assert_same_hits, ids_for, random_batch
from tokenspace.index import InvertedIndex
from tokenspace.index.qdrant import (
    collection_config,
    point_id,
    points,
    query_bodies,
    search,
    upload,
    write_qdrant,
    write_queries,
)
from tokenspace.sparse import SparseBatch

DIM = 300


@pytest.fixture(scope="module")
def tiny():
    docs = random_batch(200, DIM, 0.05, seed=3, zipf=True)
    queries = random_batch(12, DIM, 0.03, seed=4, zipf=True)
    return docs, ids_for(200), queries


def _client():
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is in the dev extra")
    return qdrant_client.QdrantClient(":memory:")


@pytest.mark.parametrize("idf", [False, True])
def test_local_qdrant_gives_the_index_top10(tiny, idf):
    docs, ids, queries = tiny
    index = InvertedIndex.build(docs, ids)
    client = _client()
    meta = [{"n": i} for i in range(len(ids))]
    assert upload(client, docs, ids, collection="c", idf=idf, metadata=meta) == len(ids)
    got = search(client, queries, k=10, collection="c")
    want = index.search(queries, k=10, idf=1.0 if idf else 0.0)
    assert all(len(w) == 10 for w in want)
    assert_same_hits(got, want, tol=1e-4)
    # the payload keeps the document id and the row's metadata
    rec = client.retrieve("c", [point_id("d7")], with_payload=True)[0]
    assert rec.payload == {"id": "d7", "n": 7}


def test_upload_refuses_an_existing_collection_unless_recreated(tiny):
    docs, ids, queries = tiny
    client = _client()
    upload(client, docs[:10], ids[:10], collection="c")
    with pytest.raises(ValueError, match="exists: pass recreate=True"):
        upload(client, docs, ids, collection="c")
    upload(client, docs, ids, collection="c", recreate=True)
    assert client.count("c").count == len(ids)


def test_an_empty_query_matches_nothing(tiny):
    docs, ids, _ = tiny
    client = _client()
    upload(client, docs, ids, collection="c")
    empty = SparseBatch(np.array([0, 0]), np.zeros(0, np.int32), np.zeros(0, np.float32), DIM)
    assert search(client, empty, collection="c") == [[]]


def test_the_rest_folder_holds_the_same_points_and_queries(tiny, tmp_path):
    docs, ids, queries = tiny
    written = write_qdrant(docs, ids, tmp_path / "q", idf=True, points_per_file=64)
    assert [p.name for p in written] == ["collection.json"] + [f"points-{n:05d}.json" for n in range(4)]
    assert json.loads(written[0].read_text()) == {"sparse_vectors": {"tokens": {"modifier": "idf"}}}
    pts = [p for f in written[1:] for p in json.loads(f.read_text())["points"]]
    assert [p["payload"]["id"] for p in pts] == ids
    for i in (0, 57, 199):
        idx, val = docs.row(i)
        vec = pts[i]["vector"]["tokens"]
        assert vec["indices"] == idx[val > 0].tolist()
        np.testing.assert_array_equal(np.float32(vec["values"]), val[val > 0])
    body = json.loads(write_queries(queries, tmp_path / "queries.json", k=5).read_text())
    assert body["searches"] == query_bodies(queries, k=5)
    assert body["searches"][0]["using"] == "tokens" and body["searches"][0]["limit"] == 5


def test_bad_input_is_refused(tiny):
    docs, ids, _ = tiny
    with pytest.raises(ValueError, match="unique"):
        list(points(docs[:2], ["a", "a"]))
    with pytest.raises(ValueError, match="2 ids for a batch of 3"):
        list(points(docs[:3], ["a", "b"]))
    with pytest.raises(ValueError, match="vector_name"):
        collection_config("a/b")
    with pytest.raises(ValueError, match="own 'id' field"):
        list(points(docs[:1], ["a"], metadata=[{"id": "b"}]))
    bad = SparseBatch(np.array([0, 1]), np.array([3], np.int32), np.array([-1.0], np.float32), DIM)
    with pytest.raises(ValueError, match="negative"):
        list(points(bad, ["a"]))
    with pytest.raises(ValueError, match="k must be"):
        query_bodies(docs[:1], k=0)
    assert point_id("a") == point_id("a") != point_id("b")
