"""Bad HTTP input that once gave a 500 (issue M, items 1-4): each must get a 4xx with a clear message.

Requests go through the real app (TestClient over build_app), raw bytes where JSON cannot say it.
"""
from __future__ import annotations

import io

import pytest
from PIL import Image


def post_raw(client, path: str, body: str):
    return client.post(path, content=body.encode("utf-8", "surrogatepass"),
                       headers={"content-type": "application/json"})


@pytest.mark.parametrize("body", [
    '{"text": "red heart", "steer": {"red": NaN}}',
    '{"text": "red heart", "steer": {"red": Infinity}}',
    '{"text": "red heart", "k": Infinity}',
    '{"text": "red heart", "k": -Infinity}',
    '{"text": "red heart", "k": NaN}',
])
def test_non_finite_numbers_get_422(client, body):
    r = post_raw(client, "/search", body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]  # a rendered validation error, not a 500


@pytest.mark.parametrize("path,body", [
    ("/search", '{"text": "\\ud800 heart"}'),
    ("/search", '{"text": "red heart", "must": ["\\udfff"]}'),
    ("/search", '{"text": "red heart", "where": "heart OR \\ud800"}'),
    ("/search", '{"text": "red heart", "steer": {"\\ud800": 2}}'),
    ("/heatmap", '{"id": "red-dog", "text": "\\ud800 heart"}'),
    ("/heatmap", '{"id": "\\ud800", "text": "heart"}'),
])
def test_lone_surrogates_get_4xx(client, path, body):
    r = post_raw(client, path, body)
    # 422 from the schema (not a valid string) or 400 from the service (not a token it knows)
    assert r.status_code in (400, 422), r.text
    assert r.json()["detail"]


@pytest.mark.parametrize("depth", [320, 340, 490, 0])
def test_deeply_nested_where_gets_400(client, depth):
    where = ("(" * depth + "heart" + ")" * depth) if depth else "NOT " * 120 + "heart"
    r = client.post("/search", json={"text": "red heart", "where": where[:500]})
    assert r.status_code in (400, 422), r.text
    assert "where" in r.text


def test_decompression_bomb_gets_413(client):
    buf = io.BytesIO()
    Image.new("1", (20000, 20000), 1).save(buf, format="PNG", optimize=True)  # ~50 KB, 400 Mpx
    r = client.post("/search/image", files={"file": ("bomb.png", buf.getvalue(), "image/png")})
    assert r.status_code == 413, r.text
    assert "pixels" in r.json()["detail"]
