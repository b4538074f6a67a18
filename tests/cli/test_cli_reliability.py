"""Bad inputs the command must refuse before any work, in one line (a fault-injection probe of a fresh
clone): `index export` paths that collide or lie inside an index folder, options a format or mode
would ignore, `demo --port` without `--serve`, output folders under a file or full of a user's files,
a model config with a negative size. In-process (``cli.main``): every refusal here comes before a model
loads, so no subprocess is needed to show it."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

WORDS = ["a", "red", "blue", "dog", "cat"]


@pytest.fixture
def idx(tmp_path) -> Path:
    """A tiny saved index (no model: every refusal below comes before one would load)."""
    vocab = Vocabulary(list(SPECIAL_TOKENS) + WORDS, name="tiny")
    rows = [{"red": 1.0, "dog": 0.4}, {"blue": 0.8, "cat": 0.6}, {"a": 0.3, "red": 0.2}]
    InvertedIndex.build(SparseBatch.from_dicts(rows, vocab=vocab), ["d1", "d2", "d3"]).save(tmp_path / "idx")
    return tmp_path / "idx"


@pytest.fixture
def queries(tmp_path) -> Path:
    q = tmp_path / "q.txt"
    q.write_text("a red dog\na blue cat\n")
    return q


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_index_export_query_file_never_collides_with_the_export(cli, idx, queries, tmp_path):
    """Each reported collision: the second write replaced the first (both "wrote ... to X" printed)."""
    before = snapshot(tmp_path)
    cases = [
        (["--out", tmp_path / "e.jsonl", "--queries-out", tmp_path / "e.jsonl"], "is --out itself"),
        # the default query path (queries.jsonl beside --out) is --out
        (["--out", tmp_path / "qq" / "queries.jsonl"], "is --out itself"),
        (["--format", "jsonl-int", "--out", tmp_path / "a" / "docs.jsonl", "--queries-out", tmp_path / "a" / "docs.jsonl"],
         "is --out itself"),
        (["--format", "opensearch", "--out", tmp_path / "os4", "--queries-out", tmp_path / "os4" / "mapping.json"],
         "is a file of the OpenSearch export"),
        (["--format", "opensearch", "--out", tmp_path / "os4", "--queries-out", tmp_path / "os4" / "bulk-00000.ndjson"],
         "is a file of the OpenSearch export"),
        (["--format", "opensearch", "--out", tmp_path / "os4", "--queries-out", tmp_path / "os4"],
         "is the OpenSearch --out folder"),
        # Anserini indexes every file of the collection folder: the topics would become documents
        (["--format", "jsonl-int", "--out", tmp_path / "a" / "docs.jsonl", "--queries-out", tmp_path / "a" / "q.tsv"],
         "which Anserini indexes whole"),
        # the query texts it reads are an output's path: they were replaced by the export
        (["--out", queries, "--overwrite"], "is the --queries file the export reads"),
        (["--out", tmp_path / "e.jsonl", "--queries-out", queries, "--overwrite"], "is the --queries file"),
    ]
    for args, words in cases:
        code, line = cli("index", "export", idx, "--queries", queries, *args)
        assert code == 1 and words in line, (args, line)
    assert snapshot(tmp_path) == before  # nothing written, the index and the query texts as they were


def test_index_export_never_writes_inside_an_index_folder(cli, idx, tmp_path):
    """`--out IDX/seg-000001/fwd_values.npy --overwrite` replaced a segment file: every later command
    failed. The guard looked at the path and its parent only."""
    seg = next(p for p in idx.iterdir() if p.name.startswith("seg-"))
    npy = next(seg.glob("*.npy"))
    before = snapshot(idx)
    for out in (npy, seg / "new.jsonl", seg / "deeper" / "still" / "x.jsonl", idx / "MANIFEST.json", idx):
        code, line = cli("index", "export", idx, "--out", out, "--overwrite")
        assert code == 1 and "is in the index folder" in line, (out, line)
    code, line = cli("index", "export", idx, "--format", "opensearch", "--out", seg / "os", "--overwrite")
    assert code == 1 and "is in the index folder" in line
    # another index's folder, and a symbolic link into one, are index folders too
    other = tmp_path / "other"
    shutil.copytree(idx, other)
    (tmp_path / "link").symlink_to(seg)
    for out in (other / seg.name / "x.jsonl", tmp_path / "link" / "x.jsonl"):
        code, line = cli("index", "export", idx, "--out", out)
        assert code == 1 and "is in the index folder" in line, (out, line)
    assert snapshot(idx) == before and len(InvertedIndex.load(idx)) == 3
    assert cli("index", "export", idx, "--out", tmp_path / "fine.jsonl")[0] == 0  # beside it is fine


@pytest.mark.parametrize("args, words", [
    (["--format", "jsonl", "--scale", "5"], "--scale: only with --format jsonl-int"),
    (["--format", "opensearch", "--scale", "5"], "--scale: only with --format jsonl-int"),
    (["--model", "no-such-model"], "--model encodes the --queries texts"),
    (["--format", "jsonl-int", "--model", "no-such-model"], "--model encodes the --queries texts"),
])
def test_index_export_refuses_options_it_would_ignore(cli, idx, tmp_path, args, words):
    """`--scale 5` gave byte-identical jsonl; `--model NAME` was ignored without --queries, even a name
    that does not exist."""
    out = tmp_path / "out" / "docs.jsonl"
    code, line = cli("index", "export", idx, "--out", out, *args)
    assert code == 2 and words in line, line
    assert not out.parent.exists()


def test_index_export_scale_still_shapes_jsonl_int(cli, idx, tmp_path):
    for scale, out in (("5", tmp_path / "s5.jsonl"), (None, tmp_path / "s100.jsonl")):
        code, _ = cli("index", "export", idx, "--format", "jsonl-int", "--out", out, *(["--scale", scale] if scale else []))
        assert code == 0
    five, hundred = ([json.loads(x)["vector"] for x in p.read_text().splitlines()] for p in (tmp_path / "s5.jsonl",
                                                                                               tmp_path / "s100.jsonl"))
    assert five[0] == {"red": 5, "dog": 2} and hundred[0] == {"red": 100, "dog": 40}


def test_index_export_missing_queries_file_and_output_under_a_file(cli, idx, tmp_path):
    code, line = cli("index", "export", idx, "--out", tmp_path / "d.jsonl", "--queries", tmp_path / "none.txt")
    assert code == 1 and "--queries" in line and "no such file" in line
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    code, line = cli("index", "export", idx, "--out", blocker / "sub" / "d.jsonl")
    assert code == 1 and "is a file, not a folder" in line
    assert not (tmp_path / "d.jsonl").exists()


def test_demo_port_without_serve_is_refused(cli):
    code, line = cli("demo", "--port", "9999")
    assert code == 2 and "--port is the port of --serve" in line


def test_index_build_out_under_a_file_is_refused_before_the_model_loads(cli, tmp_path):
    """`index build --out /proc/version/idx` loaded the model and encoded every image (16-18 s) before
    failing. The model named here does not exist: the --out check answers first."""
    blocker = tmp_path / "version"
    blocker.write_text("a file")
    code, line = cli("index", "build", "--model", "no-such-model", "--data", "emoji:test", "--out", blocker / "idx")
    assert code == 1 and f"--out {blocker / 'idx'}: {blocker} is a file, not a folder" in line
    if Path("/proc/version").is_file():
        code, line = cli("index", "build", "--model", "no-such-model", "--data", "emoji:test", "--out", "/proc/version/idx")
        assert code == 1 and "/proc/version is a file, not a folder" in line


def test_sparsify_refuses_a_users_folder_before_any_work(cli, tmp_path):
    """`sparsify --out` into a non-empty folder of the user's trained beside their files."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.txt").write_text("keep me")
    code, line = cli("sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", mine)
    assert code == 1 and "is a folder that is not empty and holds no training run" in line
    code, line = cli("sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", mine, "--resume")
    assert code == 1 and "holds no training run" in line
    assert [p.name for p in mine.iterdir()] == ["thesis.txt"]
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    code, line = cli("sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", run)
    assert code == 1 and "already holds a training run" in line
    blocker = tmp_path / "f"
    blocker.write_text("x")
    code, line = cli("sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", blocker / "run")
    assert code == 1 and "is a file, not a folder" in line
    # a new or empty folder passes this check: the next refusal is about the model
    (tmp_path / "empty").mkdir()
    code, line = cli("sparsify", "--dense", "no-such-model", "--data", "emoji:train", "--out", tmp_path / "empty")
    assert code == 1 and "--dense no-such-model" in line


@pytest.mark.parametrize("key, value, words", [
    ("max_text_len", -3, "max_text_len: expected an integer >= 3"),
    ("max_text_len", 2.5, "max_text_len: expected an integer >= 3"),
    ("embed_dim", 0, "embed_dim: expected an integer >= 1"),
    ("head_hidden", -1, "head_hidden: expected an integer >= 1"),
    ("expansion", True, "expansion: expected an integer >= 1"),
    ("logit_scale_init", float("nan"), "logit scales must be finite numbers"),
    ("vocab", 3, "vocab: expected a string"),
    ("image_tower", [], "image_tower: expected an object, not an array"),
])
def test_a_config_with_a_bad_size_is_one_clear_line(tmp_path, key, value, words):
    """`max_text_len: -3` gave "OverflowError: can't convert negative int to unsigned" from the tokenizer."""
    from tokenspace.cli.common import one_line
    from tokenspace.models.config import ModelConfig

    base = ModelConfig.load("stair-emoji").to_dict()
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**base, key: value}))
    with pytest.raises(ValueError) as e:
        ModelConfig.load(path)
    assert one_line(e.value).startswith(f"{path}: {words}")


def test_sweep_temporary_removes_only_dead_saves_leftovers(tmp_path):
    """A killed save leaves .tmp-seg-* folders until the next complete save; a load may sweep them."""
    import subprocess
    import sys

    from tokenspace.index.storage import sweep_temporary

    vocab = Vocabulary(list(SPECIAL_TOKENS) + WORDS, name="tiny")
    root = tmp_path / "idx"
    InvertedIndex.build(SparseBatch.from_dicts([{"red": 1.0}], vocab=vocab), ["d1"]).save(root)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    leftovers = [root / f".tmp-seg-000002-{dead}", root / f".tmp-seg-000003-{dead}"]
    for d in leftovers:
        d.mkdir()
        (d / "fwd_values.npy").write_bytes(b"half")
    live = root / f".tmp-seg-000004-{os.getpid()}"  # a save running now, in this process
    live.mkdir()
    mine = root / ".tmp-seg-notes"  # not a save's name: not ours to remove
    mine.mkdir()
    assert sorted(sweep_temporary(root)) == sorted(d.name for d in leftovers)
    assert not any(d.exists() for d in leftovers) and live.is_dir() and mine.is_dir()
    assert len(InvertedIndex.load(root)) == 1
    assert sweep_temporary(tmp_path / "missing") == []


def test_a_dense_model_is_refused_where_token_vectors_are_needed(cli, idx, queries, tmp_path, make_model):
    """A dense model's float rows reached the token code and failed in its words ("explained_search
    takes a single query row")."""
    dense = make_model("dense").save_pretrained(tmp_path / "dense")
    code, line = cli("index", "export", idx, "--out", tmp_path / "d.jsonl", "--queries", queries, "--model", dense)
    assert code == 1 and "a dense model gives dense vectors" in line
    assert not (tmp_path / "d.jsonl").exists() and not (tmp_path / "queries.jsonl").exists()
    code, line = cli("serve", "--model", dense, "--index", idx, "--port", "1")
    assert code == 1 and "a dense model gives dense vectors" in line and "--dense-model" in line
