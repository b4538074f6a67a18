"""The service's fast text path: a fused model's queries through its numpy text side
(models/fused_queries.py) and texts from concurrent requests encoded in one batch give the service the
same hits and scores as the library's own road (model.encode_text, then the index), and a numpy copy that
differs from its model is not used."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.models.fused_queries import FusedQueries
from tokenspace.searcher import Searcher, _Batches, text_queries
from tokenspace.serve.service import SearchService

TEXTS = ["a red dog", "a blue car and a green tree", "big cat", "a small bird on a house", "red red red",
         "the sun and the moon with a star", "a fish", "green"]


@pytest.fixture
def fused_world(tiny_fused_index):
    """(a tiny fused model: a STAIR part, the anchor and a fitted query filter; its index folder)."""
    model, _, index_dir, _ = tiny_fused_index
    return model, index_dir


def test_the_service_scores_as_the_library(fused_world):
    from fastapi.testclient import TestClient

    from tokenspace.index import InvertedIndex
    from tokenspace.serve.app import build_app

    model, index_dir = fused_world
    searcher = Searcher.open(index_dir, model)
    assert searcher.queries is model  # a session starts with the model, and a service switches
    service = SearchService(searcher)
    assert isinstance(searcher.queries, FusedQueries)  # the fast path is the one compared here
    index = InvertedIndex.load(index_dir)
    with TestClient(build_app(service)) as client:
        for text in TEXTS:
            want = index.search(model.encode_text([text]), k=5)[0]  # the library's road, in torch
            got = service.search_text(text, k=5)
            assert [h["id"] for h in got["hits"]] == [h.id for h in want]
            np.testing.assert_allclose([h["score"] for h in got["hits"]], [h.score for h in want], atol=1e-5)
            body = client.post("/search", json={"text": text, "k": 5}).json()
            assert [h["id"] for h in body["hits"]] == [h.id for h in want]
            np.testing.assert_allclose([h["score"] for h in body["hits"]], [h.score for h in want], atol=1e-5)
            for h in body["hits"]:  # still explained: the contributions sum to the score
                assert sum(c["contribution"] for c in h["tokens"]) == pytest.approx(h["score"], abs=1e-5)


def test_shaped_queries_as_the_library(fused_world):
    model, index_dir = fused_world
    searcher = Searcher.open(index_dir, model, ranking={"expansion": 0.5, "expansion_floor": 0.2})
    assert searcher.fast_text()
    ranking = Ranking(expansion=0.5, expansion_floor=0.2)
    for text in TEXTS:
        want = encode_queries(model, [text], ranking)
        got = searcher.query_vector(text)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_allclose(got.values, want.values, atol=1e-5)


def test_concurrent_texts_are_encoded_together(fused_world):
    model, index_dir = fused_world
    searcher = Searcher.open(index_dir, model)
    assert searcher.fast_text()
    calls = []
    encode_many = searcher._batches.encode_many
    gate = threading.Event()

    def slow_first(texts, ranking):  # the first call waits, so the others queue behind it
        calls.append(len(texts))
        if len(calls) == 1:
            gate.wait(5)
        return encode_many(texts, ranking)

    searcher._batches.encode_many = slow_first
    texts = [f"{t} {i}" for i, t in enumerate(TEXTS * 3)]
    got: dict[str, object] = {}
    threads = [threading.Thread(target=lambda t=t: got.__setitem__(t, searcher.encode_text(t))) for t in texts]
    threads[0].start()
    while not calls:
        pass
    for th in threads[1:]:
        th.start()
    gate.set()
    for th in threads:
        th.join(10)
    assert len(got) == len(texts) and sum(calls) == len(texts) and max(calls) > 1
    for t in texts:
        want = model.encode_text([t])
        np.testing.assert_array_equal(got[t].indices, want.indices)
        np.testing.assert_allclose(got[t].values, want.values, atol=1e-5)


def test_one_texts_error_fails_only_its_own_request():
    def encode_many(texts, ranking):
        if "bad" in texts:
            raise ValueError("bad text")
        return [f"row of {t}" for t in texts]

    batches = _Batches(encode_many)
    with batches._lock:  # as if a batch were running: the three texts queue and go in the next one
        batches._running = True
    out = {}

    def ask(t):
        try:
            out[t] = batches.encode(t, Ranking())
        except ValueError as e:
            out[t] = e

    threads = [threading.Thread(target=ask, args=(t,)) for t in ("good", "bad", "fine")]
    for th in threads:
        th.start()
    while len(batches._queue) < 3:
        pass
    slots = list(batches._queue)
    with batches._lock:  # the running batch ends: it hands the lead to the first text queued
        batches._queue[0].lead = True
        batches._queue[0].woken.set()
    for th in threads:
        th.join(10)
    assert len(slots) == 3
    assert out["good"] == "row of good" and out["fine"] == "row of fine"
    assert isinstance(out["bad"], ValueError)


def test_a_ready_row_does_not_wait_for_the_next_batch():
    entered = {t: threading.Event() for t in "abd"}
    gate = {t: threading.Event() for t in "abd"}

    def encode_many(texts, ranking):
        for t in "abd":
            if t in texts:
                entered[t].set()
                gate[t].wait(10)
        return [f"row of {t}" for t in texts]

    batches = _Batches(encode_many)
    out: dict[str, str] = {}
    threads = {t: threading.Thread(target=lambda t=t: out.__setitem__(t, batches.encode(t, Ranking())))
               for t in "abcd"}

    def queued(n):
        while len(batches._queue) < n:
            pass

    threads["a"].start()  # leads a batch of its own
    assert entered["a"].wait(10)
    threads["b"].start()
    threads["c"].start()
    queued(2)
    gate["a"].set()  # "a" is done and hands the lead to "b": b and c go together
    assert entered["b"].wait(10)
    threads["d"].start()
    queued(1)
    gate["b"].set()  # b and c are done; "d" leads the next batch, which waits on its gate
    assert entered["d"].wait(10)
    threads["c"].join(10)
    assert out.get("c") == "row of c" and "d" not in out  # c came back while d's batch still runs
    gate["d"].set()
    for th in threads.values():
        th.join(10)
    assert out == {t: f"row of {t}" for t in "abcd"}


def test_a_numpy_copy_that_differs_is_not_used(make_model, monkeypatch, caplog):
    model = make_model("stair")
    assert isinstance(text_queries(model), FusedQueries)
    real = FusedQueries.encode_text

    def off(self, texts, **kw):
        rows = real(self, texts, **kw)
        rows.values[:] += 1e-3
        return rows

    monkeypatch.setattr(FusedQueries, "encode_text", off)
    with caplog.at_level(logging.WARNING, logger="tokenspace.searcher"):
        assert text_queries(model) is model
    assert "differs from the model" in caplog.text
