"""real_engines.py's planning and reading of a sweep: which runs it makes, the Pareto front, and the
fastest setting at a recall (the speed targets are read off these)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def re_(load_benchmark):
    return load_benchmark("real_engines")


def test_knn_settings_go_only_to_builds_with_a_graph(re_):
    plain = {"n_postings": 100}
    graph = {"n_postings": 100, "nknn": 10}
    runs = re_.runs(["seismic", "pisa"], 10_000, knn=False, builds=[plain, graph])
    assert [peer for peer, _ in runs] == ["seismic", "seismic", "pisa"]
    labels = [[label for label, _ in opts["settings"]] for _, opts in runs[:2]]
    assert not any("knn" in lab for lab in labels[0])
    knn_labels = [lab for lab in labels[1] if "knn" in lab]
    assert knn_labels and set(labels[0]) < set(labels[1])
    # the default grid gains a graph build with --knn, and only that build is searched with n_knn
    grid = re_.runs(["seismic"], 100_000, knn=True)
    with_graph = [opts for _, opts in grid if opts["build"].get("nknn")]
    assert len(with_graph) == 1
    assert all(any("n_knn" in s for _, s in opts["settings"]) == bool(opts["build"].get("nknn"))
               for _, opts in grid)


def test_pareto_keeps_the_points_no_other_beats(re_):
    pts = [(0.90, 100.0, "a"), (0.95, 80.0, "b"), (0.93, 70.0, "c"), (0.99, 20.0, "d"), (0.85, 90.0, "e")]
    assert [lab for _, _, lab in re_.pareto(pts)] == ["a", "b", "d"]


def test_best_at_is_the_fastest_setting_reaching_the_recall(re_):
    res = {"peer": "x", "settings": [
        {"setting": "fast", "single_recall": 0.94, "single_qps": 900.0, "batch_recall": 0.96, "batch_qps": 5000.0},
        {"setting": "mid", "single_recall": 0.96, "single_qps": 700.0, "batch_recall": 0.96, "batch_qps": 3000.0},
        {"setting": "slow", "single_recall": 0.995, "single_qps": 300.0, "batch_recall": 0.995, "batch_qps": 1000.0}]}
    pts = re_.engine_points({"results": [res]})["x"]
    assert re_.best_at(pts, 0.95)[1]["setting"] == "mid"
    assert re_.best_at(pts, 0.95, "batch")[1]["setting"] == "fast"
    assert re_.best_at(pts, 0.99)[1]["setting"] == "slow"
    assert re_.best_at(pts, 0.999) is None


def test_grid_replaces_only_the_knobs_given_and_refuses_bad_ones(re_):
    grid = re_.parse_grid(["query_cut=5,6,7", "query_mass=0.62,0.65"])
    assert grid["query_cut"] == [5, 6, 7] and grid["query_mass"] == [0.62, 0.65]
    assert grid["heap_factor"] == re_.GRID["heap_factor"] and re_.GRID["query_cut"] == [5, 10, 20]
    labels = [label for label, _ in re_.seismic_settings(False, grid)]
    assert labels[:2] == ["qc=5 hf=0.7", "qc=5 hf=0.8"] and len(labels) == 3 * len(grid["heap_factor"])
    ts = re_.tokenspace_settings(grid)
    assert len(ts) == 1 + len(grid["rerank"]) * 2 * len(grid["alpha"])
    for bad, why in [("cut=5", "KNOB one of"), ("query_cut=", "KNOB one of"), ("rerank=5.5", "int values"),
                     ("alpha=x", "float values")]:
        with pytest.raises(ValueError, match=why):
            re_.parse_grid([bad])
