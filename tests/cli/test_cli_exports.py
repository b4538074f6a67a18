"""Exports from the command line: `tokenspace export-onnx` writes files that give the model's own
vectors, and what it must refuse (a user's folder, an untrained config) is one error line with nothing
written; `index export --format opensearch` writes the 3.x sparse_vector mapping and the queries as an
_msearch file of neural_sparse / rank_feature bodies that rank the documents as `tokenspace search` does."""
import importlib.util
import json

import numpy as np
import pytest

from tokenspace.index import InvertedIndex
from tokenspace.models.registry import load

needs_onnx = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime")),
                                reason="the `onnx` extra (make install) is not installed")


@needs_onnx
def test_export_onnx_writes_files_that_give_the_models_vectors(world, tmp_path):
    from tokenspace.models.onnx_export import session  # after the skip mark: it needs onnxruntime to run

    r = world.run("export-onnx", world.model, tmp_path / "onnx", "--int8")
    assert r.code == 0, r.err
    assert r.out.startswith("wrote image_encoder.onnx, text_encoder.onnx, image_encoder.int8.onnx, "
                            "text_encoder.int8.onnx to") and "max |ONNX - PyTorch|: image " in r.out
    record = json.loads((tmp_path / "onnx" / "tokenspace_export.json").read_text())
    assert record["format"] == "onnx" and record["checked"]["max_abs_diff"]["text"] <= 1e-4
    model = load(world.model)
    ids, mask = model.tokenize(["a red dog", "a blue car and a green tree"])
    got = session(tmp_path / "onnx" / "text_encoder.onnx").run(
        None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    np.testing.assert_allclose(got, model.encode_text(["a red dog", "a blue car and a green tree"]).to_dense(),
                               atol=1e-4, rtol=0)


@needs_onnx
def test_export_onnx_refusals_are_one_line(world, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep")
    r = world.run("export-onnx", world.model, precious)
    assert r.code == 1 and "not a previous export-onnx export" in r.error_line()
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]
    r = world.run("export-onnx", world.model_config, tmp_path / "o")  # a config: untrained heads, refused
    assert r.code == 1 and "pretrained=False" in r.error_line() and not (tmp_path / "o").exists()
    r = world.run("export-onnx", world.model, tmp_path / "o", "--tol", "0")
    assert r.code == 2 and "--tol: must be a positive finite number" in r.err


def _scores(body: dict, doc: dict) -> float:
    """A document's score under a neural_sparse or linear rank_feature body (their documented meaning:
    tests/index/test_export.py checks the library against it on a larger corpus)."""
    q = body["query"]
    if "neural_sparse" in q:
        return sum(w * doc.get(t, 0.0) for t, w in q["neural_sparse"]["vector"]["query_tokens"].items())
    return sum(c["rank_feature"]["boost"] * doc.get(c["rank_feature"]["field"].split(".", 1)[1], 0.0)
               for c in q["bool"]["should"])


@pytest.mark.parametrize("field, query", [("sparse_vector", "neural_sparse"), ("rank_features", "rank_feature")])
def test_index_export_opensearch_queries_rank_as_search_does(world, tmp_path, field, query):
    queries = tmp_path / "q.txt"
    queries.write_text("a red dog\na blue car\n")
    out = tmp_path / "os"
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", out, "--queries", queries,
                  "--opensearch-field", field, "--opensearch-query", query, "--k", "3")
    assert r.code == 0, r.err
    mapping = json.loads((out / "mapping.json").read_text())
    assert mapping["mappings"]["properties"]["vector"]["type"] == field
    if field == "sparse_vector":
        assert mapping["settings"] == {"index": {"sparse": True}}
        params = mapping["mappings"]["properties"]["vector"]["method"]["parameters"]
        assert 0 < params["quantization_ceiling_search"] <= 1.0 and 0 < params["quantization_ceiling_ingest"] <= 1.0
    lines = (out / "queries.msearch.ndjson").read_text().splitlines()
    assert [json.loads(x) for x in lines[::2]] == [{"index": "tokenspace"}] * 2
    bodies = [json.loads(x) for x in lines[1::2]]
    docs = {}
    for bulk in sorted(out.glob("bulk-*.ndjson")):
        rows = bulk.read_text().splitlines()
        docs.update({json.loads(a)["index"]["_id"]: json.loads(s)["vector"] for a, s in zip(rows[::2], rows[1::2])})
    index = InvertedIndex.load(world.index)
    hits = index.search(load(world.model).encode_text(["a red dog", "a blue car"]), k=3)
    for body, ours in zip(bodies, hits):
        assert body["size"] == 3
        theirs = sorted(docs, key=lambda d: -_scores(body, docs[d]))[:3]
        np.testing.assert_allclose(sorted((_scores(body, docs[d]) for d in theirs), reverse=True),
                                   [h.score for h in ours], rtol=1e-5)


def test_index_export_opensearch_options_are_checked(world, tmp_path):
    r = world.run("index", "export", world.index, "--format", "jsonl", "--out", tmp_path / "d.jsonl",
                  "--opensearch-field", "sparse_vector")
    assert r.code == 1 and "--opensearch-field: only with --format opensearch" in r.error_line()
    q = tmp_path / "q.txt"
    q.write_text("a red dog\n")
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", tmp_path / "os", "--queries", q,
                  "--opensearch-field", "sparse_vector", "--opensearch-query", "rank_feature")
    assert r.code == 1 and "query a sparse_vector field with neural_sparse" in r.error_line()
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", tmp_path / "os", "--k", "5")
    assert r.code == 1 and "give --queries FILE" in r.error_line()
    assert not (tmp_path / "os").exists() and not (tmp_path / "d.jsonl").exists()
