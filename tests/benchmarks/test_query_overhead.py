"""benchmarks/query_overhead.py on a tiny corpus: the index is built once, every setting is measured and
the kernel-alone call returns what search() returns."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.peers import common
from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def qo(load_benchmark):
    return load_benchmark("query_overhead")


def test_overhead_report_on_a_tiny_corpus(qo, load_benchmark, tmp_path):
    rng = np.random.default_rng(1)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(300, size=8, replace=False)} for _ in range(80)]
    load_benchmark("real_corpus").write_corpus(tmp_path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:5], dim=common.VOCAB_SIZE))
    out = tmp_path / "r.json"
    qo.main(["--corpus-dir", str(tmp_path), "--index", str(tmp_path / "idx"), "--queries", "5", "--passes", "2",
             "--out", str(out)])
    assert (tmp_path / "idx" / "MANIFEST.json").exists()
    report = json.loads(out.read_text())
    assert [r["setting"] for r in report["rows"]] == list(qo.SETTINGS)
    for r in report["rows"]:
        assert r["docs"] == 80 and r["queries"] == 5 and r["passes"] == 2
        assert all(np.isfinite(r[k]) and r[k] > 0 for k in ("crossing_us", "kernel_us", "search_us", "user_us"))
    # the kernel alone finds what search() finds: the timed calls do the same work
    index, queries = qo.load(tmp_path, tmp_path / "idx", 5)
    for label, setting in qo.SETTINGS.items():
        options = qo.kernel_options(setting)
        assert options.impact_floor == setting.get("impact_floor", 0.0)
        for idx, val in queries:
            docs, _, count = qo.kernel_call(index, options)(idx, val)
            assert qo.kernel_call(index, options, rows=())(idx, val)[2][0] == 0  # the crossing searches nothing
            docs = docs[0, :count[0]].tolist()
            hits = index.search(SparseBatch(np.array([0, len(idx)]), idx, val, common.VOCAB_SIZE), qo.K, **setting)[0]
            assert [index._segments[0].id_of(d) for d in docs] == [h.id for h in hits], label
