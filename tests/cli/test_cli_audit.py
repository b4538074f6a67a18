"""Bad CLI input found by an audit on 2026-11-26: each case now loses nothing and says what is wrong in
one line (world.run fails the test on any traceback)."""
from __future__ import annotations

import json
import shutil

import pytest

from tokenspace.index import InvertedIndex


def test_index_build_never_replaces_or_mixes_into_a_folder_by_accident(world, tmp_path):
    target = tmp_path / "idx"
    shutil.copytree(world.index, target)
    before = len(InvertedIndex.load(target))
    args = ("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out")
    r = world.run(*args, target)
    assert r.code == 1 and "already holds an index: pass --overwrite" in r.error_line()
    assert len(InvertedIndex.load(target)) == before  # untouched
    r = world.run(*args, target, "--overwrite")
    assert r.code == 0, r.err
    assert len(InvertedIndex.load(target)) == 3  # the test split only
    other = tmp_path / "notes"
    other.mkdir()
    (other / "thesis.txt").write_text("keep me")
    r = world.run(*args, other, "--overwrite")
    assert r.code == 1 and "not empty and holds no index" in r.error_line()
    assert (other / "thesis.txt").read_text() == "keep me" and not (other / "MANIFEST.json").exists()


def test_index_export_never_writes_into_an_index_folder(world, tmp_path):
    target = tmp_path / "idx"
    shutil.copytree(world.index, target)
    for out in (target / "MANIFEST.json", target, target / "docs.jsonl"):
        r = world.run("index", "export", target, "--out", out)
        assert r.code == 1 and "is in the index folder" in r.error_line(), r.err
    assert len(InvertedIndex.load(target)) > 0
    r = world.run("index", "export", target, "--out", tmp_path)  # a folder where a file is needed
    assert r.code == 1 and "is a folder; the jsonl format writes one file" in r.error_line()


def test_export_scale_that_would_overflow_is_refused(world, tmp_path):
    r = world.run("index", "export", world.index, "--format", "jsonl-int", "--scale", "1e300",
                  "--out", tmp_path / "a.jsonl")
    assert r.code == 1 and "use a smaller scale" in r.error_line()
    assert not (tmp_path / "a.jsonl").exists()


@pytest.mark.parametrize("limit", ["0", "-1", "x"])
def test_data_spec_limit_must_be_a_positive_integer(world, limit):
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test:{limit}")
    assert r.code == 1 and f"LIMIT must be a positive integer, got '{limit}'" in r.error_line()


def test_search_refuses_text_and_image_together_and_non_utf8(world):
    r = world.run("search", "--index", world.index, "--image", world.images[0], "green tree")
    assert r.code == 2 and "not both" in r.err
    r = world.run("search", "--index", world.index, "red \udcff")  # what argv holds for the byte 0xff
    assert r.code == 2 and "not valid UTF-8 text" in r.err


def test_decode_takes_images_and_texts_together(world):
    r = world.run("decode", "--model", world.model, "--image", world.images[0], "--text", "a red dog", "-k", "2")
    assert r.code == 0, r.err
    assert f"{world.images[0]}:" in r.out and "a red dog:" in r.out


@pytest.mark.parametrize("body,says", [
    ("", "not readable JSON"),
    ("[1, 2]", "expected {\"model\""),
    ('{"model": 5, "items": {}}', "expected {\"model\""),
    ('{"items": {"a": "x"}}', "expected {\"model\""),
])
def test_damaged_collection_json_is_named(world, tmp_path, body, says):
    target = tmp_path / "idx"
    shutil.copytree(world.index, target)
    (target / "collection.json").write_text(body)
    r = world.run("search", "--index", target, "--model", world.model, "red dog")
    assert r.code == 1 and str(target / "collection.json") in r.error_line() and says in r.error_line()


def test_index_keeps_images_whose_caption_is_empty(world, tmp_path):
    rows = [json.loads(line) for line in world.manifest.read_text().splitlines()]
    test = [r for r in rows if r["split"] == "test"]
    test[0]["text"] = "   "
    for r in test:  # image paths are relative to the manifest's folder
        r["image"] = str(world.manifest.parent / r["image"])
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in test))
    r = world.run("index", "build", "--model", world.model, "--data", f"{manifest}:test", "--out", tmp_path / "i")
    assert r.code == 0, r.err
    assert len(InvertedIndex.load(tmp_path / "i")) == len(test)


def test_index_argument_that_is_a_file(world, tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    r = world.run("index", "stats", f)
    assert r.code == 1 and "a file, not a folder" in r.error_line()


def test_unwritable_outputs_and_a_file_as_model_are_named_before_any_work(world, tmp_path):
    f = tmp_path / "model.txt"  # a file: nothing can be written below it
    f.write_text("x")
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", f / "m.json")
    assert r.code == 1 and f"--json {f / 'm.json'}: cannot write in {f}" in r.error_line()
    assert "image_retrieval" not in r.out  # refused before evaluating
    r = world.run("index", "export", world.index, "--out", f / "docs.jsonl")
    assert r.code == 1 and f"--out {f / 'docs.jsonl'}: {f} is a file, not a folder" in r.error_line()
    r = world.run("search", "--index", world.index, "--model", f, "red dog")
    assert r.code == 1 and "is a file; give a model folder" in r.error_line()
