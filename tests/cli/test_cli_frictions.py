"""What a new user trips on, each refused or explained before it costs anything: --tower onnx
with a model it cannot run (before any image is decoded, in the command line's words), a query longer
than the text tower reads (runs, with a one-line note), a query of function words alone (no hits and a
note), the tensor model.preprocess returns (encode_image takes it)."""
from __future__ import annotations

import json

import pytest
import torch

from tokenspace.models.dual import DualEncoder


def test_tower_onnx_on_a_model_of_several_sizes_is_refused_before_any_image(world, tmp_path, monkeypatch):
    monkeypatch.setattr(DualEncoder, "packed_sizes", (16, 32))  # as the fused release model: two sizes
    out = tmp_path / "idx"
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:train", "--out", out,
                  "--tower", "onnx")
    line = r.error_line()
    assert r.code == 1 and "--tower onnx: the ONNX image tower cannot run this model" in line, r.err
    assert "16, 32 pixels" in line and "give --tower torch" in line and "tower='" not in line
    assert not (tmp_path / "idx.parts").exists() and not out.exists()  # nothing encoded, nothing written
    r = world.run("encode", "--model", world.model, "--shards", world.shards, "--index", tmp_path / "enc",
                  "--tower", "onnx")
    assert r.code == 1 and "--tower onnx: the ONNX image tower cannot run" in r.error_line(), r.err
    assert not (tmp_path / "enc.parts").exists()


def test_tower_onnx_without_onnxruntime_is_refused_before_any_image(world, tmp_path, monkeypatch):
    monkeypatch.setattr("tokenspace.encode._onnxruntime_missing", lambda: "onnxruntime")
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:train",
                  "--out", tmp_path / "idx", "--tower", "onnx")
    assert r.code == 1 and "pip install 'tokenspace[onnx]'" in r.error_line(), r.err
    assert not (tmp_path / "idx.parts").exists()


def test_a_long_query_runs_with_a_one_line_note(world):
    long = " ".join(["a red dog and a blue cat"] * 8)  # 56 pieces; the tiny tower reads 14
    r = world.run("search", "--index", world.index, long, "-k", "2")
    assert r.code == 0 and r.err == "", r.err
    notes = [ln for ln in r.out.splitlines() if "note:" in ln]
    assert len(notes) == 1 and "56 word pieces long" in notes[0] and "reads the first 14" in notes[0], r.out
    assert r.out.lstrip().startswith("1. ")  # still searched
    r = world.run("search", "--index", world.index, "a red dog", "-k", "2")
    assert "note:" not in r.out


def test_a_query_of_function_words_gets_no_hits_and_a_note(world):
    r = world.run("search", "--index", world.index, "the", "-k", "3")
    assert r.code == 0 and r.err == "", r.err
    assert "no hits" in r.out and "note: the query has no word that names anything" in r.out, r.out
    r = world.run("search", "--index", world.index, "a and", "--json")
    row = json.loads(r.out)
    assert row["hits"] == [] and "names anything" in row["notes"][0]


def test_encode_image_takes_what_preprocess_returns(world):
    import tokenspace

    model = tokenspace.load(str(world.model))
    paths = [str(p) for p in world.images[:3]]
    want = model.encode_image(paths)
    pixels = model.preprocess(paths)  # [3, 3, H, W]
    for given in (pixels, list(pixels), [paths[0], pixels[1], paths[2]]):
        got = model.encode_image(given)
        assert len(got) == 3 and (got.indptr == want.indptr).all() and (got.indices == want.indices).all()
        assert abs(got.values - want.values).max() < 1e-6
    one = model.encode_image(pixels[0])  # one image, as open_clip's preprocess(img) returns it
    assert len(one) == 1 and (one.indices == want.indices[want.indptr[0]:want.indptr[1]]).all()
    with pytest.raises(ValueError, match=r"model's own preprocessed pixels.*got \[2, 3, 8, 8\]"):
        model.encode_image(torch.zeros(2, 3, 8, 8))


def test_the_library_and_the_service_give_the_same_notes(world):
    from fastapi.testclient import TestClient

    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import create_app

    searcher = Searcher.open(world.index)
    res = searcher.search("the", 3)
    assert res.hits == [] and len(res.notes) == 1 and "names anything" in res.notes[0]
    assert searcher.search("a red dog", 3).notes == ()
    with TestClient(create_app(searcher)) as client:
        body = client.post("/search", json={"text": "the", "k": 3}).json()
        assert body["hits"] == [] and body["notes"] == list(res.notes)
        long = client.post("/search", json={"text": " ".join(["a red dog"] * 10), "k": 2}).json()
        assert len(long["hits"]) == 2 and "reads the first 14" in long["notes"][0]
