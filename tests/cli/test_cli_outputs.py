"""One output rule for every command that writes (tokenspace/outputs.py): a folder holding an index, a
run, shards or the user's own files is refused unless it is the command's own resumable state; and an
option that would do nothing is refused, never dropped. Each case is one line and exit 1 (2 for a usage
error), before any model loads, with the folder left as it was. In-process (``cli.main``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary


def _index(folder: Path) -> Path:
    vocab = Vocabulary(list(SPECIAL_TOKENS) + ["a", "red", "dog"], name="tiny")
    rows = [{"red": 1.0, "dog": 0.4}, {"a": 0.3, "red": 0.2}]
    InvertedIndex.build(SparseBatch.from_dicts(rows, vocab=vocab), ["d1", "d2"]).save(folder)
    return folder


@pytest.fixture
def places(tmp_path):
    """Folders of every kind: an index (as `index build` leaves it: no parts), a run, shards, the user's."""
    idx = _index(tmp_path / "idx")
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text('{"step": 1}\n')
    (run / "recipe.json").write_text("{}")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "shard-000000.tar").write_bytes(b"\0" * 1024)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("my own file")
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    return {"idx": idx, "run": run, "shards": shards, "user": user, "imgs": imgs}


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(cli, places, args, expect: str, code: int = 1):
    before = {k: snapshot(v) for k, v in places.items()}
    got, line = cli(*args)
    assert got == code and expect in line, (got, line)
    assert {k: snapshot(v) for k, v in places.items()} == before  # nothing written anywhere


# ------------------------------------------------------------------------------------------- train
def test_train_resume_into_an_index_folder_is_refused(cli, places):
    _refused(cli, places, ["train", "--recipe", "stair-tiny", "--out", places["idx"], "--resume"],
             "already holds an index")


def test_train_into_the_users_folder_is_refused(cli, places):
    _refused(cli, places, ["train", "--recipe", "stair-tiny", "--out", places["user"]],
             "holds no training run")


@pytest.mark.parametrize("where", ["shards", "inside-index"])
def test_train_into_shards_or_inside_an_index_is_refused(cli, places, where):
    out = places["shards"] if where == "shards" else places["idx"] / "run"
    _refused(cli, places, ["train", "--recipe", "stair-tiny", "--out", out],
             "already holds shards" if where == "shards" else "is in the index folder")


# ---------------------------------------------------------------------------------------- sparsify
@pytest.mark.parametrize("what", ["idx", "shards", "user"])
def test_sparsify_into_another_folder_is_refused(cli, places, what):
    _refused(cli, places, ["sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", places[what],
                           "--resume"], "holds no training run" if what == "user" else "already holds")


# ------------------------------------------------------------------------------------------ shards
def test_shards_into_an_index_folder_is_refused(cli, places):
    _refused(cli, places, ["shards", "--images", places["imgs"], "--out", places["idx"]], "already holds an index")


@pytest.mark.parametrize("what,expect", [("run", "already holds a training run"), ("user", "is a folder that is not empty"),
                                         ("shards", "already holds shards")])
def test_shards_into_another_folder_is_refused(cli, places, what, expect):
    _refused(cli, places, ["shards", "--images", places["imgs"], "--out", places[what]], expect)


def test_shards_inside_an_index_folder_is_refused(cli, places):
    _refused(cli, places, ["shards", "--images", places["imgs"], "--out", places["idx"] / "shards"],
             "is in the index folder")


# ------------------------------------------------------------------------------------------ encode
def test_encode_into_an_index_built_by_index_build_is_refused(cli, places, tmp_path):
    """The docs say such a rerun is refused: the index has no encode record beside it."""
    _refused(cli, places, ["encode", "--model", "m", "--shards", tmp_path / "none.tar", "--index", places["idx"]],
             "no encode.json")


def test_encode_work_inside_another_index_is_refused(cli, places, tmp_path):
    idx2 = _index(tmp_path / "idx2")
    places["idx2"] = idx2
    _refused(cli, places, ["encode", "--model", "m", "--shards", tmp_path / "none.tar", "--index", tmp_path / "new",
                           "--work", idx2 / "parts"], "is in the index folder")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("what", ["user", "run", "idx"])
def test_encode_work_in_another_folder_is_refused(cli, places, tmp_path, what):
    _refused(cli, places, ["encode", "--model", "m", "--shards", tmp_path / "none.tar", "--index", tmp_path / "new",
                           "--work", places[what]], "--work")


def test_encode_into_its_own_index_passes_the_rule(cli, places, tmp_path):
    """An index with the encode record in its work folder is encode's own to extend: the run gets past the
    rule (and stops at the missing shards)."""
    work = tmp_path / "idx.parts"
    work.mkdir()
    (work / "encode.json").write_text("{}")
    code, line = cli("encode", "--model", "m", "--shards", tmp_path / "none.tar", "--index", places["idx"])
    assert code == 1 and "none.tar" in line and "--index" not in line, line


# ------------------------------------------------------------------------------------- index build
@pytest.mark.parametrize("what,flags,expect", [
    ("user", [], "holds no index"),
    ("idx", [], "already holds an index: pass --overwrite"),
    ("run", ["--overwrite"], "already holds a training run"),
    ("shards", ["--overwrite"], "already holds shards"),
])
def test_index_build_into_another_folder_is_refused(cli, places, what, flags, expect):
    _refused(cli, places, ["index", "build", "--model", "m", "--data", "emoji:test", "--out", places[what], *flags],
             expect)


def test_index_build_whose_parts_folder_holds_other_files_is_refused(cli, places, tmp_path):
    parts = tmp_path / "new.parts"
    parts.mkdir()
    (parts / "mine.txt").write_text("not parts")
    places["parts"] = parts
    _refused(cli, places, ["index", "build", "--model", "m", "--data", "emoji:test", "--out", tmp_path / "new"],
             "parts folder")


def test_index_build_inside_an_index_is_refused(cli, places):
    _refused(cli, places, ["index", "build", "--model", "m", "--data", "emoji:test", "--out", places["idx"] / "sub"],
             "is in the index folder")


# ----------------------------------------------------------------------------------------- exports
@pytest.mark.parametrize("command", ["export-st", "export-onnx"])
@pytest.mark.parametrize("what", ["idx", "run", "user"])
def test_model_exports_into_another_folder_are_refused(cli, places, command, what):
    _refused(cli, places, [command, "no-such-model", places[what]], "not a previous")


@pytest.mark.parametrize("command", ["export-st", "export-onnx"])
def test_model_exports_inside_an_index_are_refused(cli, places, command):
    _refused(cli, places, [command, "no-such-model", places["idx"] / "export"], "is in the index folder")


@pytest.mark.parametrize("fmt", ["opensearch", "qdrant"])
def test_index_export_into_a_run_folder_is_refused(cli, places, fmt, tmp_path):
    idx2 = _index(tmp_path / "idx2")
    _refused(cli, places, ["index", "export", idx2, "--format", fmt, "--out", places["run"], "--overwrite"],
             "already holds a training run")


# ------------------------------------------------------------------------- options that do nothing
def test_no_hub_prior_with_a_prior_weight_is_refused(cli, places, tmp_path):
    _refused(cli, places, ["index", "build", "--model", "m", "--data", "emoji:test", "--out", tmp_path / "new",
                           "--no-hub-prior", "--prior-weight", "0.5"], "--prior-weight 0.5: not with --no-hub-prior")
    assert not (tmp_path / "new").exists()


def test_eval_overwrite_without_json_is_refused(cli, places):
    _refused(cli, places, ["eval", "--model", "m", "--data", "emoji:test", "--overwrite"],
             "--overwrite replaces the --json file", code=2)


def test_an_empty_qdrant_vector_name_is_refused(cli, places, tmp_path):
    _refused(cli, places, ["index", "export", places["idx"], "--format", "qdrant", "--qdrant-vector", "",
                           "--out", tmp_path / "q"], "--qdrant-vector")
    assert not (tmp_path / "q").exists()
