"""Bad HTTP input that once gave a 500: each must get a 4xx with a clear message.

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


# ------------------------------------------------------------------------------ slow clients
def _raw_exchange(port: int, request: bytes, wait: float) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(request)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
                if _whole_response(b"".join(chunks)):
                    break  # not until the server drops the kept-alive connection (seconds later)
        except TimeoutError:
            pass  # no (complete) answer in time
        return b"".join(chunks)


def _whole_response(data: bytes) -> bool:
    """Whether ``data`` holds a whole HTTP response: its headers and the Content-Length bytes after them."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


@pytest.mark.parametrize("path,ctype,body", [
    ("/search", "application/json", b'{"text": "red h'),
    ("/search/image", "multipart/form-data; boundary=xx", b'--xx\r\nContent-Disposition: form-data; name="file"'),
])
def test_a_body_that_never_arrives_gets_408(live_server, path, ctype, body):
    import time

    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: 1000\r\n\r\n").encode()
    t0 = time.monotonic()
    answer = _raw_exchange(live_server, head + body, wait=10)
    took = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive" in answer and took < 8


def test_a_complete_request_on_the_live_server_is_unaffected(live_server):
    body = b'{"text": "a red dog", "k": 3}'
    head = (f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    answer = _raw_exchange(live_server, head + body, wait=30)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def _closed_by_server(s) -> bool:
    """Whether the server has answered and closed ``s`` (EOF after any bytes), without waiting."""
    s.setblocking(False)
    try:
        while chunk := s.recv(65536):
            if not chunk:
                break
        return True  # recv returned b"": end of stream
    except BlockingIOError:
        return False  # still open, nothing (more) to read
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("half", [b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"GET /heal", b""])
def test_200_connections_with_half_sent_headers_are_closed(live_server, header_timeout, half):
    """Connections that never finish their headers (or send nothing) all stayed open
    forever; each must be answered 408 and closed once the header timeout has passed."""
    import socket
    import time

    conns = [socket.create_connection(("127.0.0.1", live_server), timeout=10) for _ in range(200)]
    try:
        for c in conns:
            if half:
                c.sendall(half)
        deadline = time.monotonic() + header_timeout + 1.5
        time.sleep(header_timeout)
        still_open = conns
        while still_open and time.monotonic() < deadline:  # done as soon as the server has closed them all
            still_open = [c for c in still_open if not _closed_by_server(c)]
            time.sleep(0.05 if still_open else 0)
        assert not still_open, f"{len(still_open)} of 200 half-open connections still open"
    finally:
        for c in conns:
            c.close()
    # and the server still answers a whole request
    answer = _raw_exchange(live_server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", wait=10)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_trickled_headers_do_not_extend_the_deadline(live_server, header_timeout):
    """One byte every 0.3 s keeps the connection busy but the deadline is for the whole header block."""
    import socket
    import time

    with socket.create_connection(("127.0.0.1", live_server), timeout=10) as c:
        t0 = time.monotonic()
        answer = b""
        for byte in b"GET /healthz HTTP/1.1\r\nHost: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx":
            try:
                c.sendall(bytes([byte]))
            except OSError:
                break  # closed by the server
            time.sleep(0.3)
            if time.monotonic() - t0 > header_timeout + 2:
                break
        c.settimeout(2)
        try:
            answer = c.recv(65536)
        except (TimeoutError, ConnectionResetError):
            pass
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - t0 < header_timeout + 2


def test_an_oversized_header_block_is_refused_while_it_arrives(live_server):
    """A header that never ends is refused once it passes the cap (16 KiB, h11's) and the connection is
    closed: httptools alone held a 74 MB header in memory within the header deadline."""
    import socket
    import time

    with socket.create_connection(("127.0.0.1", live_server), timeout=10) as c:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent, t0, answer = 0, time.monotonic(), b""
        try:
            while sent < 8 * 2**20 and time.monotonic() - t0 < 5:
                c.sendall(b"a" * 4096)
                sent += 4096
        except OSError:  # reset: the server closed while more was coming
            pass
        c.settimeout(2)
        try:
            while chunk := c.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        assert sent < 8 * 2**20, "8 MB of header accepted"
        assert not answer or answer.startswith(b"HTTP/1.1 400"), answer[:200]
    # and a request whose headers fit is served
    answer = _raw_exchange(live_server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 8000
                           + b"\r\nConnection: close\r\n\r\n", wait=10)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_a_kept_alive_connection_gets_a_fresh_header_deadline(live_server, header_timeout):
    """A second request on a kept-alive connection is served when its headers come in time, also after
    the first request's deadline would have passed."""
    import socket
    import time

    with socket.create_connection(("127.0.0.1", live_server), timeout=10) as c:
        for _ in range(2):
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            time.sleep(header_timeout * 0.6)
            c.sendall(b"\r\n")
            answer = b""
            while not answer.endswith(b'{"status":"ok"}'):  # the head and the body may come apart
                chunk = c.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer


# ------------------------------------------------------------------------------ schema vs behaviour
@pytest.mark.parametrize("body", [
    {"text": "a red dog", "k": "10"}, {"text": "a red dog", "k": True}, {"text": "a red dog", "k": 2.5},
    {"text": "a red dog", "steer": {"red": True}}, {"text": "a red dog", "steer": {"red": "2"}},
    {"text": "a red dog", "must": [1]}, {"text": 7}, {"text": ["a red dog"]},
])
def test_values_of_another_type_get_422(client, body):
    """Lax parsing took "10" and true for integers and true for a number, although the
    schema says integer / number."""
    r = client.post("/search", json=body)
    assert r.status_code == 422, r.text


@pytest.mark.parametrize("body", [{"text": "a red dog", "k": 3.0}, {"text": "a red dog", "steer": {"red": 2}}])
def test_numbers_json_schema_calls_valid_are_accepted(client, body):
    """JSON Schema's integer includes 3.0 and its number includes 2: both are accepted."""
    assert client.post("/search", json=body).status_code == 200


def test_the_blank_pattern_is_exactly_what_strip_removes():
    """The schema's pattern and the service's blank check (str.strip) agree on every code point."""
    import re
    import sys

    from tokenspace.serve.schemas import NOT_BLANK

    wrong = [hex(c) for c in range(sys.maxunicode + 1) if bool(re.search(NOT_BLANK, chr(c))) == chr(c).isspace()]
    assert not wrong


def test_the_schema_forbids_an_empty_upload(client):
    """An empty upload is refused with a 422, and the schema says it must not be empty (it allowed it)."""
    spec = client.get("/openapi.json").json()
    ref = spec["paths"]["/search/image"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
    assert spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]["file"]["minLength"] == 1
    r = client.post("/search/image", files={"file": ("e.png", b"", "image/png")})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "file"]


@pytest.mark.parametrize("body", [{"text": " "}, {"text": "\t\n"}, {"text": "a red dog"}, {"text": "x" * 501},
                                  {"text": "\u001d"}, {"text": "\u0085 \u3000"}, {"text": "\ufeff"}])
def test_the_schema_and_the_service_agree_on_what_is_valid(client, body):
    """A body the OpenAPI schema calls valid is not refused as invalid (422), and one it calls invalid is."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")  # schemathesis's validator (pydantic's regex flavour)

    spec = client.get("/openapi.json").json()
    ref = spec["paths"]["/search"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = dict(spec["components"]["schemas"][ref.rsplit("/", 1)[1]], components=spec["components"])
    valid = jsonschema_rs.Draft202012Validator(schema).is_valid(body)
    r = client.post("/search", json=body)
    assert (r.status_code != 422) == valid, (valid, r.status_code, r.text)


def test_malformed_multipart_is_a_documented_400(client):
    """Found by the fuzz test: Starlette refuses a broken multipart body with 400; the schema must say so."""
    r = client.post("/search/image", content=b"--xx\r\n1899--xx--\r\n",
                    headers={"content-type": "multipart/form-data; boundary=xx"})
    assert r.status_code == 400 and r.json()["detail"]
    assert "400" in client.get("/openapi.json").json()["paths"]["/search/image"]["post"]["responses"]
