"""benchmarks/fitted_corpus.py on a tiny batch: the generated corpus keeps the input's statistics."""
from __future__ import annotations

import numpy as np
import pytest

from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def fitted(load_benchmark):
    return load_benchmark("fitted_corpus")


def _tiny(rng) -> SparseBatch:
    """20 rows over 50 dims: token 3 in every row with weight 2.0, others rarer, nnz in [3, 8]."""
    rows = []
    for _ in range(20):
        row = {3: 2.0}
        for t in rng.choice(np.arange(10, 30), size=rng.integers(2, 8), replace=False):
            row[int(t)] = float(rng.choice([0.25, 0.5, 1.0]))
        rows.append(row)
    return SparseBatch.from_dicts(rows, dim=50)


def test_generated_rows_follow_the_input(fitted, tmp_path):
    rng = np.random.default_rng(0)
    src = _tiny(rng)
    src.save(tmp_path / "stair.npz")
    docs, queries = fitted.fit_and_generate(tmp_path / "stair.npz", tmp_path / "out", n=3000, n_queries=50, seed=1)
    assert len(docs) == 3000 and len(queries) == 50 and docs.dim == 50
    # nnz per row only takes values the input had
    assert set(np.unique(docs.row_nnz())) <= set(np.unique(src.row_nnz()))
    # tokens only from the input's support; rows sorted and without repeats (SparseBatch checks range)
    assert set(np.unique(docs.indices)) <= set(np.unique(src.indices))
    for i in range(0, 3000, 97):
        idx, _ = docs.row(i)
        assert np.all(np.diff(idx) > 0)
    # each token's weights come from that token's observed weights
    d, s = docs.to_scipy().tocsc(), src.to_scipy().tocsc()
    for t in np.unique(docs.indices):
        assert set(d[:, t].data) <= set(s[:, t].data)
    # the token that is in every input row is in (almost) every generated row: frequency is kept
    assert (d[:, 3].nnz / 3000) > 0.95
    assert np.allclose(d[:, 3].data, 2.0)
    assert abs(docs.row_nnz().mean() - src.row_nnz().mean()) < 0.3
    # document frequency of every token is matched (calibrated draws), not just its order
    np.testing.assert_allclose(np.bincount(docs.indices, minlength=50) / 3000,
                               np.bincount(src.indices, minlength=50) / 20, atol=0.06)

    # the files are what search_speed.py reads, and a seed reproduces them
    back = SparseBatch(np.load(tmp_path / "out/d_indptr.npy"), np.load(tmp_path / "out/d_indices.npy"),
                       np.load(tmp_path / "out/d_data.npy"), 50)
    np.testing.assert_array_equal(back.to_dense(), docs.to_dense())
    again, _ = fitted.fit_and_generate(tmp_path / "stair.npz", tmp_path / "out2", n=3000, n_queries=50, seed=1)
    np.testing.assert_array_equal(again.indices, docs.indices)


def test_rejects_empty_input(fitted):
    with pytest.raises(ValueError, match="non-empty"):
        fitted.FittedSampler(SparseBatch.empty(3, 10))
