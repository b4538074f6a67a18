"""Tiny random collections for the inverted-index tests (shared by tests/index/test_inverted*.py)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tokenspace.sparse import SparseBatch


def random_batch(n, dim, density, seed, grid: float | None = None, zipf: bool = False) -> SparseBatch:
    """Random non-negative rows. grid=0.25 puts weights on multiples of 1/4 (exact float sums -> real
    ties); zipf=True skews dims so some columns are dense (exercises the dense-column path)."""
    rng = np.random.default_rng(seed)
    if zipf:
        p = 1.0 / np.arange(1, dim + 1) ** 1.1
        p /= p.sum()
        rows = []
        for _ in range(n):
            m = max(1, rng.poisson(density * dim))
            rows.append(np.unique(rng.choice(dim, size=min(m, dim), p=p)))
        indptr = np.cumsum([0] + [len(r) for r in rows])
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int32)
    else:
        m = sp.random(n, dim, density=density, random_state=seed, format="csr")
        m.sort_indices()
        indptr, indices = m.indptr, m.indices
    vals = rng.lognormal(0, 1, len(indices))
    vals = np.log1p(vals)
    if grid:
        vals = np.maximum(np.round(vals / grid), 1) * grid
    return SparseBatch(indptr, indices, vals.astype(np.float32), dim)


def ids_for(n, prefix="d"):
    return [f"{prefix}{i}" for i in range(n)]


def assert_same_hits(got, want, tol=1e-5):
    """Same ids in the same order, except that docs whose scores tie within tol may swap."""
    assert len(got) == len(want), [len(g) for g in got]
    for g, w in zip(got, want):
        assert len(g) == len(w), (g, w)
        for a, b in zip(g, w):
            assert abs(a.score - b.score) <= tol * max(1.0, abs(b.score)), (a, b)
        if [h.id for h in g] != [h.id for h in w]:  # ids may differ only where scores nearly tie
            for a, b in zip(g, w):
                if a.id != b.id:
                    assert abs(a.score - b.score) <= tol * max(1.0, abs(b.score)), (g, w)
