"""Byte caps, HEAD, upload formats and messages (an HTTP audit of 2026-11-26): oversized bodies are
refused while they arrive, errors never echo the input or a library's internals, GET routes answer
HEAD, and must/steer read words as a boolean query does."""
from __future__ import annotations

import io

import pytest
from PIL import Image

from tokenspace.serve import schemas


def detail(r):
    return r.json()["detail"]


def image_bytes(fmt: str, size=(8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buf, format=fmt)
    return buf.getvalue()


def test_oversized_json_body_is_refused_before_parsing(client):
    body = b'{"text": "a", "must": [' + b'"dog",' * 20_000 + b'"dog"]}'
    assert len(body) > schemas.MAX_JSON_BYTES
    r = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert detail(r) == f"the request body is {len(body):,} bytes; the limit for this endpoint is {schemas.MAX_JSON_BYTES:,}"


def test_chunked_body_is_counted_as_it_arrives(client):
    def chunks():  # no Content-Length: the cap must be found by counting
        for _ in range(100):
            yield b" " * 1024

    r = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and detail(r).startswith("the request body is over ")


def test_upload_cap_applies_before_the_file_is_stored(served):
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import MULTIPART_SLACK, build_app

    small = TestClient(build_app(served[0], max_upload_bytes=1000))
    big = image_bytes("PNG") + b"\0" * (MULTIPART_SLACK + 2000)
    r = small.post("/search/image", files={"file": ("q.png", big, "image/png")})
    assert r.status_code == 413 and "the limit for this endpoint is" in detail(r)
    # a normal request still fits under both caps
    assert small.post("/search/image", files={"file": ("q.png", image_bytes("PNG"), "image/png")}).status_code == 200


def test_422_does_not_echo_the_input(client):
    r = client.post("/search", json={"text": "a" * 5000})
    assert r.status_code == 422
    err = detail(r)[0]
    assert "input" not in err and err["loc"] == ["body", "text"] and err["ctx"] == {"max_length": schemas.MAX_TEXT}
    assert len(r.content) < 1000


@pytest.mark.parametrize("path", ["/", "/healthz", "/stats", "/explain/red-dog", "/image/red-dog", "/static/app.js"])
def test_get_routes_answer_head(client, path):
    got = client.get(path)
    head = client.head(path)
    assert got.status_code == head.status_code == 200
    assert head.content == b"" and head.headers["content-length"] == got.headers["content-length"]
    assert head.headers["content-type"] == got.headers["content-type"]


def test_head_on_post_routes_and_unknown_ids(client):
    assert client.head("/search").status_code == 405
    assert client.head("/explain/no-such-id").status_code == 404
    # the OpenAPI schema lists each route once (HEAD is not declared per route)
    assert client.get("/openapi.json").status_code == 200
    assert "head" not in client.get("/openapi.json").json()["paths"]["/healthz"]


@pytest.mark.parametrize("fmt", ["TIFF", "BMP", "ICO"])
def test_only_the_promised_formats_are_decoded(client, fmt):
    r = client.post("/search/image", files={"file": (f"q.{fmt.lower()}", image_bytes(fmt), "image/x")})
    assert r.status_code == 415 and detail(r) == "the upload is not a PNG, JPEG, WebP or GIF image"


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_promised_formats_are_searched(client, fmt):
    r = client.post("/search/image?k=2", files={"file": ("q", image_bytes(fmt), "image/x")})
    assert r.status_code == 200 and len(r.json()["hits"]) == 2


def test_postscript_never_reaches_a_decoder(client):
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    r = client.post("/search/image", files={"file": ("q.eps", eps, "application/postscript")})
    assert r.status_code == 415 and "Ghostscript" not in detail(r)


def test_upload_messages_name_no_library_internals(client):
    png = image_bytes("PNG", (5000, 5000))
    r = client.post("/search/image", files={"file": ("t.png", png[:200], "image/png")})  # header, no data
    assert r.status_code == 415
    assert detail(r) == "the image could not be decoded: its PNG data is truncated or damaged"
    bomb = io.BytesIO()
    Image.new("1", (30000, 30000)).save(bomb, format="PNG")  # small file, 900 M pixels
    r = client.post("/search/image", files={"file": ("b.png", bomb.getvalue(), "image/png")})
    assert r.status_code == 413
    assert detail(r) == "the image is too large; the limit is 25,000,000 pixels"


def test_stats_do_not_show_server_paths(client, served):
    body = client.get("/stats").text
    assert str(served[3]) not in body and "path" not in client.get("/stats").json()["index"]


def test_must_and_steer_read_words_as_where_does(client):
    upper = client.post("/search", json={"text": "a red dog", "must": ["Dog"], "steer": {" RED ": 2}})
    lower = client.post("/search", json={"text": "a red dog", "must": ["dog"], "steer": {"red": 2}})
    assert upper.status_code == lower.status_code == 200
    assert upper.json()["hits"] == lower.json()["hits"]
    r = client.post("/search", json={"text": "a red dog", "must": ["dogs", "zebra"]})
    assert r.status_code == 400
    assert detail(r).startswith("must: unknown tokens ['dogs', 'zebra'] (not in the ")
    assert detail(r).endswith("'dogs' is dog ##s: one token each here; a `where` query takes such words)")


def test_unclosed_bracket_names_each_position_once(client):
    r = client.post("/search", json={"text": "a red dog", "where": "(dog OR cat"})
    assert r.status_code == 400
    assert detail(r) == ("where: '(' at position 0 is not closed: expected ')' at position 11 "
                         "(found end of query) in query '(dog OR cat'")
