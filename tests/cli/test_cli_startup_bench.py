"""benchmarks.cli_startup on the tiny world: one run of the search (this checkout only), its breakdown
and the --help table, written as JSON with the run record."""
from __future__ import annotations

import json


def test_cli_startup_benchmark_runs_and_writes_its_record(world, tmp_path, load_benchmark, monkeypatch):
    bench = load_benchmark("cli_startup")
    monkeypatch.setenv("TOKENSPACE_HOME", str(world.home))
    out = tmp_path / "cli.json"
    bench.main(["--runs", "1", "--no-base", "--index", str(world.index), "--out", str(out)])
    doc = json.loads(out.read_text())
    assert {"date", "commit", "machine", "command"} <= set(doc)
    assert doc["command"].startswith("python -m benchmarks.cli_startup --runs 1")
    search = doc["search"]
    assert search["base_commit"] is None and search["new"]["median_s"] > 0
    steps = search["new"]["breakdown_median_s"]
    assert {"import torch", "load the index", "load the model", "encode the query", "total"} <= set(steps)
    assert any(r["command"] == "tokenspace search --help" for r in doc["rows"])
