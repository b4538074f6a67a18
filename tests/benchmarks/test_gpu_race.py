"""benchmarks/gpu_race.py: the pieces of the GPU machine's race that run anywhere. The whole run on a tiny
pack (encode on the CPU, then both races) is checked by `python -m benchmarks.gpu_race run --device cpu`;
here: the prefix corpus, the peers file, the parallel ground truth and the record kept after each stage."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from benchmarks.common import ground_truth, load_corpus
from benchmarks.peers import common
from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def gr(load_benchmark):
    return load_benchmark("gpu_race")


def _corpus(path, load_benchmark, n=90, q=20, seed=0):
    rng = np.random.default_rng(seed)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(400, size=6, replace=False)} for _ in range(n)]
    load_benchmark("real_corpus").write_corpus(path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:q], dim=common.VOCAB_SIZE))
    return rows


def test_prefix_corpus_is_the_first_rows_with_the_same_queries(gr, load_benchmark, tmp_path):
    _corpus(tmp_path / "full", load_benchmark)
    gr.prefix_corpus(tmp_path / "full", tmp_path / "small", 30)
    full, small = load_corpus(tmp_path / "full", 90), load_corpus(tmp_path / "small", 30)
    assert (small.docs_scipy() != full.docs_scipy()[:30]).nnz == 0
    assert (small.queries_scipy() != full.queries_scipy()).nnz == 0


def test_ground_truth_on_several_processes_equals_one(load_benchmark, tmp_path):
    for d in ("one", "four"):
        _corpus(tmp_path / d, load_benchmark, n=200, q=70, seed=1)
    one = np.load(ground_truth(tmp_path / "one", 200, 10))
    four = np.load(ground_truth(tmp_path / "four", 200, 10, workers=4))
    assert one.shape == (70, 10) and (one == four).all()
    assert not list((tmp_path / "four").glob("*.tmp*"))  # written atomically


def test_peers_file_leaves_out_skipped_builds_and_missing_libraries(gr, tmp_path, monkeypatch):
    monkeypatch.setattr(gr.importlib.util, "find_spec", lambda m: None if m == "pyvsag" else object())
    path, left = gr.peers_file(tmp_path / "peers.json", {"bmp-b32"})
    kept = [opts.get("label", engine) for engine, opts in json.loads(path.read_text())]
    assert "bmp-b32" not in kept and "bmp-b64" in kept and kept[0] == "tokenspace"
    assert not [k for k in kept if k.startswith("sindi")]
    assert "bmp-b32 (skipped)" in left and "sindi-p0 (not installed: pyvsag)" in left


def test_the_record_keeps_each_stage_and_reads_back_an_earlier_call(gr, tmp_path):
    out1, out2 = tmp_path / "out1", tmp_path / "out2"  # each call's $OUT starts empty
    out1.mkdir(), out2.mkdir()
    rec = gr.Record(tmp_path, out1, ["encode", "--out", str(out1)])
    rec.stage("encode", time.monotonic(), corpus={"docs": 5})
    assert json.loads((out1 / "gpu_race.json").read_text())["stages"]["encode"]["corpus"] == {"docs": 5}
    again = gr.Record(tmp_path, out2, ["race", "--out", str(out2)])  # the second call on a warm machine
    again.stage("races", time.monotonic())
    report = json.loads((out2 / "gpu_race.json").read_text())
    assert set(report["stages"]) == {"encode", "races"} and report["stages"]["encode"]["corpus"] == {"docs": 5}
    assert report["hardware"]["cores"] >= 1 and report["command"].startswith("python -m benchmarks.gpu_race race")
    assert report["earlier_calls"][0]["command"].startswith("python -m benchmarks.gpu_race encode")
