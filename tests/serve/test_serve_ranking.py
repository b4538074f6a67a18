"""The ranking fields of POST /search (explain/ranking.py): idf, the hub prior, the query's expansion,
and the index's stored ranking as the server's default."""
from __future__ import annotations

import json

import pytest
from conftest import caption_vectors

from tokenspace.index import InvertedIndex


def _sum(hit) -> float:
    return sum(t["contribution"] for t in hit["tokens"])


def test_idf_and_expansion_fields_change_the_query_the_index_searches_with(client, served):
    service, model, records, _ = served
    plain = client.post("/search", json={"text": "a red dog", "k": 5}).json()
    weighted = client.post("/search", json={"text": "a red dog", "k": 5, "idf": 1.0}).json()
    idf = service.index.idf()
    got = {t["token"]: t["weight"] for t in weighted["query"]}
    for t in plain["query"]:  # every query weight times its token's idf
        assert got[t["token"]] == pytest.approx(t["weight"] * float(idf[model.vocab.id(t["token"])]), rel=1e-5)
    for hit in weighted["hits"]:
        assert hit["hub_penalty"] == 0 and hit["score"] == pytest.approx(_sum(hit), rel=1e-5)
    words = client.post("/search", json={"text": "a red dog", "k": 5, "expansion": 0.0}).json()
    assert {t["token"] for t in words["query"]} <= {"red", "dog", "do", "##g"}  # the query's own word pieces only


def test_bad_ranking_fields_are_refused_in_one_line(client):
    r = client.post("/search", json={"text": "a red dog", "idf": -1})
    assert r.status_code == 422
    r = client.post("/search", json={"text": "a red dog", "prior_weight": 0.5})
    assert r.status_code == 400 and "no hub prior" in r.json()["detail"]


def test_a_hub_prior_shows_in_every_hit_and_the_index_s_ranking_is_the_default(served, tmp_path):
    from fastapi.testclient import TestClient

    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import build_app
    from tokenspace.serve.service import SearchService

    _, model, records, index_dir = served
    texts = [r.text for r in records]
    index = InvertedIndex.load(index_dir)
    index.set_hub_prior(caption_vectors(["a red dog", "a red cat", "a blue car"], model.vocab), k=2, weight=0.5)
    index.save(index_dir)
    meta = json.loads((index_dir / "collection.json").read_text())
    meta["ranking"] = {"idf": 0.5}
    (index_dir / "collection.json").write_text(json.dumps(meta))
    service = SearchService(Searcher.open(index_dir, model))
    with TestClient(build_app(service)) as c:
        stats = c.get("/stats").json()
        assert stats["ranking"]["idf"] == 0.5 and stats["index"]["hub_prior"]["k"] == 2
        assert stats["ranking"]["prior_weight"] == 0.5  # resolved: the weight stored with the hub prior
        res = c.post("/search", json={"text": "a red dog", "k": 12}).json()
        assert any(h["hub_penalty"] > 0 for h in res["hits"])
        for hit in res["hits"]:
            assert hit["score"] == pytest.approx(_sum(hit) - hit["hub_penalty"], rel=1e-5, abs=1e-6)
        off = c.post("/search", json={"text": "a red dog", "k": 12, "prior_weight": 0, "idf": 0}).json()
        assert all(h["hub_penalty"] == 0 for h in off["hits"])
        assert {h["id"] for h in off["hits"]} == {h["id"] for h in res["hits"]}
    assert len(texts) == len(index)
