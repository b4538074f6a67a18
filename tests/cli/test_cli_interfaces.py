"""`tokenspace` as a subprocess: --device, export-st and the export query files."""
from __future__ import annotations

import json

import pytest


def test_device_flag_on_eval(world):
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--device", "cpu")
    assert r.code == 0, r.err
    assert "text→image recall@1" in r.out


@pytest.mark.parametrize("cmd,device", [
    (["eval", "--data", "x:test"], "gpu7"),
    (["eval", "--data", "x:test"], "cuda:9"),
    (["index", "build", "--data", "x:test", "--out", "o"], "gpu7"),
    (["encode", "--shards", "SHARDS", "--index", "i"], "gpu7"),
    (["serve", "--index", "i"], "gpu7"),
])
def test_bad_device_is_one_line(world, tmp_path, cmd, device):
    import torch

    if device == "cuda:9" and torch.cuda.device_count() > 9:  # pragma: no cover - a very large machine
        pytest.skip("cuda:9 exists here")
    args = [str(world.shards) if a == "SHARDS" else str(tmp_path / a) if a in ("o", "i") else a for a in cmd]
    pos = 2 if cmd[0] == "index" else 1
    r = world.run(*args[:pos], "--model", world.model, *args[pos:], "--device", device)
    assert r.code == 1
    line = r.error_line()
    expected = "not a torch device" if device == "gpu7" else ("not available", "CUDA device")
    assert f"--device {device}" in line and any(m in line for m in (expected if isinstance(expected, tuple)
                                                                     else (expected,)))


def test_export_st_writes_a_sparse_encoder_folder(world, tmp_path):
    r = world.run("export-st", world.model, tmp_path / "st")
    assert r.code == 0, r.err
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[1] for m in modules] == ["MLMTransformer", "SpladePooling", "Normalize"]
    st = pytest.importorskip("sentence_transformers")
    vec = st.SparseEncoder(str(tmp_path / "st"), device="cpu").encode(["a red dog"], convert_to_tensor=True)
    assert vec.to_dense().shape[1] == len((world.model / "vocab.txt").read_text().splitlines())
    r = world.run("export-st", world.model_config, tmp_path / "st2")  # a config: untrained heads, refused
    assert r.code == 1 and "pretrained=False" in r.error_line()


def test_index_export_writes_the_query_file_beside(world, tmp_path):
    queries = tmp_path / "q.txt"
    queries.write_text("a red dog\n\na blue car\n")
    r = world.run("index", "export", world.index, "--format", "jsonl", "--out", tmp_path / "s" / "docs.jsonl",
                  "--queries", queries)
    assert r.code == 0, r.err
    lines = [json.loads(x) for x in (tmp_path / "s" / "queries.jsonl").read_text().splitlines()]
    assert [q["id"] for q in lines] == ["q1", "q2"] and all(q["vector"] for q in lines)
    r = world.run("index", "export", world.index, "--format", "jsonl-int", "--out",
                  tmp_path / "a" / "collection" / "docs.jsonl", "--queries", queries, "--scale", "10")
    assert r.code == 0, r.err
    assert [p.name for p in (tmp_path / "a" / "collection").iterdir()] == ["docs.jsonl"]  # Anserini reads all
    tsv = (tmp_path / "a" / "queries.tsv").read_text().splitlines()
    assert [t.split("\t")[0] for t in tsv] == ["q1", "q2"] and all(t.split("\t")[1] for t in tsv)
    r = world.run("index", "export", world.index, "--format", "jsonl", "--out", tmp_path / "s" / "docs.jsonl",
                  "--queries", queries, "--queries-out", tmp_path / "elsewhere" / "q.jsonl", "--overwrite")
    assert r.code == 0 and (tmp_path / "elsewhere" / "q.jsonl").exists()
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", tmp_path / "o",
                  "--queries", queries)  # an _msearch file in the export (tests/cli/test_cli_exports.py)
    assert r.code == 0 and len((tmp_path / "o" / "queries.msearch.ndjson").read_text().splitlines()) == 4
