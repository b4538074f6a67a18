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


def cut_reference(idx, val, mass):
    """The heaviest terms covering `mass` of the L1 weight, ties to the earlier term, in dim order."""
    order = np.argsort(-val, kind="stable")
    cum = np.cumsum(val[order].astype(np.float64))
    n = int(np.searchsorted(cum, mass * float(val.astype(np.float64).sum()) - 1e-12)) + 1
    keep = np.sort(order[:min(n, len(val))])
    return idx[keep], val[keep]


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


def as_older_format(root, doc: dict, version: int) -> dict:
    """Rewrite the segments of the saved index folder ``root`` as format ``version`` (< 10) wrote them:
    whole main lists, and from version 4 nested impact heads (level L: every posting of code >=
    HEAD_CODES[L]) instead of bands; returns the manifest ``doc`` with its file entries and version to
    match (the caller writes it). Plain loops over (term, chunk) cells: for tiny test indexes."""
    from tokenspace.index import storage
    from tokenspace.index.layout import HEAD_CODES
    from tokenspace.index.segment import BANDS, HEADS

    def cells(ptr, docs, codes, first, nch):
        return [(docs[ptr[first + c]:ptr[first + c + 1]], codes[ptr[first + c]:ptr[first + c + 1]]) for c in range(nch)]

    def merged(parts):
        d = np.concatenate([p[0] for p in parts]).astype(np.uint16)
        c = np.concatenate([p[1] for p in parts]).astype(np.uint8)
        order = np.argsort(d, kind="stable")
        return d[order], c[order]

    def csr(rows):
        ptr = np.zeros(len(rows) + 1, np.int64)
        ptr[1:] = np.cumsum([len(r[0]) for r in rows])
        docs = np.concatenate([r[0] for r in rows]).astype(np.uint16) if rows else np.empty(0, np.uint16)
        codes = np.concatenate([r[1] for r in rows]).astype(np.uint8) if rows else np.empty(0, np.uint8)
        return ptr, docs, codes

    for seg in doc["segments"]:
        a = {x: np.load(root / f"{seg['name']}/{x}.npy") for x in ("main_ptr", "main_docs", "main_codes", "dense_slot",
                                                                    *BANDS)}
        dim = len(a["dense_slot"])
        nch = (len(a["main_ptr"]) - 1) // dim
        levels = len(HEAD_CODES)
        if len(a["band_ptr"]) == 1:  # built without heads: whole main lists, a one-entry head_ptr
            out = dict(zip(HEADS, (a[b] for b in BANDS)))
        else:
            band = [[cells(a["band_ptr"], a["band_docs"], a["band_codes"], (L * dim + t) * nch, nch) for t in range(dim)]
                    for L in range(levels)]
            main = [cells(a["main_ptr"], a["main_docs"], a["main_codes"], t * nch, nch) for t in range(dim)]
            whole = [merged([main[t][c]] + ([band[L][t][c] for L in range(levels)] if a["dense_slot"][t] < 0 else []))
                     for t in range(dim) for c in range(nch)]
            nested = [merged([band[b][t][c] for b in range(L + 1)]) for L in range(levels) for t in range(dim)
                      for c in range(nch)]
            out = dict(zip(("main_ptr", "main_docs", "main_codes"), csr(whole)), **dict(zip(HEADS, csr(nested))))
        for name in BANDS:
            rel = f"{seg['name']}/{name}.npy"
            del seg["files"][rel]
            (root / rel).unlink()
        for name, arr in out.items():
            if version < 4 and name in HEADS:
                continue
            rel = f"{seg['name']}/{name}.npy"
            seg["files"][rel] = storage.write_array(root / rel, arr)
    doc["version"] = version
    return doc
