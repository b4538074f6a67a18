"""Several server processes on one port (serve/processes.py): each answers searches, the answers are the
same, and a SIGTERM to the parent stops them all and frees the port."""
from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _search(port: int, text: str) -> tuple[int, dict]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # a new connection each: the kernel spreads them
    try:
        c.request("POST", "/search", json.dumps({"text": text, "k": 3}), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def _servers(pid: int) -> list[int]:
    """The server processes ``pid`` started (multiprocessing's resource tracker is a child too)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(x) for x in path.read_text().split()] if path.exists() else []
    out = []
    for k in kids:
        try:
            if b"spawn_main" in Path(f"/proc/{k}/cmdline").read_bytes():
                out.append(k)
        except OSError:
            pass
    return out


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")
def test_two_processes_serve_one_port(make_model, index_tiny_pairs, tmp_path):
    model = make_model("stair")
    model_dir = model.save_pretrained(tmp_path / "model")
    index_dir = index_tiny_pairs(model, tmp_path / "index")

    port = _free_port()
    code = ("import functools, sys; from tokenspace.searcher import Searcher; "
            "from tokenspace.serve.processes import run_processes; "
            "run_processes(functools.partial(Searcher.open, sys.argv[1], sys.argv[2]), 2, '127.0.0.1', int(sys.argv[3]))")
    parent = subprocess.Popen([sys.executable, "-c", code, str(index_dir), str(model_dir), str(port)],
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while True:
            assert parent.poll() is None, parent.communicate()[1][-2000:]
            assert time.time() < deadline, "no answer within 240 s"
            try:
                status, first = _search(port, "a red dog")
                # both processes listen once each has opened its session (the second may still be loading)
                if status == 200 and len(_servers(parent.pid)) == 2:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        answers = [_search(port, "a red dog") for _ in range(12)]
        assert all(status == 200 for status, _ in answers)
        assert all([h["id"] for h in body["hits"]] == [h["id"] for h in first["hits"]] for _, body in answers)
        children = _servers(parent.pid)
    finally:
        parent.send_signal(signal.SIGTERM)
        parent.wait(60)
    assert parent.returncode == 0
    for pid in children:  # every child went with the parent
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    with socket.create_server(("127.0.0.1", port)):  # and the port is free again
        pass
