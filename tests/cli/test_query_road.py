"""One query road, one ranking: on a tiny index built in code (rows that differ, a hub prior, a stored
ranking), any ranking (0 included: off, never "the stored value") gives the same top-k and scores through
the command (`tokenspace search`, in-process), the HTTP service (a TestClient), the library's Searcher and
a brute-force scipy re-rank written here from the formulas; a Qdrant export searched in qdrant-client's
local mode gives the same top-k wherever Qdrant can express the ranking.

What Qdrant cannot express: the hub prior (a per-image penalty subtracted from the dot product; a sparse
query has no per-point term), so only rankings with prior weight 0 are compared there. Everything else
rides in the query vector the Searcher scores (``Searcher.query_vector``: shaped, steered, weighed by the
index's idf), so the export needs no IDF modifier: that is idf as the index had it when exported.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the dev extra")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

QUERIES = ["a red dog", "a blue car", "green tree", "a cat and a heart", "broken heart"]
STORED = {"idf": 0.5, "prior_weight": 0.5, "expansion": 1.0, "expansion_floor": 0.0}  # the index's default
HUB_K = 3


@pytest.fixture(scope="module")
def road(world, tmp_path_factory):
    """(index folder, model, dense rows, bank rows, ids): 24 images whose rows are seeded random weights
    over the tiny vocabulary's words (an untrained model's image rows are nearly all alike: ties), with a
    hub prior from a bank of the model's own caption vectors and a stored ranking."""
    from tokenspace.index import InvertedIndex
    from tokenspace.models.registry import load
    from tokenspace.sparse import SparseBatch

    model = load(world.model)
    words = [t for t in model.vocab.tokens if not t.startswith("[")]
    rng = np.random.default_rng(7)
    rows, ids = [], []
    for i in range(24):
        chosen = rng.choice(words, size=int(rng.integers(2, 7)), replace=False)
        w = rng.uniform(0.1, 1.0, len(chosen))
        rows.append(dict(zip(chosen, (w / np.linalg.norm(w)).tolist())))
        ids.append(f"img-{i:02d}")
    docs = SparseBatch.from_dicts(rows, vocab=model.vocab)
    bank = model.encode_text(["a red heart", "a blue dog", "a green car", "a tree", "a cat", "red and blue"])
    index = InvertedIndex.build(docs, ids, metadata=[{"caption": " ".join(r)} for r in rows])
    index.set_hub_prior(bank, k=HUB_K, weight=STORED["prior_weight"])
    index.info = {"model": str(world.model), "ranking": STORED}
    out = tmp_path_factory.mktemp("road") / "index"
    index.save(out)
    return out, model, docs.to_scipy().toarray().astype(np.float64), bank.to_scipy().toarray(), ids


@pytest.fixture(scope="module")
def opened(road):
    """The library's session and an HTTP client over a service wrapping one, both over the saved index."""
    from fastapi.testclient import TestClient

    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import create_app

    searcher = Searcher.open(road[0])
    with TestClient(create_app(Searcher.open(road[0]))) as client:
        yield searcher, client


def brute_force(road, text: str, k: int, ranking: dict) -> list[tuple[str, float]]:
    """The ranking from its formulas, in float64 with scipy/numpy: the shaped query (the model's own
    shaping, explain/ranking.py) times BM25's idf ** idf over the images, dot each image, minus the prior
    weight x the image's hubness (the mean of its HUB_K best dot products with the bank); images sharing
    no token with the query are never hits."""
    from scipy import sparse

    from tokenspace.explain.ranking import Ranking, encode_queries

    _, model, docs, bank, ids = road
    r = Ranking(**ranking)
    q = encode_queries(model, [text], r).to_scipy().toarray()[0].astype(np.float64)
    df = (docs > 0).sum(axis=0)
    n = len(docs)
    q = q * np.log1p((n - df + 0.5) / (df + 0.5)) ** r.idf
    dots = sparse.csr_matrix(docs) @ q
    hub = np.sort(docs @ bank.T, axis=1)[:, ::-1][:, :HUB_K].mean(axis=1)
    score = dots - r.prior_weight * hub
    order = [i for i in np.argsort(-score, kind="stable") if dots[i] > 0][:k]
    return [(ids[i], float(score[i])) for i in order]


def cli_hits(world, index, text: str, k: int, ranking: dict) -> list[tuple[str, float]]:
    flags = [a for f, v in ranking.items() for a in (f"--{f.replace('_', '-')}", str(v))]
    ran = world.run("search", "--index", index, text, "-k", str(k), *flags)
    assert ran.code == 0, ran.err
    return [(i, float(s)) for s, i in re.findall(r"^\s+\d+\.\s+(\S+)\s+(\S+)", ran.out, flags=re.M)]


def same(got, want, tol: float) -> None:
    """The same ranking: the same scores rank by rank, and the same id at each rank (two images whose
    scores tie within ``tol`` may come in either order)."""
    assert len(got) == len(want), (got, want)
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=tol), (got, want)
    for r, ((gi, gs), (wi, ws)) in enumerate(zip(got, want)):
        if gi != wi:
            tied = {i for i, s in want if abs(s - ws) <= 2 * tol}
            assert gi in tied, (r, got, want)


rankings = st.fixed_dictionaries({
    "idf": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    "prior_weight": st.sampled_from([0.0, 0.25, 1.0]),
    "expansion": st.sampled_from([1.0, 0.0, 0.5, 2.0]),
    "expansion_floor": st.sampled_from([0.0, 0.2]),
})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranking=rankings, text=st.sampled_from(QUERIES), k=st.integers(1, 8))
def test_every_caller_ranks_as_the_formulas_do(world, road, opened, ranking, text, k):
    searcher, client = opened
    want = brute_force(road, text, k, ranking)
    lib = [(h.id, h.score) for h in searcher.search(text, k, **ranking).hits]
    same(lib, want, 1e-5)
    body = client.post("/search", json={"text": text, "k": k, **ranking})
    assert body.status_code == 200, body.text
    same([(h["id"], h["score"]) for h in body.json()["hits"]], want, 1e-5)
    same(cli_hits(world, road[0], text, k, ranking), want, 1e-4)  # printed to 4 decimals


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranking=rankings, text=st.sampled_from(QUERIES), k=st.integers(1, 8))
def test_a_qdrant_export_ranks_as_the_searcher_wherever_qdrant_can(road, opened, qdrant_road, ranking, text, k):
    from tokenspace.index import qdrant

    searcher, _ = opened
    ranking = {**ranking, "prior_weight": 0.0}  # Qdrant has no per-point penalty: the prior stays out
    want = [(h.id, h.score) for h in searcher.search(text, k, **ranking).hits]
    q = searcher.query_vector(text, searcher.resolve(**ranking))
    got = [(h.id, h.score) for h in qdrant.search(qdrant_road, q, k=k, collection="road")[0]]
    same(got, want, 1e-5)


@pytest.fixture(scope="module")
def qdrant_road(road):
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is in the dev extra")
    from tokenspace.index import InvertedIndex, qdrant

    index = InvertedIndex.load(road[0])
    client = qdrant_client.QdrantClient(":memory:")
    qdrant.upload(client, index.get(road[4]), road[4], collection="road")
    return client


def test_prior_weight_0_turns_the_prior_off_everywhere(world, road, opened):
    """`--prior-weight 0` (and the HTTP field, and the library's keyword) gave the scores of the index's
    stored weight 0.5: 0 fell back to it on its way to the index. Now it is the plain dot product, as the
    index itself gives with prior_weight=0."""
    from tokenspace.index import InvertedIndex

    searcher, client = opened
    index = InvertedIndex.load(road[0])
    q = searcher.query_vector("a red dog", searcher.resolve(prior_weight=0.0))
    library = [(h.id, float(h.score)) for h in index.search(q, k=5, prior_weight=0)[0]]
    stored = cli_hits(world, road[0], "a red dog", 5, {})
    off = cli_hits(world, road[0], "a red dog", 5, {"prior_weight": 0})
    assert [s for _, s in off] != pytest.approx([s for _, s in stored], abs=1e-3)  # the scores change
    same(off, library, 1e-4)
    http = client.post("/search", json={"text": "a red dog", "k": 5, "prior_weight": 0}).json()["hits"]
    same([(h["id"], h["score"]) for h in http], library, 1e-5)
    assert all(h["hub_penalty"] == 0 for h in http)
    same([(h.id, h.score) for h in searcher.search("a red dog", 5, prior_weight=0).hits], library, 1e-5)


def test_index_export_queries_are_what_search_scores(world, road, tmp_path):
    """`index export --format qdrant --queries` writes the vectors `search` scores (the index's stored
    ranking: here idf 0.5), so Qdrant answers as `search --prior-weight 0` does (it overlapped on 7 of
    10 when the export wrote the model's unshaped, unweighted vectors)."""
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is in the dev extra")
    import json

    from tokenspace.index import qdrant
    from tokenspace.sparse import SparseBatch

    queries = tmp_path / "q.txt"
    queries.write_text("\n".join(QUERIES) + "\n")
    ran = world.run("index", "export", road[0], "--format", "qdrant", "--out", tmp_path / "qd", "--queries", queries,
                    "--k", "5")
    assert ran.code == 0 and "idf 0.5" in ran.out, ran.err
    client = qdrant_client.QdrantClient(":memory:")
    qdrant.upload_folder(client, tmp_path / "qd", "c")
    searches = json.loads((tmp_path / "qd" / "queries.json").read_text())["searches"]
    q = SparseBatch.from_dicts([dict(zip(s["query"]["indices"], s["query"]["values"])) for s in searches],
                               dim=len(road[1].vocab))
    for text, got in zip(QUERIES, qdrant.search(client, q, k=5, collection="c")):
        same([(h.id, h.score) for h in got], cli_hits(world, road[0], text, 5, {"prior_weight": 0}), 1e-4)
