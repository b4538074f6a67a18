"""benchmarks/peers/worker.measure on a tiny corpus with the scipy peer: every setting's one-at-a-time
timing runs in the passes asked for, and the QPS reported is the median pass."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.peers import common, worker
from benchmarks.peers.scipy_peer import ScipyPeer
from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def write_corpus(load_benchmark):
    return load_benchmark("real_corpus").write_corpus


class TwoSettings(ScipyPeer):
    """The scipy peer with two settings, so that passes go over several settings."""

    def settings(self):
        return [("a", {}), ("b", {})]


def test_measure_times_every_setting_in_each_pass_and_reports_the_median(write_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "rss_bytes", lambda: 0)  # psutil is a bench extra, not a test dependency
    rng = np.random.default_rng(0)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(200, size=6, replace=False)} for _ in range(60)]
    docs = SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE)
    queries = SparseBatch.from_dicts(rows[:7], dim=common.VOCAB_SIZE)
    write_corpus(tmp_path, docs, queries)
    corpus = common.load_corpus(tmp_path, 60)
    scores = (queries.to_scipy() @ docs.to_scipy().T).toarray()
    gt = np.argsort(-scores, axis=1, kind="stable")[:, :5]
    out = worker.measure(TwoSettings(), corpus, tmp_path, gt, 5, n_single=7, batch_size=4, threads=1,
                         repeats=3)
    assert [s["setting"] for s in out["settings"]] == ["a", "b"]
    for s in out["settings"]:
        assert len(s["single_qps_runs"]) == 3 and all(q > 0 for q in s["single_qps_runs"])
        assert s["single_qps"] == pytest.approx(float(np.median(s["single_qps_runs"])), rel=1e-3)
        assert s["single_recall"] == 1.0 and s["batch_recall"] == 1.0
