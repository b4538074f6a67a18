"""The learned-sparse peers (SINDI, BMP, kANNolo) on a tiny corpus, through the worker's measure: the same
recall code for every engine, and each exact setting's top-10 equal to the scipy answer. A peer whose
package is missing is skipped."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from benchmarks.peers import common, worker
from tokenspace.sparse import SparseBatch

K = 10


@pytest.fixture(scope="module")
def tiny(load_benchmark, tmp_path_factory):
    """400 documents, 25 queries over 300 terms with distinct scores (no ties at the top-10 boundary)."""
    write_corpus = load_benchmark("real_corpus").write_corpus
    rng = np.random.default_rng(7)

    def rows(n, nnz):
        return [{int(t): float(rng.uniform(0.05, 3.0)) for t in rng.choice(300, size=nnz, replace=False)}
                for _ in range(n)]

    docs = SparseBatch.from_dicts(rows(400, 30), dim=common.VOCAB_SIZE)
    queries = SparseBatch.from_dicts(rows(25, 8), dim=common.VOCAB_SIZE)
    path = tmp_path_factory.mktemp("lsr-peers")
    write_corpus(path, docs, queries)
    corpus = common.load_corpus(path, 400)
    scores = (queries.to_scipy() @ docs.to_scipy().T).toarray()
    gt = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return corpus, gt, scores, path


def need(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (the bench extra)")


def run(peer, tiny, tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "rss_bytes", lambda: 0)  # psutil is a bench extra
    corpus, gt, _, _ = tiny
    return worker.measure(peer, corpus, tmp_path, gt, K, n_single=25, batch_size=10, threads=2)


def single_answers(peer, tiny, setting):
    corpus = tiny[0]
    return [peer.search_one(*corpus.query(r), K, qrow=r, **setting) for r in range(len(tiny[1]))]


def test_sindi_exhaustive_is_exact_and_pruning_measured_alike(tiny, tmp_path, monkeypatch):
    need("pyvsag")
    from benchmarks.peers.sindi_peer import SindiPeer

    peer = SindiPeer(build={"window_size": 10_000},
                     settings=[("exhaustive", {}), ("qp=0.3", {"query_prune_ratio": 0.3})])
    out = run(peer, tiny, tmp_path, monkeypatch)
    rows = {s["setting"]: s for s in out["settings"]}
    assert rows["exhaustive"]["single_recall"] == 1.0 and rows["exhaustive"]["batch_recall"] == 1.0
    assert 0 < rows["qp=0.3"]["single_recall"] <= 1.0
    for got, truth in zip(single_answers(peer, tiny, {}), tiny[1]):
        np.testing.assert_array_equal(got, truth)
    assert out["index_bytes"] > 0

    pruned = SindiPeer(build={"window_size": 10_000, "doc_prune_ratio": 0.4, "use_reorder": True},
                       settings=[("nc=0", {}), ("nc=100", {"n_candidate": 100})])
    out = run(pruned, tiny, tmp_path / "p", monkeypatch)
    rows = {s["setting"]: s for s in out["settings"]}
    # rescoring 100 candidates with the forward store recovers what pruning lost
    assert rows["nc=100"]["single_recall"] >= rows["nc=0"]["single_recall"]


def test_bmp_safe_setting_is_exact_on_its_quantised_weights(tiny, tmp_path, monkeypatch):
    need("bmp")
    from benchmarks.peers.bmp_peer import BmpPeer

    peer = BmpPeer(build={"bsize": 32}, settings=[("alpha=1 beta=1", {}), ("alpha=0.7", {"alpha": 0.7})])
    out = run(peer, tiny, tmp_path, monkeypatch)
    rows = {s["setting"]: s for s in out["settings"]}
    assert rows["alpha=1 beta=1"]["single_recall"] >= 0.9  # 8-bit weights: near, not at, the float answer
    assert rows["alpha=1 beta=1"]["single_recall"] >= rows["alpha=0.7"]["single_recall"]
    # every answer near the top: BMP scores integer document impacts against its own quantised query
    # weights (scores come back as integers), so near-ties reorder; none falls below 80% of the 10th best
    scores = tiny[2]
    for r, got in enumerate(single_answers(peer, tiny, {})):
        kth = np.sort(scores[r])[-K]
        assert len(got) == K and np.all(scores[r][got] >= 0.8 * kth)


def test_kannolo_reaches_the_exact_answer_with_a_wide_search(tiny, tmp_path, monkeypatch):
    need("kannolo")
    from benchmarks.peers.kannolo_peer import KannoloPeer

    peer = KannoloPeer(build={"m": 16, "ef_construction": 100},
                       settings=[("ef=400", {"ef_search": 400}), ("ef=10", {"ef_search": 10})])
    out = run(peer, tiny, tmp_path, monkeypatch)
    rows = {s["setting"]: s for s in out["settings"]}
    assert rows["ef=400"]["single_recall"] >= 0.98 and rows["ef=400"]["batch_recall"] >= 0.98
    assert rows["ef=10"]["single_recall"] <= rows["ef=400"]["single_recall"]
    assert out["index_bytes"] > 0


def test_recall_is_one_formula_for_every_engine():
    truth = np.array([[3, 1, 2, -1]])
    assert worker.recall_at([np.array([1, 2, 9])], truth, 3) == pytest.approx(2 / 3)


def test_sindi_prepared_queries_and_worker_processes_answer_as_one_query_at_a_time(tiny):
    need("pyvsag")
    from benchmarks.peers.sindi_peer import SindiPeer

    corpus = tiny[0]
    peer = SindiPeer(build={"window_size": 10_000})
    peer.build(corpus, tiny[3])
    try:
        plain = [peer.search_one(*corpus.query(r), K).tolist() for r in range(25)]
        peer.prepare_queries(corpus)
        assert [peer.search_one(*corpus.query(r), K, qrow=r).tolist() for r in range(25)] == plain
        for threads in (2, 3):  # forked workers, each a share of the rows, answers in row order
            assert [a.tolist() for a in peer.search_batch(corpus, np.arange(25), K, threads)] == plain
        assert [a.tolist() for a in SindiPeer.search_batch(peer, corpus, np.arange(4), K, 1)] == plain[:4]
    finally:
        peer.close()
