"""benchmarks/seismic_knn.py on a tiny corpus: the graph is built once (by Seismic, or by tokenspace and
written in Seismic's file format), saved whole, and a race's Seismic build takes it back (knn_path) and
searches with it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.peers import common
from tokenspace.sparse import SparseBatch

pytest.importorskip("seismic")

BUILD = {"n_postings": 200, "centroid_fraction": 0.1, "min_cluster_size": 2}


@pytest.fixture(scope="module")
def knn(load_benchmark):
    return load_benchmark("seismic_knn")


def _corpus(load_benchmark, folder, n=150):
    rng = np.random.default_rng(4)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(200, size=10, replace=False)} for _ in range(n)]
    load_benchmark("real_corpus").write_corpus(folder, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:6], dim=common.VOCAB_SIZE))


def _race_build_searches_with(graph, folder):
    """What head_to_head.py does with a graph: a Seismic build carrying it, searched with n_knn."""
    from benchmarks.peers.seismic_peer import SeismicPeer

    corpus = common.load_corpus(folder, 150)
    peer = SeismicPeer(build={**BUILD, "knn_path": str(graph), "nknn": 3})
    (folder / "w").mkdir()
    peer.build(corpus, folder / "w")
    assert peer.index.knn_len == 3
    idx, val = corpus.query(0)
    assert peer.search_one(idx, val, 5, query_cut=10, heap_factor=0.9, n_knn=3)[0] == 0  # query 0 is doc 0


def test_graph_is_saved_and_a_race_build_loads_it(knn, load_benchmark, tmp_path, monkeypatch, capsys):
    _corpus(load_benchmark, tmp_path)
    (tmp_path / "results" / "benchmarks" / "results").mkdir(parents=True)
    monkeypatch.setattr(knn, "ROOT", tmp_path / "results")
    knn.cli(["--corpus-dir", str(tmp_path), "--nknn", "3", "--name", "tiny", "--build", json.dumps(BUILD)])
    graph = knn.graph_path(tmp_path, 3)
    assert graph.exists() and graph.stat().st_size > 0
    assert not list(graph.parent.glob("*.part*"))  # the partial file was renamed, the work folder removed
    assert [p for p in graph.parent.iterdir()] == [graph]
    report = json.loads((tmp_path / "results/benchmarks/results/seismic_knn-tiny.json").read_text())
    assert report["n_docs"] == 150 and report["nknn"] == 3 and report["build"] == BUILD
    assert report["knn_build_s"] >= 0 and report["graph_bytes"] == graph.stat().st_size

    _race_build_searches_with(graph, tmp_path)

    # a second run keeps the whole graph it finds
    before = graph.stat().st_mtime_ns
    capsys.readouterr()
    knn.cli(["--corpus-dir", str(tmp_path), "--nknn", "3", "--build", json.dumps(BUILD)])
    assert "kept" in capsys.readouterr().out and graph.stat().st_mtime_ns == before


def test_graph_file_matches_seismics_own_byte_for_byte(knn, load_benchmark, tmp_path):
    """write_graph is checked against the library's save_knn: the same neighbours give the same bytes."""
    from benchmarks.peers.seismic_peer import SeismicPeer

    _corpus(load_benchmark, tmp_path, n=300)  # 300 docs: neighbour ids need 9 bits, not a whole byte
    peer = SeismicPeer(build=BUILD)
    (tmp_path / "w").mkdir()
    peer.build(common.load_corpus(tmp_path, 300), tmp_path / "w")
    peer.index.build_knn(4)
    peer.index.save_knn(str(tmp_path / "own"))
    own = (tmp_path / "own.knn.seismic").read_bytes()
    graph = knn.read_graph(tmp_path / "own.knn.seismic")
    assert graph.shape == (300, 4) and graph.min() >= 0 and graph.max() < 300
    assert not (graph == np.arange(300)[:, None]).any()  # Seismic leaves each doc out of its own row
    knn.write_graph(tmp_path / "ours.knn.seismic", graph)
    assert (tmp_path / "ours.knn.seismic").read_bytes() == own

    (tmp_path / "cut.knn.seismic").write_bytes(own[:-3])
    with pytest.raises(ValueError, match="not a Seismic k-NN graph"):
        knn.read_graph(tmp_path / "cut.knn.seismic")


def test_graph_via_tokenspace_is_exact_and_seismic_searches_with_it(knn, load_benchmark, tmp_path, monkeypatch):
    _corpus(load_benchmark, tmp_path)
    (tmp_path / "results" / "benchmarks" / "results").mkdir(parents=True)
    monkeypatch.setattr(knn, "ROOT", tmp_path / "results")
    monkeypatch.setattr(knn, "PART", 64)  # three parts, the last one short
    knn.cli(["--corpus-dir", str(tmp_path), "--nknn", "3", "--name", "tiny", "--via", "tokenspace",
              "--search", '{"mode": "exact"}', "--threads", "2"])
    graph_file = knn.graph_path(tmp_path, 3, "tokenspace")
    assert [p for p in graph_file.parent.iterdir()] == [graph_file]  # the parts are gone
    graph = knn.read_graph(graph_file)
    # the slow reference: every doc's 3 best other docs by a dense dot product
    docs = common.load_corpus(tmp_path, 150).docs_scipy().toarray()
    scores = docs @ docs.T
    np.fill_diagonal(scores, -np.inf)
    assert (graph == np.argsort(-scores, axis=1, kind="stable")[:, :3]).all()
    report = json.loads((tmp_path / "results/benchmarks/results/seismic_knn-tiny-tokenspace.json").read_text())
    assert report["via"] == "tokenspace" and report["graph_recall"] == 1.0 and report["graph_recall_docs"] == 150

    _race_build_searches_with(graph_file, tmp_path)


def test_bad_arguments_are_clear_errors(knn, load_benchmark, tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        knn.cli(["--corpus-dir", str(tmp_path)])
    assert "holds no corpus" in capsys.readouterr().err
    _corpus(load_benchmark, tmp_path, n=20)
    monkeypatch.setattr(knn.importlib.util, "find_spec", lambda name: None)  # as if pyseismic were missing
    with pytest.raises(SystemExit):
        knn.cli(["--corpus-dir", str(tmp_path)])
    assert "needs pyseismic-lsr" in capsys.readouterr().err
