"""benchmarks/search_call.py: every arm answers alike, the arms that read each answer as it comes are timed
beside the calls alone, code whose answers have no ids and scores runs without that arm, and a run at
another commit with other answers is caught (--expect), on a tiny corpus."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.peers import common
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch

ARGS = ["--queries", "25", "--passes", "2", "--batch", "10"]


def _corpus(load_benchmark, path, n_docs=120, n_queries=25, seed=3):
    rng = np.random.default_rng(seed)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(200, size=6, replace=False)} for _ in range(n_docs)]
    load_benchmark("real_corpus").write_corpus(path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:n_queries], dim=common.VOCAB_SIZE))


def test_every_arm_reads_the_same_answers(load_benchmark, tmp_path, capsys):
    sc = load_benchmark("search_call")
    _corpus(load_benchmark, tmp_path)
    out = tmp_path / "call.json"
    sc.cli(["--corpus-dir", str(tmp_path), *ARGS, "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["queries"] == 25 and len(doc["rows"]) == len(sc.SETTINGS)
    for row in doc["rows"]:
        assert set(row["ratio_to_arrays"]) == set(sc.ARMS[1:])
        assert set(row["ratio_to_arrays_with_read"]) == set(sc.READ_ARMS[1:])
        assert set(row["us_per_query"]) == set(sc.ARMS + sc.READ_ARMS) and min(row["us_per_query"].values()) > 0
    assert "| search(), through each Hit | ratio | through ids, scores | ratio |" in capsys.readouterr().out

    tampered = json.loads(out.read_text())
    tampered["rows"][0]["answers_sha256"] = "0" * 64
    old = tmp_path / "old.json"
    old.write_text(json.dumps(tampered))
    with pytest.raises(SystemExit, match="answers differ"):
        sc.cli(["--corpus-dir", str(tmp_path), *ARGS, "--out", str(tmp_path / "again.json"), "--expect", str(old)])


def test_answers_without_fields_run_without_that_arm(load_benchmark, tmp_path, monkeypatch):
    """An earlier commit's search() answered with a list of Hit: the A/B against it still runs."""
    sc = load_benchmark("search_call")
    _corpus(load_benchmark, tmp_path)
    plain = InvertedIndex.search
    monkeypatch.setattr(InvertedIndex, "search", lambda self, *a, **kw: [list(h) for h in plain(self, *a, **kw)])
    out = tmp_path / "call.json"
    sc.cli(["--corpus-dir", str(tmp_path), *ARGS, "--out", str(out)])
    for row in json.loads(out.read_text())["rows"]:
        assert set(row["ratio_to_arrays_with_read"]) == {"search+read"} and "search+read-fields" not in row["us_per_query"]


def test_read_gives_the_callers_pairs_from_either_call(load_benchmark):
    sc = load_benchmark("search_call")
    rng = np.random.default_rng(0)
    dense = rng.random((50, 20)).astype(np.float32) * (rng.random((50, 20)) < 0.3)
    index = InvertedIndex.build(SparseBatch.from_dense(dense), [f"d{i}" for i in range(50)])
    q = SparseBatch.from_dense(dense[:1])
    arrays = sc.read([index.search_arrays(q.indices, q.values, 5)])
    hits = sc.read(index.search(q, 5))
    assert arrays == hits and len(hits[0]) == 5
    assert all(type(i) is str and type(s) is float for i, s in arrays[0])
