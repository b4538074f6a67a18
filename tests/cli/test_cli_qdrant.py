"""`tokenspace index export --format qdrant`: the folder (collection, point batches, a batch query body)
loaded into qdrant-client's embedded local mode answers the queries with `tokenspace search`'s top hits
(the plain dot product; with --qdrant-idf, search's idf 1), and its options are checked."""
import json

import pytest

from tokenspace.index import InvertedIndex, qdrant
from tokenspace.models.registry import load
from tokenspace.sparse import SparseBatch


@pytest.mark.parametrize("idf", [False, True])
def test_index_export_qdrant_ranks_as_search_does(world, tmp_path, idf):
    qdrant_client = pytest.importorskip("qdrant_client", reason="qdrant-client is in the dev extra")
    queries = tmp_path / "q.txt"
    queries.write_text("a red dog\na blue car\n")
    out = tmp_path / "qd"
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", out, "--queries", queries,
                  "--k", "3", "--qdrant-vector", "words", *(["--qdrant-idf"] if idf else []))
    assert r.code == 0, r.err
    assert json.loads((out / "collection.json").read_text()) == {
        "sparse_vectors": {"words": {"modifier": "idf"} if idf else {}}}
    searches = json.loads((out / "queries.json").read_text())["searches"]
    assert [s["limit"] for s in searches] == [3, 3] and {s["using"] for s in searches} == {"words"}
    client = qdrant_client.QdrantClient(":memory:")
    index = InvertedIndex.load(world.index)
    assert qdrant.upload_folder(client, out, "c") == len(index)
    q = SparseBatch.from_dicts([dict(zip(s["query"]["indices"], s["query"]["values"])) for s in searches],
                               dim=index.dim)
    want = index.search(load(world.model).encode_text(["a red dog", "a blue car"]), k=3, idf=float(idf),
                        prior_weight=0.0)
    got = qdrant.search(client, q, k=3, collection="c", vector_name="words")
    assert [[h.id for h in g] for g in got] == [[h.id for h in w] for w in want]


def test_index_export_qdrant_options_are_checked(world, tmp_path):
    r = world.run("index", "export", world.index, "--format", "jsonl", "--out", tmp_path / "d.jsonl", "--qdrant-idf")
    assert r.code == 1 and "--qdrant-idf: only with --format qdrant" in r.error_line()
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", tmp_path / "qd", "--k", "5")
    assert r.code == 1 and "give --queries FILE" in r.error_line()
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", tmp_path / "qd",
                  "--qdrant-vector", "a/b")
    assert r.code == 1 and "--qdrant-vector" in r.error_line()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", precious)
    assert r.code == 1 and "holds no Qdrant export" in r.error_line()
    assert not (tmp_path / "qd").exists() and not (tmp_path / "d.jsonl").exists()
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", tmp_path / "qd")
    assert r.code == 0, r.err
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", tmp_path / "qd")
    assert r.code == 1 and "already holds a Qdrant export: pass --overwrite" in r.error_line()
    r = world.run("index", "export", world.index, "--format", "qdrant", "--out", tmp_path / "qd", "--overwrite")
    assert r.code == 0, r.err
