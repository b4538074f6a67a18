"""Text searches known to be short run on the event loop, not in the thread pool (serve/app.py: SearchRoute,
SearchService.quick_text): an inference-free model's (a table look-up) without fusion, while the recent
searches stay cheap. The answers are the library's, and the errors FastAPI's, whichever way a search runs."""
from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tokenspace.index import InvertedIndex
from tokenspace.query_table import TableQueries
from tokenspace.searcher import Searcher
from tokenspace.serve import app as app_module
from tokenspace.serve.app import build_app
from tokenspace.serve.service import INLINE_CPU_S, SearchService

TEXTS = ["a red circle", "a blue square", "green triangle", "a red red star", "the blue one"]


@pytest.fixture
def if_world(make_model, tiny_vocab, index_tiny_pairs, tmp_path):
    """(an inference-free model over a tiny STAIR base, its index folder of tiny_pairs)."""
    from tokenspace.models.inference_free import caption_idf, inference_free_config
    from tokenspace.models.registry import build_model

    base = make_model("stair", seed=0).save_pretrained(tmp_path / "base")
    model = build_model(inference_free_config(str(base)), vocab=tiny_vocab).eval()
    model.set_weights(caption_idf(model.tokenizer, TEXTS + ["a green circle", "a square"]))
    return model, index_tiny_pairs(model, tmp_path / "index")


@pytest.fixture
def pooled(monkeypatch):
    """The searches that went through the thread pool (their endpoints' requests)."""
    calls = []
    run = app_module.run_in_threadpool

    async def counted(fn, *args):
        calls.append(args)
        return await run(fn, *args)

    monkeypatch.setattr(app_module, "run_in_threadpool", counted)
    return calls


def test_an_inference_free_search_runs_on_the_loop_and_answers_as_the_library(if_world, pooled):
    model, index_dir = if_world
    service = SearchService(Searcher.open(index_dir, model))
    assert service.quick_text() and not service.quick_text("rrf")
    assert isinstance(service.searcher.queries, TableQueries)  # the table in numpy, not the model's encode_text
    index = InvertedIndex.load(index_dir)
    with TestClient(build_app(service)) as client:
        for text in TEXTS:
            want = index.search(model.encode_text([text]), k=5)[0]  # the library's road
            body = client.post("/search", json={"text": text, "k": 5}).json()
            assert [h["id"] for h in body["hits"]] == [h.id for h in want]
            np.testing.assert_allclose([h["score"] for h in body["hits"]], [h.score for h in want], atol=1e-6)
            for h in body["hits"]:  # explained as ever: the contributions sum to the score
                assert sum(c["contribution"] for c in h["tokens"]) == pytest.approx(h["score"], abs=1e-5)
        # the same errors as from the thread pool: a refused query is a 400, a body outside the schema a 422
        r = client.post("/search", json={"text": "a red circle", "must": ["nosuchtoken"]})
        assert r.status_code == 400 and r.headers["content-type"] == "application/json"
        assert client.post("/search", json={"text": "a red circle", "k": 0}).status_code == 422
        # fusion encodes with a dense model: never on the loop (this server has none: its 400)
        r = client.post("/search", json={"text": "a red circle", "fusion": "rrf"})
        assert r.status_code == 400 and "dense index" in r.json()["detail"]
    assert len(pooled) == 1 and pooled[0][0].fusion == "rrf"


def test_a_text_network_searches_in_the_thread_pool(served, pooled):
    service = served[0]  # a tiny STAIR model: its text queries run a network, and batch across threads
    assert not service.quick_text()
    with TestClient(build_app(service)) as client:
        assert client.post("/search", json={"text": "a red dog", "k": 3}).status_code == 200
    assert len(pooled) == 1


def test_costly_searches_go_back_to_the_thread_pool_until_they_are_cheap_again(if_world, pooled):
    model, index_dir = if_world
    service = SearchService(Searcher.open(index_dir, model))
    with TestClient(build_app(service)) as client:
        service._search_cpu = 1.5 * INLINE_CPU_S  # as after searches of a large index
        assert not service.quick_text()
        for _ in range(40):  # each cheap search pulls the running mean down
            assert client.post("/search", json={"text": "a red circle", "k": 3}).status_code == 200
        assert service.quick_text()
    assert 1 <= len(pooled) < 40  # the first ones went to the pool, the later ones ran on the loop


def test_the_table_read_from_a_loaded_model_encodes_as_the_model(if_world):
    model, _ = if_world
    texts = TEXTS + ["circle circle", "zebra", "THE RED Square!"]
    want, got = model.encode_text(texts), TableQueries.from_model(model).encode_text(texts)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.values, want.values)
