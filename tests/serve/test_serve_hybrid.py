"""Hybrid search over HTTP: a service with a dense model and index answers `"fusion"` with the
hits index.hybrid.hybrid_search gives; a server without one, or a fused request with token filters, is a
clear 400; out-of-range fields a 422."""
from __future__ import annotations

import pytest

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the 'dense' extra)")


@pytest.fixture
def hybrid(served, make_model):
    """(TestClient over a hybrid service, service, dense model, dense index) on the tiny collection."""
    from fastapi.testclient import TestClient
    from PIL import Image

    from tokenspace.index.dense import DenseIndex
    from tokenspace.searcher import DenseHalf, Searcher
    from tokenspace.serve.app import build_app
    from tokenspace.serve.service import SearchService

    service, model, records, index_dir = served
    dense_model = make_model("dense", seed=1)
    dense_index = DenseIndex.build(dense_model.encode_image([Image.open(r.image) for r in records]),
                                   [r.id for r in records])
    hybrid_service = SearchService(Searcher.open(index_dir, model, DenseHalf.open(dense_index, dense_model)))
    with TestClient(build_app(hybrid_service)) as c:
        yield c, hybrid_service, dense_model, dense_index


@pytest.mark.parametrize("fusion,weight", [("rrf", 0.5), ("weighted", 0.3), ("weighted", 1.0)])
def test_fusion_gives_the_library_hits(hybrid, fusion, weight):
    from tokenspace.index.hybrid import hybrid_search

    client, service, dense_model, dense_index = hybrid
    r = client.post("/search", json={"text": "a red dog", "k": 4, "fusion": fusion, "weight": weight})
    assert r.status_code == 200, r.text
    expect = hybrid_search(service.index, service.encode_text("a red dog"), dense_index,
                           dense_model.encode_text(["a red dog"]), k=4, fusion=fusion, weight=weight)[0]
    assert [(h["id"], h["score"]) for h in r.json()["hits"]] == [(h.id, pytest.approx(h.score)) for h in expect]
    # every hit still explained by the sparse side's tokens
    assert all("tokens" in h for h in r.json()["hits"])


def test_without_fusion_the_sparse_index_answers_alone(hybrid, client):
    body = {"text": "a red dog", "k": 4}
    assert hybrid[0].post("/search", json=body).json()["hits"] == client.post("/search", json=body).json()["hits"]


def test_stats_say_whether_fusion_is_on(hybrid, client):
    assert hybrid[0].get("/stats").json()["dense_index"]["docs"] == 12
    assert client.get("/stats").json()["dense_index"] is None


@pytest.mark.parametrize("body,status,message", [
    ({"text": "a red dog", "fusion": "rrf", "must": ["red"]}, 400, "must filter on the sparse index"),
    ({"text": "a red dog", "fusion": "rrf", "where": "red"}, 400, "where filter on the sparse index"),
    ({"text": "a red dog", "fusion": "max"}, 422, None),
    ({"text": "a red dog", "fusion": "rrf", "weight": 1.5}, 422, None),
    ({"text": "a red dog", "fusion": "rrf", "weight": True}, 422, None),
])
def test_misuse(hybrid, body, status, message):
    r = hybrid[0].post("/search", json=body)
    assert r.status_code == status, r.text
    if message:
        assert message in r.json()["detail"]


def test_a_server_without_a_dense_index_refuses_fusion(client):
    r = client.post("/search", json={"text": "a red dog", "fusion": "rrf"})
    assert r.status_code == 400 and "no dense index" in r.json()["detail"]


def test_indexes_of_different_collections_are_refused(served, make_model):
    import numpy as np

    from tokenspace.index.dense import DenseIndex
    from tokenspace.searcher import DenseHalf, Searcher

    service, model, records, index_dir = served
    small = DenseIndex.build(np.eye(2, 8, dtype=np.float32), ["x", "y"])
    with pytest.raises(ValueError, match="holds 2 images and the index 12"):
        Searcher.open(index_dir, model, DenseHalf.open(small, make_model("dense")))
