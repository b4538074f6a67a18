"""The search body's `filter` object: metadata filters through the HTTP API, applied by the
index before top-k, strictly typed in the schema; a filter the index refuses is a 400 naming it."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")


@pytest.fixture
def client_with_metadata(served, tmp_path):
    """The served tiny collection re-indexed with metadata on each row (caption, source, a number)."""
    from fastapi.testclient import TestClient

    from tokenspace.index import InvertedIndex
    from tokenspace.pipeline import write_collection_meta
    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import build_app
    from tokenspace.serve.service import SearchService

    _, model, records, index_dir = served
    plain = InvertedIndex.load(index_dir)
    ids = [r.id for r in records]
    meta = [{"caption": r.text, "source": "odd" if i % 2 else "even", "n": i} for i, r in enumerate(records)]
    InvertedIndex.build(plain.get(ids), ids, metadata=meta).save(tmp_path / "i")
    write_collection_meta(tmp_path / "i", records)
    with TestClient(build_app(SearchService(Searcher.open(tmp_path / "i", model)))) as c:
        yield c, records, meta


def _ids(r) -> list[str]:
    assert r.status_code == 200, r.text
    return [h["id"] for h in r.json()["hits"]]


def test_filter_equality_set_and_word(client_with_metadata):
    c, records, meta = client_with_metadata
    word = meta[0]["caption"].split()[-1]  # a word of the first caption
    with_word = {r.id for r, m in zip(records, meta) if word in m["caption"].split()}
    got = _ids(c.post("/search", json={"text": meta[0]["caption"], "k": 100, "filter": {"caption": {"word": word}}}))
    assert got and set(got) <= with_word
    # every caption's words: each image shares one with the query (a function word alone, "a", finds nothing)
    every = " ".join(sorted({w for m in meta for w in m["caption"].split()}))
    got = _ids(c.post("/search", json={"text": every, "k": 100, "filter": {"source": "odd"}}))
    assert got and all(meta[[r.id for r in records].index(i)]["source"] == "odd" for i in got)
    got = _ids(c.post("/search", json={"text": every, "k": 2, "filter": {"n": {"in": [1, 3, 5]}}}))
    assert len(got) == 2 and set(got) <= {records[1].id, records[3].id, records[5].id}  # k hits, all pass
    assert _ids(c.post("/search", json={"text": every, "filter": {"source": "nowhere"}})) == []
    assert _ids(c.post("/search", json={"text": every, "filter": {"n": True}})) == []  # a bool is not 1


@pytest.mark.parametrize("bad, status", [
    ({"source": None}, 422), ({"source": ["odd"]}, 422), ({"a b": 1}, 422), ({"source": {"in": []}}, 422),
    ({"source": {"like": "o"}}, 422), ({"source": {"in": ["odd"], "word": "x"}}, 422), ("NaN", 422),
    ({"caption": {"word": "two words"}}, 400),
])
def test_bad_filters_are_refused(client_with_metadata, bad, status):
    c, _, _ = client_with_metadata
    if bad == "NaN":  # not JSON, but Python's json module writes and reads it
        r = c.post("/search", content='{"text": "a", "filter": {"n": NaN}}', headers={"content-type": "application/json"})
    else:
        r = c.post("/search", json={"text": "a", "filter": bad})
    assert r.status_code == status, r.text
    if status == 400:
        assert "takes one word" in r.json()["detail"]


def test_filter_is_in_the_schema(client_with_metadata):
    c, _, _ = client_with_metadata
    spec = c.get("/openapi.json").json()
    props = spec["components"]["schemas"]["SearchRequest"]["properties"]
    assert "filter" in props and "tokens" in props["where"]["description"]


def test_filter_on_an_index_without_metadata_is_refused(client):
    """An index built before rows carried metadata would answer every filter with no hits: a 400 says why."""
    r = client.post("/search", json={"text": "a", "filter": {"source": "odd"}})
    assert r.status_code == 400 and "carries no row metadata" in r.json()["detail"], r.text
