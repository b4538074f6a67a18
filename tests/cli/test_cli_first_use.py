"""What a new user trips on at the command line: each test runs
the real `tokenspace` command on the tiny world of tests/cli/_cli_world.py and failed before its fix."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import pytest

from tokenspace import atomic
from tokenspace.explain.hits import caption
from tokenspace.index import InvertedIndex


def test_index_build_records_a_release_name_as_a_name(world, tmp_path):
    """32.1: `--model NAME` was recorded as <cwd>/NAME, so search without --model failed ("no model at")."""
    shutil.copytree(world.model, world.home / "models" / "tiny-release")  # a release model, by name
    out = tmp_path / "idx"
    r = world.run("index", "build", "--model", "tiny-release", "--data", f"{world.manifest}:test", "--out", out)
    assert r.code == 0, r.err
    assert InvertedIndex.load(out).info["model"] == "tiny-release"
    r = world.run("search", "--index", out, "a red dog", "-k", "2")  # no --model: the recorded name loads
    assert r.code == 0 and "query: a red dog" in r.out, r.err
    r = world.run("index", "export", out, "--out", tmp_path / "docs.jsonl", "--queries", _queries(tmp_path))
    assert r.code == 0, r.err
    # a model folder given by a relative path is recorded as its absolute path
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                  "--out", tmp_path / "idx2")
    assert InvertedIndex.load(tmp_path / "idx2").info["model"] == str(world.model.resolve())


def _queries(tmp_path):
    q = tmp_path / "queries.txt"
    q.write_text("a red dog\na blue car\n")
    return q


def test_index_build_says_how_many_images_it_indexed(world, tmp_path):
    """32.8: it printed the index's statistics as a JSON blob and no "indexed N images" line."""
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test", "--out",
                  tmp_path / "idx")
    assert r.code == 0, r.err
    assert r.out.strip() == f"indexed 3 images into {tmp_path / 'idx'}; " \
                            f"search it: tokenspace search --index {tmp_path / 'idx'} \"a query\""


def test_eval_says_the_direction_of_each_metric(world, tmp_path):
    """32.8: `eval` printed clip_benchmark's bare keys (image_retrieval_recall@1: which way?)."""
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", tmp_path / "m.json")
    assert r.code == 0, r.err
    assert "text→image recall@1" in r.out and "image→text recall@10" in r.out
    assert "image_retrieval" not in r.out
    (metrics,) = json.loads((tmp_path / "m.json").read_text()).values()
    assert "image_retrieval_recall@1" in metrics  # the file keeps the names other tools read


def test_captions_are_cut_at_a_word_with_an_ellipsis():
    """32.8: a hit's caption was cut at 60 characters, mid-word, with nothing saying so."""
    long = "a red dog sitting on the beach beside a blue car under a green tree at noon"
    assert caption(long) == "a red dog sitting on the beach beside a blue car under a …"
    assert caption("a red dog") == "a red dog"
    assert caption("x" * 80) == "x" * 59 + "…"


def _shard_with_a_corrupt_image(world, path):
    """The world's shard plus one sample whose png is not an image."""
    with tarfile.open(world.shards) as src, tarfile.open(path, "w") as tar:
        for m in src.getmembers():
            tar.addfile(m, src.extractfile(m))
        for name, data in (("corrupt.png", b"\x89PNG\r\n\x1a\n not a png"), ("corrupt.txt", b"a red dog")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_encode_shows_progress_and_says_done(world, tmp_path):
    """32.4 / 34.5: no progress at all, and a complete run (one that skipped a corrupt image too) ended
    with "rerun the same command to resume"."""
    shard = _shard_with_a_corrupt_image(world, tmp_path / "shard.tar")
    index = tmp_path / "idx"
    r = world.run("encode", "--model", world.model, "--shards", shard, "--index", index, "--part-size", "5",
                  "--tower", "torch", "--workers", "0")
    assert r.code == 0, r.err
    assert "13/13" in r.err  # tqdm's bar, on stderr
    last = r.out.strip().splitlines()[-1]
    assert last == f"indexed 12 of 13 samples into {index} (1 unreadable images skipped): done", r.out
    assert "rerun" not in r.out


def test_encode_refuses_an_index_path_that_is_a_file_before_encoding(world, tmp_path):
    """34.5: it encoded a part first, left a .parts folder, then failed with "[Errno 17] File exists"."""
    index = tmp_path / "notes.txt"
    index.write_text("my notes")
    r = world.run("encode", "--model", world.model, "--shards", world.shards, "--index", index)
    assert r.code == 1 and "is a file" in r.error_line() and str(index) in r.error_line(), r.err
    assert not (tmp_path / "notes.txt.parts").exists() and index.read_text() == "my notes"
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"x")
    r = world.run("encode", "--model", world.model, "--shards", world.shards, "--index", folder)
    assert r.code == 1 and "holds no index" in r.error_line(), r.err
    assert sorted(p.name for p in folder.iterdir()) == ["photo.jpg"]


def test_scratch_folders_go_on_every_exit_and_stale_ones_are_swept(tmp_path, monkeypatch):
    """34.5: each encode killed after its ONNX export left a 13 MB /tmp/tokenspace-onnx-* folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    stale = tmp_path / f"tokenspace-onnx-{dead.pid}-abc"
    stale.mkdir()
    (stale / "image_tower.onnx").write_bytes(b"x" * 100)
    live = tmp_path / f"tokenspace-onnx-{os.getpid()}-def"  # this process's: kept
    other = tmp_path / "tokenspace-onnx-bench-abc"  # not a name scratch_folder makes: kept
    for folder in (live, other):
        folder.mkdir()
    with pytest.raises(RuntimeError):
        with atomic.scratch_folder("tokenspace-onnx-") as tmp:
            assert tmp.parent == tmp_path and tmp.is_dir()
            raise RuntimeError("a failed export")
    assert not tmp.exists() and not stale.exists() and live.exists() and other.exists()


def test_index_export_replaces_an_existing_file_only_with_overwrite(world, tmp_path):
    """34.3: `index export --out FILE` overwrote a user's file silently (exit 0)."""
    out = tmp_path / "notes.jsonl"
    out.write_text("my notes\n")
    r = world.run("index", "export", world.index, "--out", out)
    assert r.code == 1 and "--overwrite" in r.error_line() and out.read_text() == "my notes\n", r.err
    queries = _queries(tmp_path)
    (tmp_path / "queries.jsonl").write_text("mine\n")  # the default query file beside --out
    r = world.run("index", "export", world.index, "--out", tmp_path / "new.jsonl", "--queries", queries)
    assert r.code == 1 and "the query file" in r.error_line() and not (tmp_path / "new.jsonl").exists(), r.err
    r = world.run("index", "export", world.index, "--out", out, "--overwrite")
    assert r.code == 0 and len(out.read_text().splitlines()) == 12, r.err
    # OpenSearch: a folder of other files is never filled; a previous export is replaced with --overwrite
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.txt").write_text("x")
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", mine, "--overwrite")
    assert r.code == 1 and "holds no OpenSearch export" in r.error_line(), r.err
    bulk = tmp_path / "bulk"
    assert world.run("index", "export", world.index, "--format", "opensearch", "--out", bulk).code == 0
    (bulk / "bulk-00099.ndjson").write_text("{}\n")  # as if a bigger export had been there
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", bulk)
    assert r.code == 1 and "--overwrite" in r.error_line(), r.err
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", bulk, "--overwrite")
    assert r.code == 0 and not (bulk / "bulk-00099.ndjson").exists(), r.err
    # an OpenSearch query file outside --out is a user's file like any other (it was written over)
    mine = tmp_path / "my-queries.ndjson"
    mine.write_text("mine\n")
    r = world.run("index", "export", world.index, "--format", "opensearch", "--out", tmp_path / "os2",
                  "--queries", queries, "--queries-out", mine)
    assert r.code == 1 and "the query file" in r.error_line() and mine.read_text() == "mine\n", r.err
    assert not (tmp_path / "os2").exists()


def test_eval_json_replaces_an_existing_file_only_with_overwrite(world, tmp_path):
    """34.3: the same for `eval --json`, refused before the evaluation."""
    out = tmp_path / "m.json"
    out.write_text("mine")
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", out)
    assert r.code == 1 and "--overwrite" in r.error_line() and out.read_text() == "mine", r.err
    r = world.run("eval", "--model", world.model, "--data", f"{world.manifest}:test", "--json", out, "--overwrite")
    assert r.code == 0 and json.loads(out.read_text()), r.err


def test_options_that_would_do_nothing_are_refused(world, tmp_path):
    """34.4: `--queries-out` without `--queries` and `search --where ""` were silently ignored."""
    r = world.run("index", "export", world.index, "--out", tmp_path / "d.jsonl", "--queries-out", tmp_path / "q")
    assert r.code == 2 and "--queries-out" in r.err and not (tmp_path / "d.jsonl").exists(), r.err
    for where in ("", "   "):
        r = world.run("search", "--index", world.index, "a red dog", "--where", where)
        assert r.code == 2 and "--where is empty" in r.err, r.err


def test_errors_name_what_is_wrong(world, tmp_path):
    """34.6: a non-UTF-8 --queries file was not named; a folder with another tool's MANIFEST.json was
    "unreadable manifest ('manifest_crc32')"; `serve --host 999.1.1.1` said "pick another --port"."""
    queries = tmp_path / "latin1.txt"
    queries.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    r = world.run("index", "export", world.index, "--out", tmp_path / "d.jsonl", "--queries", queries)
    assert r.code == 1 and str(queries) in r.error_line() and "UTF-8" in r.error_line(), r.err
    other = tmp_path / "other"
    other.mkdir()
    (other / "MANIFEST.json").write_text('{"name": "another tool", "files": []}')
    r = world.run("search", "--index", other, "--model", world.model, "a red dog")
    assert r.code == 1 and "not a tokenspace" in r.error_line(), r.err
    r = world.run("serve", "--model", world.model, "--index", world.index, "--host", "999.1.1.1")
    assert r.code == 1 and "--host 999.1.1.1" in r.error_line() and "--port" not in r.error_line(), r.err


def test_export_st_refuses_another_family_before_loading_the_model(world, tmp_path):
    """export-st loaded the whole model (24 s for the release) before saying a fused model has no MLM."""
    folder = tmp_path / "dense"
    shutil.copytree(world.model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "family": "dense"}))
    (folder / "model.safetensors").write_bytes(b"not weights: loading them would fail otherwise")
    r = world.run("export-st", folder, tmp_path / "st")
    assert r.code == 1 and "'dense' model's text side is not an MLM" in r.error_line(), r.err
