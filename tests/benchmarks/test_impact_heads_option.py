"""experiments/impact_heads_option.py's pieces on a tiny random collection."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tomllib

from tokenspace.sparse import SparseBatch


def _batch(n, dim, seed):
    rng = np.random.default_rng(seed)
    rows = [{int(t): float(w) for t, w in zip(rng.choice(dim, 6, replace=False), rng.random(6) + 0.1)}
            for _ in range(n)]
    return SparseBatch.from_dicts(rows, dim)


def test_sizes_and_the_interleaved_ab(load_benchmark, tmp_path):
    mod = load_benchmark("impact_heads_option")
    docs = _batch(300, 50, 1)
    row, indexes = mod.sizes(docs, [str(i) for i in range(300)], tmp_path)
    assert row["impact_heads=False"]["index_bytes"] < row["impact_heads=True"]["index_bytes"]
    assert indexes[True]._segments[0].has_heads and not indexes[False]._segments[0].has_heads
    queries = [_batch(1, 50, 10 + i) for i in range(20)]
    settings = tomllib.loads((Path(mod.__file__).with_suffix(".toml")).read_text())["search"]["settings"]
    for setting in settings.values():
        got = mod.interleaved(indexes, queries, setting, np.random.default_rng(0))
        assert got["same_hits"] == 1.0 and got["qps_with_heads"] > 0 and got["qps_without"] > 0
