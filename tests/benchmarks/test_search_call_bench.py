"""benchmarks/search_call.py: every arm answers alike, the calls and the reading of their answers are timed
apart, and a run at another commit with other answers is caught (--expect), on a tiny corpus."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.peers import common
from tokenspace.sparse import SparseBatch


def _corpus(load_benchmark, path, n_docs=120, n_queries=25, seed=3):
    rng = np.random.default_rng(seed)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(200, size=6, replace=False)} for _ in range(n_docs)]
    load_benchmark("real_corpus").write_corpus(path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:n_queries], dim=common.VOCAB_SIZE))


def test_every_arm_reads_the_same_answers(load_benchmark, tmp_path, capsys):
    sc = load_benchmark("search_call")
    _corpus(load_benchmark, tmp_path)
    out = tmp_path / "call.json"
    sc.cli(["--corpus-dir", str(tmp_path), "--queries", "25", "--passes", "2", "--batch", "10", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["queries"] == 25 and len(doc["rows"]) == len(sc.SETTINGS)
    for row in doc["rows"]:
        assert set(row["ratio_to_arrays"]) == set(row["ratio_to_arrays_with_read"]) == set(sc.ARMS[1:])
        assert set(row["ratio_to_arrays_with_fields"]) == set(sc.ARMS[1:])
        for arm in sc.ARMS:  # reading the answers is timed on top of the calls
            assert row["us_per_query_with_read"][arm] >= row["us_per_query"][arm] > 0
            assert row["us_per_query_with_fields"][arm] >= row["us_per_query"][arm]
    assert "| with reading each Hit | with reading ids, scores |" in capsys.readouterr().out

    tampered = json.loads(out.read_text())
    tampered["rows"][0]["answers_sha256"] = "0" * 64
    old = tmp_path / "old.json"
    old.write_text(json.dumps(tampered))
    with pytest.raises(SystemExit, match="answers differ"):
        sc.cli(["--corpus-dir", str(tmp_path), "--queries", "25", "--passes", "1", "--batch", "10",
                "--out", str(tmp_path / "again.json"), "--expect", str(old)])


def test_read_gives_the_callers_lists_from_either_call(load_benchmark, tmp_path):
    sc = load_benchmark("search_call")
    from tokenspace.index import InvertedIndex

    rng = np.random.default_rng(0)
    dense = rng.random((50, 20)).astype(np.float32) * (rng.random((50, 20)) < 0.3)
    index = InvertedIndex.build(SparseBatch.from_dense(dense), [f"d{i}" for i in range(50)])
    q = SparseBatch.from_dense(dense[:1])
    arrays = sc.read("arrays", [index.search_arrays(q.indices, q.values, 5)])
    hits = sc.read("search", index.search(q, 5))
    assert arrays == hits and len(hits[0]) == 5
    assert all(type(i) is str and type(s) is float for i, s in arrays[0])
    assert sc.read_fields("search", index.search(q, 5)) == hits
    assert sc.read_fields("search", [list(index.search(q, 5)[0])]) is None  # a list of Hit: no fields
