"""Every endpoint of the HTTP API over the tiny served collection, including each validation error."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def png_bytes(size=(32, 32), color=(220, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def detail(r) -> str:
    d = r.json()["detail"]
    return d if isinstance(d, str) else " ".join(f"{e['loc']} {e['msg']}" for e in d)


# ------------------------------------------------------------------------------ basics
def test_healthz_and_stats(client, served):
    assert client.get("/healthz").json() == {"status": "ok"}
    s = client.get("/stats").json()
    assert s["size"] == 12 and s["collection"] == 12 and s["family"] == "stair"
    assert s["model"] == "tiny-stair" and s["dim"] == 34
    assert s["nnz"] == sum(len(served[0].index.get([r.id]).row(0)[0]) for r in served[2])


def test_page_and_openapi(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="search-form"' in page.text
    assert client.get("/static/app.js").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/search", "/search/image", "/heatmap", "/stats", "/healthz"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200


# ------------------------------------------------------------------------------ search
def test_search_hits_are_explained_exactly(client):
    r = client.post("/search", json={"text": "a red dog", "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert 0 < len(body["hits"]) <= 5 and body["query"]
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)
    for h in body["hits"]:
        total = sum(t["contribution"] for t in h["tokens"])
        assert total == pytest.approx(h["score"], rel=1e-4, abs=1e-5)
        for t in h["tokens"]:
            assert t["contribution"] == pytest.approx(t["query_weight"] * t["doc_weight"], rel=1e-6)
        assert h["image_url"] == f"/image/{h['id']}" and h["text"].startswith("a ")


def test_search_notes_field(client):
    """``notes``: how the query text was read, in the schema and the answer (the page shows them): none for a
    plain query, one for a query cut to the text encoder's length (still searched), one for a query that
    names nothing (no hits)."""
    spec = client.get("/openapi.json").json()
    assert "notes" in spec["components"]["schemas"]["SearchResponse"]["properties"]
    plain = client.post("/search", json={"text": "a red dog", "k": 3}).json()
    assert plain["notes"] == [] and plain["hits"]
    long = client.post("/search", json={"text": " ".join(["a red dog"] * 10), "k": 3}).json()
    assert len(long["notes"]) == 1 and "word pieces long" in long["notes"][0] and len(long["hits"]) == 3, long["notes"]
    empty = client.post("/search", json={"text": "the", "k": 3}).json()
    assert empty["hits"] == [] and len(empty["notes"]) == 1 and "names anything" in empty["notes"][0]


def ids(client, **body) -> set[str]:
    r = client.post("/search", json={"text": "a red dog", "k": 12, **body})
    assert r.status_code == 200, r.text
    return {h["id"] for h in r.json()["hits"]}


def test_must_must_not_and_where_filter(client):
    assert ids(client, must=["dog"]) == {"red-dog", "blue-dog", "green-dog"}
    assert ids(client, must=["dog", "red"]) == {"red-dog"}
    assert ids(client, must_not=["red", "blue"]) == {f"green-{s}" for s in ("dog", "cat", "car", "tree")}
    assert ids(client, where="dog AND NOT red") == {"blue-dog", "green-dog"}
    assert ids(client, where="(cat OR car) green") == {"green-cat", "green-car"}
    assert ids(client, where="dog", must_not=["blue"]) == {"red-dog", "green-dog"}


def test_steer_changes_query_weights(client):
    base = {t["token"]: t["weight"] for t in client.post("/search", json={"text": "a red dog"}).json()["query"]}
    tok = max(base, key=base.get)
    r = client.post("/search", json={"text": "a red dog", "steer": {tok: 0, "a": 2}})
    assert r.status_code == 200
    q = {t["token"]: t["weight"] for t in r.json()["query"]}
    assert tok not in q and q["a"] == pytest.approx(2 * base["a"], rel=1e-5)
    assert all(t["token"] != tok for h in r.json()["hits"] for t in h["tokens"])


@pytest.mark.parametrize("body, status, needle", [
    ({"text": ""}, 422, "text"),
    ({"text": "   "}, 422, "blank"),
    ({"text": "x" * 501}, 422, "at most 500"),
    ({"text": "dog", "k": 0}, 422, "k"),
    ({"text": "dog", "k": 101}, 422, "k"),
    ({"text": "dog", "must": ["zebra"]}, 400, "must: unknown tokens ['zebra']"),
    ({"text": "dog", "must_not": ["cat", "qqq"]}, 400, "must_not: unknown tokens ['qqq']"),
    ({"text": "dog", "steer": {"unicorn": 2}}, 400, "steer: unknown tokens ['unicorn']"),
    ({"text": "dog", "steer": {"dog": -1}}, 422, "greater than or equal to 0"),
    ({"text": "dog", "steer": {"dog": 1000}}, 422, "less than or equal to 100"),
    ({"text": "dog", "where": "dog AND (cat"}, 400, "position"),
    ({"text": "dog", "where": "dog OR OR cat"}, 400, "position 7"),
    ({"text": "dog", "where": "zebra"}, 400, "unknown token 'zebra' at position 0"),
    ({"text": "dog", "must": ["a"] * 33}, 422, "must"),
    ({"text": "dog", "bogus": 1}, 422, "bogus"),
])
def test_search_validation(client, body, status, needle):
    r = client.post("/search", json=body)
    assert r.status_code == status, r.text
    assert needle in detail(r)


# ------------------------------------------------------------------------------ image search
def test_search_by_image(client, served, tiny_pairs):
    data = tiny_pairs[0][0].read_bytes()
    r = client.post("/search/image?k=3", files={"file": ("q.png", data, "image/png")})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert len(hits) == 3
    # the scores are the dot products of the uploaded image's vector with the indexed rows
    service, model = served[0], served[1]
    q = model.encode_image([Image.open(io.BytesIO(data))])
    for h in hits:
        expect = float((q.to_dense() @ service.index.get([h["id"]]).to_dense().T)[0, 0])
        assert h["score"] == pytest.approx(expect, rel=1e-4)
        assert sum(t["contribution"] for t in h["tokens"]) == pytest.approx(h["score"], rel=1e-4)


def test_image_upload_errors(client, served):
    r = client.post("/search/image", files={"file": ("a.txt", b"not an image at all", "text/plain")})
    assert r.status_code == 415 and detail(r) == "the upload is not a PNG, JPEG, WebP or GIF image"
    r = client.post("/search/image", files={"file": ("e.png", b"", "image/png")})
    assert r.status_code == 422 and "empty" in detail(r)  # outside the schema (minLength 1), not a 415
    r = client.post("/search/image", files={"file": ("big.png", png_bytes((6000, 5000)), "image/png")})
    assert r.status_code == 413 and "pixels" in detail(r)
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    small = TestClient(build_app(served[0], max_upload_bytes=100))
    r = small.post("/search/image", files={"file": ("q.png", png_bytes() + b"\0" * 200, "image/png")})
    assert r.status_code == 413 and "the limit is 100" in detail(r)
    assert client.post("/search/image").status_code == 422
    r = client.post("/search/image?k=0", files={"file": ("q.png", png_bytes(), "image/png")})
    assert r.status_code == 422


# ------------------------------------------------------------------------------ explain, heatmap, images
def test_explain(client, served):
    rid = served[2][0].id
    body = client.get(f"/explain/{rid}").json()
    assert body["id"] == rid and body["nnz"] == 3 and body["text"] == "a red dog"
    assert [t["token"] for t in body["tokens"]][2] == "a"  # heaviest first: red/dog, then a
    assert len(client.get(f"/explain/{rid}?top_k=2").json()["tokens"]) == 2
    assert client.get("/explain/nope").status_code == 404
    assert client.get(f"/explain/{rid}?top_k=0").status_code == 422


def test_heatmap_png(client, served):
    rid = served[2][0].id
    r = client.post("/heatmap", json={"id": rid, "text": "a red dog"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    img = Image.open(io.BytesIO(r.content))
    assert img.size == (256, 256)
    assert client.post("/heatmap", json={"id": "nope", "text": "dog"}).status_code == 404
    assert client.post("/heatmap", json={"id": rid, "text": " "}).status_code == 422


def test_image_serves_only_indexed_ids(client, served, tmp_path):
    rid = served[2][0].id
    r = client.get(f"/image/{rid}")
    assert r.status_code == 200 and r.content == Path(served[2][0].image).read_bytes()
    assert "sandbox" in r.headers["content-security-policy"]
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    for attempt in ["../secret.txt", "..%2Fsecret.txt", "%2E%2E/%2E%2E/etc/passwd", str(secret),
                    "%2Fetc%2Fpasswd", "../../../../../../etc/passwd", f"{rid}/../../secret.txt"]:
        r = client.get(f"/image/{attempt}")
        assert r.status_code == 404, attempt
        assert b"top secret" not in r.content and b"root:" not in r.content


def test_service_without_metadata_still_searches(served):
    from tokenspace.searcher import Searcher
    from tokenspace.serve.service import SearchService

    service = SearchService(Searcher.open(served[0].index, served[1], items={}))
    out = service.search_text("a red dog", k=3)
    assert out["hits"] and all(h["image_url"] is None for h in out["hits"])
    assert np.isfinite(out["took_ms"])
