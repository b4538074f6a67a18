"""benchmarks/rescore_rows.py: every touch mode scores a row as numpy does, and the run writes its table."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import rescore_rows


def _corpus(tmp_path, n=300, dim=500, seed=7):
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 90, n)  # empty rows, and rows over several cache lines
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(dim, k, replace=False)) for k in lens]).astype(np.int32)
    values = rng.random(int(indptr[-1])).astype(np.float32)
    for name, a in (("d_indptr", indptr), ("d_indices", indices), ("d_data", values)):
        np.save(tmp_path / f"{name}.npy", a)
    return indptr, indices, values


@pytest.mark.parametrize("mode", range(len(rescore_rows.MODES)))
def test_every_mode_scores_rows_as_numpy(tmp_path, mode):
    indptr, indices, values = _corpus(tmp_path)
    store = rescore_rows.load_store(tmp_path, 500)
    assert store[1].dtype == np.uint16
    q = np.random.default_rng(1).random(500).astype(np.float32)
    rows = np.array([0, 5, 299, 5, 17])
    out = np.empty(len(rows), np.float32)
    rescore_rows.score_rows(*store, rows, q, mode, out)
    want = [np.dot(q[indices[indptr[r]:indptr[r + 1]]], values[indptr[r]:indptr[r + 1]]) for r in rows]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_cli_writes_a_row_per_mode(tmp_path, capsys):
    _corpus(tmp_path)
    out = tmp_path / "r.json"
    rescore_rows.cli(["--corpus-dir", str(tmp_path), "--rows", "20", "--draws", "5", "--passes", "2", "--dim", "500",
                      "--out", str(out)])
    doc = json.loads(out.read_text())
    assert set(doc["ns_per_row"]) == set(rescore_rows.MODES) and all(v > 0 for v in doc["ns_per_row"].values())
    assert doc["n_docs"] == 300 and doc["commit"]
    assert "| every line |" in capsys.readouterr().out
