"""A connection whose body is refused is answered readably and then closed, whatever the client goes on
sending: against a real uvicorn server (conftest.live_server: 1 s body timeout, 1 s of lingering read),
over raw sockets."""
from __future__ import annotations

import os
import socket
import time

from conftest import LINGER

BODY_TIMEOUT = 1.0  # live_server's


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))  # the server runs in this process: its sockets count here


def _read_available(c: socket.socket) -> tuple[bytes, bool]:
    """What ``c`` holds now, without waiting, and whether the server has ended its side (EOF or reset)."""
    c.setblocking(False)
    got = b""
    try:
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return got, True
            got += chunk
    except BlockingIOError:
        return got, False
    except ConnectionResetError:
        return got, True


def test_a_trickled_body_gets_408_and_the_connection_closes_while_bytes_keep_coming(live_server):
    """The probe's case: Content-Length 8000000 and a byte every so often. Each client gets its 408 at the
    body timeout and the server's socket is gone within the lingering read, though the byte keeps coming."""
    n = 8
    head = (b"POST /search/image HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=xx\r\n"
            b"Content-Length: 8000000\r\n\r\n--xx\r\n")
    before = _open_fds()
    conns = [socket.create_connection(("127.0.0.1", live_server), timeout=10) for _ in range(n)]
    answers, ended, dead = {c: b"" for c in conns}, {}, {}
    t0 = time.monotonic()
    for c in conns:
        c.sendall(head)
    while len(dead) < n and time.monotonic() - t0 < 15:
        for c in conns:
            if c in dead:
                continue
            got, end = _read_available(c)
            answers[c] += got
            if end:
                ended.setdefault(c, time.monotonic() - t0)
            try:
                c.setblocking(True)
                c.send(b"x")  # the trickle goes on after the answer and after the server's end of file
            except OSError:  # EPIPE or a reset: the server's socket is closed
                dead[c] = time.monotonic() - t0
        time.sleep(0.2)
    try:
        assert len(dead) == n, f"{n - len(dead)} of {n} connections still open after 15 s of trickling"
        for c in conns:
            assert answers[c].startswith(b"HTTP/1.1 408"), answers[c][:200]
            assert b"did not arrive" in answers[c] and b"connection: close" in answers[c].lower()
            assert ended[c] < BODY_TIMEOUT + 3  # the answer, then end of file
            assert dead[c] < BODY_TIMEOUT + LINGER + 4  # closed after the lingering read, not extended
        assert _open_fds() <= before + n + 2  # the server's ends are closed (ours are still open)
    finally:
        for c in conns:
            c.close()


def _exchange(port: int, head: bytes, body_chunks) -> bytes:
    """Send the whole request (as a client that writes its body before reading does), then read the
    answer to the end. A reset while sending or reading fails the test: the answer was thrown away."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as c:
        c.sendall(head)
        for chunk in body_chunks:
            c.sendall(chunk)
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out


def test_an_8_mb_json_body_gets_a_readable_413(live_server):
    size = 8 * 1024 * 1024
    head = (f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    body = b'{"text": "' + b"a" * (size - 12) + b'"}'
    answer = _exchange(live_server, head, [body[i:i + (1 << 20)] for i in range(0, size, 1 << 20)])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"the limit for this endpoint is" in answer and b"connection: close" in answer.lower()


def test_a_9_mb_chunked_upload_gets_a_readable_413(live_server):
    head = (b"POST /search/image HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=xx\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    piece = 64 * 1024
    part = b"--xx\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n\r\n"

    def chunks():
        yield b"%x\r\n%s\r\n" % (len(part), part)
        for _ in range(9 * 1024 * 1024 // piece):
            yield b"%x\r\n%s\r\n" % (piece, b"\0" * piece)
        yield b"0\r\n\r\n"

    answer = _exchange(live_server, head, chunks())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"the request body is over" in answer and b"connection: close" in answer.lower()


def test_a_kept_alive_connection_still_serves_a_second_request(live_server):
    """Only a refused body ends its connection: two whole requests share one."""
    body = b'{"text": "a red dog", "k": 2}'
    req = (f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", live_server), timeout=20) as c:
        for _ in range(2):
            c.sendall(req)
            out = b""
            while b"\r\n\r\n" not in out:
                out += c.recv(65536)
            assert out.startswith(b"HTTP/1.1 200"), out[:200]
            head, _, rest = out.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(rest) < length:
                rest += c.recv(65536)
