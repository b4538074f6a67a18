"""A real-HTTP check that a model + index serve: start uvicorn on a free loopback port, load the page,
run one search, stop. `tokenspace demo` ends with it so "the page is reachable and searchable" is a
measured fact of every demo run, not a claim.
"""
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import uvicorn

from tokenspace.searcher import Searcher
from tokenspace.serve.app import create_app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(model, index_dir, query: str, k: int = 3, timeout: float = 60.0) -> dict:
    """Serve ``model`` over ``index_dir`` on 127.0.0.1, GET / and POST /search {query}; returns
    {"url", "page_bytes", "hits": [(id, score, top matched tokens)]}. Raises RuntimeError if the
    server does not come up or a request fails."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(Searcher.open(index_dir, model)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while not server.started:
            if not thread.is_alive() or time.time() > deadline:
                raise RuntimeError(f"the server on {url} did not start")
            time.sleep(0.05)
        with urllib.request.urlopen(url + "/", timeout=timeout) as r:
            page = r.read()
        req = urllib.request.Request(url + "/search", data=json.dumps({"text": query, "k": k}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = json.loads(r.read())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    hits = [(h["id"], h["score"], [t["token"] for t in h.get("tokens", [])[:3]]) for h in body["hits"]]
    return {"url": url, "page_bytes": len(page), "hits": hits}
