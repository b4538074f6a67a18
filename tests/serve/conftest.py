"""A served tiny world: a tiny STAIR model, the 12 tiny coloured-square images, an index of them and
their collection.json in a temp folder, and a TestClient over the app."""
from __future__ import annotations

import pytest

from tokenspace.sparse import SparseBatch


def build_index(batch, ids, index_dir) -> None:
    """Build and save with the embedded InvertedIndex (what `tokenspace index build` writes)."""
    from tokenspace.index import InvertedIndex

    InvertedIndex.build(batch, ids).save(index_dir)


def caption_vectors(texts, vocab) -> SparseBatch:
    """Index rows that say what each image shows ({a, colour, shape}, L2-normalised): an untrained tiny
    model gives every image almost the same tokens, and filters need rows that differ."""
    rows = []
    for t in texts:
        w = {tok: (0.5 if tok == "a" else 2.0) for tok in t.split()}
        norm = sum(v * v for v in w.values()) ** 0.5
        rows.append({tok: v / norm for tok, v in w.items()})
    return SparseBatch.from_dicts(rows, vocab=vocab)


@pytest.fixture
def served(make_model, tiny_pairs, tmp_path):
    """(service, model, records, index_dir) over the tiny collection."""
    from tokenspace.data.manifest import Record
    from tokenspace.pipeline import write_collection_meta
    from tokenspace.searcher import Searcher
    from tokenspace.serve.service import SearchService

    model = make_model("stair")
    paths, texts = tiny_pairs
    records = [Record(id=p.stem, image=str(p), text=t, split="test", label=p.stem.split("-")[1])
               for p, t in zip(paths, texts)]
    vectors = caption_vectors(texts, model.vocab)
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    build_index(vectors, [r.id for r in records], index_dir)
    write_collection_meta(index_dir, records)
    return SearchService(Searcher.open(index_dir, model)), model, records, index_dir


@pytest.fixture
def client(served):
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    with TestClient(build_app(served[0])) as c:
        yield c


HEADER_TIMEOUT = 1.0  # seconds: short, so the slow-header tests wait little
LINGER = 1.0  # seconds of lingering read after a refused body: short, so the closing tests wait little


@pytest.fixture
def header_timeout() -> float:
    """The live server's header timeout (seconds)."""
    return HEADER_TIMEOUT


def _parsers():
    from tokenspace.serve.header_timeout import PARSERS

    return PARSERS


@pytest.fixture(params=_parsers())
def live_server(served, request):
    """The app under a real uvicorn server on a free port (a slow body needs a real socket), with the
    settings `tokenspace serve` uses, 1 s body and header timeouts and 1 s of lingering read, once for each
    HTTP parser installed (httptools, which the server picks where it can, and h11); yields the port."""
    import socket
    import threading
    import time

    import uvicorn

    from tokenspace.serve.app import build_app, server_settings

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = server_settings(header_timeout=HEADER_TIMEOUT, linger=LINGER, parser=request.param)
    server = uvicorn.Server(uvicorn.Config(build_app(served[0], body_timeout=1.0), host="127.0.0.1", port=port,
                                           **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield port
    server.should_exit = True
    thread.join(timeout=30)
