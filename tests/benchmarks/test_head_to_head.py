"""benchmarks/head_to_head.py: engines built in one process and timed in interleaved passes; the
per-pass ratios at a recall target, on a tiny corpus (tokenspace against scipy) and on fixed rows."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.peers import common
from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def hh(load_benchmark):
    return load_benchmark("head_to_head")


def _tiny_race(load_benchmark, hh, monkeypatch, path, n_docs: int, n_queries: int, seed: int):
    """A random corpus of ``n_docs`` 8-term rows (its first ``n_queries`` rows are the queries) in ``path``,
    and the module's results folder moved to path/out; returns the results folder."""
    rng = np.random.default_rng(seed)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(300, size=8, replace=False)} for _ in range(n_docs)]
    load_benchmark("real_corpus").write_corpus(path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:n_queries], dim=common.VOCAB_SIZE))
    results = path / "out" / "benchmarks" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(hh, "ROOT", path / "out")
    return results


def _row(engine, setting, recall, passes):
    return {"engine": engine, "setting": setting, "recall": recall, "qps_passes": passes}


def test_ratio_takes_each_pass_fastest_setting_reaching_the_target(hh):
    rows = [_row("a", "fast", 0.94, [900, 1000]), _row("a", "ok", 0.96, [500, 800]), _row("a", "exact", 1.0, [300, 200]),
            _row("b", "x", 0.97, [250, 400]), _row("b", "y", 0.995, [100, 100]), _row("b", "maxscore", 1.0, [30, 40])]
    r95 = hh.ratios(rows, "a", "b", 0.95)
    assert r95["per_pass"] == [2.0, 2.0] and r95["median"] == 2.0  # "ok" vs "x"; "fast" misses 0.95
    r99 = hh.ratios(rows, "a", "b", 0.99)
    assert r99["per_pass"] == [3.0, 2.0] and (r99["min"], r99["max"]) == (2.0, 3.0)  # "exact" vs "y"
    assert hh.ratios(rows, "a", "b", None)["per_pass"] == [10.0, 5.0]
    assert hh.ratios(rows[:4], "a", "b", 0.99) is None  # b reaches only 0.97 there: no ratio, not a guess


def test_race_on_a_tiny_corpus(hh, load_benchmark, tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(300, size=8, replace=False)} for _ in range(120)]
    load_benchmark("real_corpus").write_corpus(tmp_path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:12], dim=common.VOCAB_SIZE))
    results = tmp_path / "results"
    (results / "benchmarks" / "results").mkdir(parents=True)
    (results / "docs").mkdir()
    monkeypatch.setattr(hh, "ROOT", results)
    ts = {"settings": [["exact", {"mode": "exact"}],
                       ["qm=0.5", {"mode": "approx", "query_mass": 0.5, "alpha": 1.0, "rerank": 10}]]}
    hh.main(["--corpus-dir", str(tmp_path), "--name", "tiny", "--passes", "3", "--single", "12",
             "--peer", "tokenspace", json.dumps(ts), "--peer", "scipy", "{}"])
    report = json.loads((results / "benchmarks/results/head_to_head-tiny.json").read_text())
    got = {(r["engine"], r["setting"]): r for r in report["rows"]}
    assert set(got) == {("tokenspace", "exact"), ("tokenspace", "qm=0.5"), ("scipy", "default")}
    assert all(len(r["qps_passes"]) == 3 and r["qps"] > 0 for r in report["rows"])
    assert all(len(r["cpu_qps_passes"]) == 3 and r["cpu_qps"] > 0 for r in report["rows"])
    assert "tokenspace/scipy @0.95" in report["family_ratios_cpu"]
    assert got[("tokenspace", "exact")]["recall"] == 1.0 == got[("scipy", "default")]["recall"]
    assert len(report["ratios"]["tokenspace/scipy @0.95"]["per_pass"]) == 3
    assert [b["engine"] for b in report["builds"]] == ["tokenspace", "scipy"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("head-to-head-")]  # the work folder is removed
    assert (results / "benchmarks/results/head_to_head-tiny.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["commit"] and report["machine"] and report["command"].startswith("python -m benchmarks.head_to_head")
    assert len(report["family_ratios"]["tokenspace/scipy @0.9"]["per_pass"]) == 3


def test_a_second_build_of_an_engine_races_under_its_label(hh, load_benchmark, tmp_path, monkeypatch):
    _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 100, 10, seed=5)
    (tmp_path / "out" / "docs").mkdir()
    ts = {"settings": [["exact", {"mode": "exact"}]]}
    hh.main(["--corpus-dir", str(tmp_path), "--name", "two", "--passes", "2", "--single", "10",
             "--peer", "tokenspace", json.dumps(ts),
             "--peer", "tokenspace", json.dumps({**ts, "label": "tokenspace-small", "build": {"dense_fraction": 0.5}}),
             "--peer", "scipy", "{}"])
    report = json.loads((tmp_path / "out/benchmarks/results/head_to_head-two.json").read_text())
    assert [b["engine"] for b in report["builds"]] == ["tokenspace", "tokenspace-small", "scipy"]
    assert report["builds"][1]["options"] == {"dense_fraction": 0.5}
    assert {r["engine"] for r in report["rows"]} == {"tokenspace", "tokenspace-small", "scipy"}
    # both builds of the first engine against the other engine, not against each other
    assert set(report["ratios"]) == {f"{a}/scipy @{t}" for a in ("tokenspace", "tokenspace-small")
                                     for t in ("0.95", "0.99", "exact")}
    with pytest.raises(SystemExit):  # two peers named alike: refused before anything is built
        hh.main(["--corpus-dir", str(tmp_path), "--peer", "tokenspace", "{}", "--peer", "tokenspace", "{}"])


def test_family_ratio_takes_the_fastest_build_of_each_engine(hh):
    rows = [{**_row("a1", "exact", 1.0, [300, 200]), "family": "a"}, {**_row("a2", "exact", 1.0, [100, 400]), "family": "a"},
            {**_row("b1", "qp=0 exhaustive", 1.0, [100, 100]), "family": "b"},
            {**_row("b2", "fast", 0.96, [1000, 1000]), "family": "b"}]
    assert hh.ratios(rows, "a", "b", None, key="family")["per_pass"] == [3.0, 4.0]  # exact vs exhaustive only
    assert hh.ratios(rows, "a", "b", 0.95, key="family")["per_pass"] == [0.3, 0.4]
    report = {"rows": rows, "family_ratios": {f"a/b @{t}": hh.ratios(rows, "a", "b", None if t == "exact" else t,
                                                                     key="family") for t in (0.9, 0.95, 0.99, "exact")}}
    assert "| b | **0.35x** (0.30-0.40)" in hh.verdict(report)


def test_screen_keeps_each_engines_front(hh, load_benchmark, tmp_path, monkeypatch):
    _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 80, 8, seed=4)
    ts = {"settings": [["exact", {"mode": "exact"}], ["exact-again", {"mode": "exact"}]]}
    hh.main(["--corpus-dir", str(tmp_path), "--name", "scr", "--passes", "1", "--single", "8", "--screen", "8",
             "--batch-threads", "2", "--batch-queries", "8", "--peer", "tokenspace", json.dumps(ts)])
    report = json.loads((tmp_path / "out/benchmarks/results/head_to_head-scr.json").read_text())
    assert set(report["screen"]) == {"tokenspace | exact", "tokenspace | exact-again"}
    assert any(r["setting"] == "exact" for r in report["rows"])  # an exact setting is never screened out
    assert all(r["batch_recall"] == 1.0 and r["batch_qps"] > 0 for r in report["rows"])


def test_a_missing_engine_library_is_refused_before_any_build(hh, load_benchmark, tmp_path, monkeypatch, capsys):
    rows = [{1: 1.0, 2: 0.5}, {2: 1.0}]
    load_benchmark("real_corpus").write_corpus(tmp_path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:1], dim=common.VOCAB_SIZE))
    built = []
    monkeypatch.setattr(hh, "make_peer", lambda *a, **k: built.append(a))
    from benchmarks.peers.pisa_peer import PisaPeer

    monkeypatch.setattr(PisaPeer, "requires", ("no_such_engine_module",))
    with pytest.raises(SystemExit):
        hh.main(["--corpus-dir", str(tmp_path), "--peer", "tokenspace", "{}", "--peer", "pisa", "{}"])
    err = capsys.readouterr().err
    assert "not installed: no_such_engine_module (for pisa)" in err and "[bench]" in err
    with pytest.raises(SystemExit):
        hh.main(["--corpus-dir", str(tmp_path), "--peer", "tokenspace", "{}", "--peer", "lucene", "{}"])
    assert "unknown engine(s) lucene" in capsys.readouterr().err
    assert built == []  # nothing was built



def test_a_deadline_ends_the_race_after_the_passes_begun_before_it(hh, load_benchmark, tmp_path, monkeypatch):
    _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 60, 6, seed=6)
    hh.main(["--corpus-dir", str(tmp_path), "--name", "late", "--passes", "4", "--single", "6", "--deadline", "0",
             "--peer", "tokenspace", json.dumps({"settings": [["exact", {"mode": "exact"}]]}), "--peer", "scipy", "{}"])
    report = json.loads((tmp_path / "out/benchmarks/results/head_to_head-late.json").read_text())
    # the first pass always runs (a report with no pass would say nothing); none starts after the deadline
    assert report["passes"] == 1 and all(len(r["qps_passes"]) == 1 for r in report["rows"])
    assert len(report["ratios"]["tokenspace/scipy @0.95"]["per_pass"]) == 1


def test_engines_picks_entries_of_the_peers_file(hh, load_benchmark, tmp_path, monkeypatch):
    _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 20, 2, seed=7)
    peers = tmp_path / "peers.json"
    peers.write_text(json.dumps([["scipy", {}], ["tokenspace", {"settings": [["exact", {"mode": "exact"}]]}],
                                 ["pisa", {}]]))
    hh.main(["--corpus-dir", str(tmp_path), "--name", "only", "--passes", "1", "--single", "2",
             "--peers-file", str(peers), "--engines", "tokenspace", "scipy"])
    report = json.loads((tmp_path / "out/benchmarks/results/head_to_head-only.json").read_text())
    assert [b["engine"] for b in report["builds"]] == ["scipy", "tokenspace"]  # the file's order, pisa left out


def test_each_engine_is_loaded_before_its_build_is_timed(hh, load_benchmark, tmp_path, monkeypatch):
    results = _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 20, 2, seed=8)
    from benchmarks.peers.tokenspace_peer import TokenspacePeer

    calls = []
    monkeypatch.setattr(TokenspacePeer, "load", lambda self: calls.append("load"))
    build = TokenspacePeer.build
    monkeypatch.setattr(TokenspacePeer, "build", lambda self, *a: (calls.append("build"), build(self, *a)))
    hh.main(["--corpus-dir", str(tmp_path), "--name", "load", "--passes", "1", "--single", "2",
             "--peer", "tokenspace", json.dumps({"settings": [["exact", {"mode": "exact"}]]})])
    assert calls == ["load", "build"] and (results / "head_to_head-load.json").exists()


def test_the_tokenspace_peer_loads_its_kernels_with_its_build_options():
    from benchmarks.peers.tokenspace_peer import TokenspacePeer

    for build in ({}, {"impact_heads": False}, {"approx_mass": 0.9}):
        TokenspacePeer(build=build).load()  # a 16-document build and save of each kind, in a temporary folder


def test_a_batch_only_race_reports_batch_ratios_from_interleaved_passes(hh, load_benchmark, tmp_path, monkeypatch):
    _tiny_race(load_benchmark, hh, monkeypatch, tmp_path, 90, 20, seed=9)
    (tmp_path / "out" / "docs").mkdir()
    ts = {"settings": [["exact", {"mode": "exact"}]]}
    hh.main(["--corpus-dir", str(tmp_path), "--name", "bat", "--batch-only", "--batch-threads", "2",
             "--batch-queries", "20", "--batch-passes", "3", "--batch-size", "7",
             "--peer", "tokenspace", json.dumps(ts), "--peer", "scipy", "{}"])
    report = json.loads((tmp_path / "out/benchmarks/results/head_to_head-bat.json").read_text())
    assert report["single_queries"] == 0 and report["batch"] == {"threads": 2, "queries": 20, "passes": 3, "size": 7}
    assert all(len(r["batch_qps_passes"]) == 3 and r["recall"] == r["batch_recall"] == 1.0 and "qps" not in r
               for r in report["rows"])
    assert len(report["batch_family_ratios"]["tokenspace/scipy @0.95"]["per_pass"]) == 3
    assert "| scipy | **" in report["verdict_batch"] and report["family_ratios"] == {}
    with pytest.raises(SystemExit):  # a batch race needs its threads
        hh.main(["--corpus-dir", str(tmp_path), "--batch-only", "--peer", "tokenspace", "{}"])


def test_the_tokenspace_peer_times_search_on_prepared_queries_and_answers_as_search_arrays(load_benchmark, tmp_path):
    from benchmarks.peers.tokenspace_peer import TokenspacePeer

    rng = np.random.default_rng(11)
    rows = [{int(t): float(rng.uniform(0.1, 2)) for t in rng.choice(300, size=8, replace=False)} for _ in range(60)]
    load_benchmark("real_corpus").write_corpus(tmp_path, SparseBatch.from_dicts(rows, dim=common.VOCAB_SIZE),
                                               SparseBatch.from_dicts(rows[:9], dim=common.VOCAB_SIZE))
    corpus = common.load_corpus(tmp_path, 60)
    peers = {api: TokenspacePeer(api=api) for api in ("search", "arrays")}
    assert TokenspacePeer().api == "search"  # a race times the call a user makes unless told otherwise
    for peer in peers.values():
        peer.build(corpus, tmp_path / peer.api)
        peer.prepare_queries(corpus)
    for r in range(9):
        got = [p.search_one(*corpus.query(r), 5, qrow=r).tolist() for p in peers.values()]
        assert got[0] == got[1] == peers["search"].search_one(*corpus.query(r), 5).tolist()
    batch = peers["search"].search_batch(corpus, np.arange(2, 9), 5, 2)
    assert [b.tolist() for b in batch] == [peers["arrays"].search_one(*corpus.query(r), 5).tolist() for r in range(2, 9)]


def test_a_pass_times_every_setting_chunk_by_chunk(hh, monkeypatch):
    """--chunk: each chunk of queries runs every cell (the order reversed from chunk to chunk) before the
    next chunk, and a cell's QPS in a pass is its queries over the time of all its chunks."""
    class Fake:
        def __init__(self, name):
            self.name = self.family = name

    a, b = Fake("a"), Fake("b")
    cells = [(a, "x", {}), (a, "y", {}), (b, "z", {})]
    seconds = {"x": 0.01, "y": 0.02, "z": 0.04}  # a query's time per setting
    calls = []

    def fake_time_pass(peer, corpus, rows, setting):
        label = next(lab for p, lab, s in cells if p is peer and s is setting)
        calls.append((label, [int(r) for r in rows]))
        return 1 / seconds[label], [np.array([int(r)]) for r in rows], 1 / seconds[label]

    class Corpus:
        q_indptr = np.arange(11)

    monkeypatch.setattr(hh, "time_pass", fake_time_pass)
    monkeypatch.setattr(hh, "recall_at", lambda answers, gt, k: [int(x[0]) for x in answers])
    rows = hh.race([a, b], Corpus(), np.zeros((10, 10), int), 10, 1, cells, chunk=4)
    timed = calls[len(cells):]  # after each cell's warm-up
    assert [lab for lab, _ in timed] == ["x", "y", "z", "z", "y", "x", "x", "y", "z"]
    assert [r for _, r in timed[:3]] == [[0, 1, 2, 3]] * 3 and timed[-1][1] == [8, 9]
    got = {r["setting"]: r for r in rows}
    assert got["z"]["qps_passes"] == [25.0] and got["x"]["cpu_qps_passes"] == [100.0]
    assert got["y"]["recall"] == list(range(10))  # every chunk's answers, in query order


def test_size_capped_ratio_races_only_the_builds_no_larger_than_the_peers_smallest(hh, tmp_path, capsys):
    # a1 is fast and large, a2 slow and small; b's smallest build reaching 0.95 is b2 (60 bytes): a1 is
    # left out there; at 0.99 only b1 (100 bytes) reaches it, so both of a's builds race
    rows = [{**_row("a1", "s", 0.99, [900, 800]), "family": "a"}, {**_row("a2", "s", 0.99, [300, 200]), "family": "a"},
            {**_row("b1", "s", 0.99, [100, 100]), "family": "b"}, {**_row("b2", "s", 0.96, [150, 200]), "family": "b"}]
    for r in rows:
        r["cpu_qps_passes"] = r["qps_passes"]
    builds = [{"engine": "a1", "index_bytes": 90}, {"engine": "a2", "index_bytes": 50},
              {"engine": "b1", "index_bytes": 100}, {"engine": "b2", "index_bytes": 60}]
    got = hh.size_capped_ratios({"rows": rows, "builds": builds})
    assert got["a/b @0.95"]["per_pass"] == [2.0, 1.0] and got["a/b @0.95"]["cap_bytes"] == 60
    assert got["a/b @0.99"]["per_pass"] == [9.0, 8.0] and got["a/b @0.99"]["cap_bytes"] == 100
    builds[1]["index_bytes"] = 70  # no build of a fits under 60 bytes
    assert hh.size_capped_ratios({"rows": rows, "builds": builds})["a/b @0.95"] is None
    path = tmp_path / "race.json"
    path.write_text(json.dumps({"rows": rows, "builds": builds, "date": "d", "commit": "c"}))
    assert hh.main(["size-capped", str(path)]) == 0
    assert "a/b @0.95: no build fits" in capsys.readouterr().out


def test_the_screen_keeps_a_lean_build_a_larger_one_beats(hh):
    """A setting beaten in speed at equal recall stays when the build that beats it is larger: the
    size-capped ratio races the builds under a cap, and a screen blind to size dropped them."""
    class P:
        def __init__(self, name):
            self.name, self.family = name, "tokenspace"

    big, lean, lean2 = P("big"), P("lean"), P("lean2")
    cells = [(big, "fast", {}), (lean, "slow", {}), (lean2, "slower", {}), (big, "exact", {})]
    seen = {("big", "fast"): (0.96, 1000.0), ("lean", "slow"): (0.95, 500.0), ("lean2", "slower"): (0.95, 400.0),
            ("big", "exact"): (1.0, 100.0)}
    labels = lambda keep: [(p.name, lab) for p, lab, _ in keep]  # noqa: E731
    # blind to size (no sizes known): the big build's fast setting beats both lean ones
    assert labels(hh.front(cells, seen, {})) == [("big", "fast"), ("big", "exact")]
    # the lean builds are smaller than the big one: each stays unless a build no larger beats it
    sizes = {"big": 100, "lean": 60, "lean2": 60}
    assert labels(hh.front(cells, seen, sizes)) == [("big", "fast"), ("lean", "slow"), ("big", "exact")]
    # a build of unknown size is never the smaller one
    assert labels(hh.front(cells, seen, {"lean": 60, "lean2": 60})) == [
        ("big", "fast"), ("lean", "slow"), ("big", "exact")]
