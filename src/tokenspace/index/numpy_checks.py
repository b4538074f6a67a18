"""The loader's row and list checks and the id hash in numpy: kernels.py's check_rows, check_lists and
fnv1a, with the same answers, for a small index in a process that has not loaded numba (road.py
chooses; tests/index/test_numpy_road.py checks each against its kernel)."""
from __future__ import annotations

import numpy as np

_FNV_OFFSET, _FNV_PRIME = np.uint64(14695981039346656037), np.uint64(1099511628211)


def check_rows(indptr, indices, values) -> int:
    """-1 if every row has strictly increasing dims and finite weights >= 0, else the first bad row
    (``indptr`` rising, as a SparseBatch's does)."""
    if len(indptr) < 2:
        return -1
    lo, hi = int(indptr[0]), int(indptr[-1])
    x, v = indices[lo:hi], values[lo:hi]
    bad = ~((v >= 0) & (v < np.inf))  # NaN fails both
    bad[1:] |= x[1:] <= x[:-1]
    starts = np.asarray(indptr[:-1], np.int64) - lo
    starts = starts[starts < len(x)]
    # a row's first entry follows no entry of its own row: only its weight counts there
    bad[starts] = ~((v[starts] >= 0) & (v[starts] < np.inf))
    first = np.flatnonzero(bad)
    if not len(first):
        return -1
    return int(np.searchsorted(indptr, first[0] + lo, side="right")) - 1


def check_lists(ptr, items, hi: int, per: int, chunk: int) -> int:
    """kernels.check_lists: -1 when ``ptr`` does not rise from 0 to len(items); else the first row whose
    items are outside [0, hi) or not strictly increasing (rows of per > 0 cells a term hold offsets in
    their posting chunk: below min(chunk, hi - (r % per) * chunk)); -2 when all is well."""
    if ptr[0] != 0 or ptr[-1] != len(items) or bool(np.any(ptr[1:] < ptr[:-1])):
        return -1
    if not len(items):
        return -2
    x = np.asarray(items).astype(np.int64)
    rows = np.arange(len(ptr) - 1)
    counts = np.diff(ptr)
    top = np.minimum(chunk, hi - (rows % per) * chunk) if per > 0 else np.full(len(rows), hi, np.int64)
    bad = x >= np.repeat(top, counts)
    bad[1:] |= x[1:] <= x[:-1]
    starts = np.asarray(ptr[:-1])[counts > 0]
    bad[starts] = (x[starts] < 0) | (x[starts] >= top[counts > 0])  # a row's first item: in range alone
    first = np.flatnonzero(bad)
    if not len(first):
        return -2
    return int(np.searchsorted(ptr, first[0], side="right")) - 1


def fnv1a(ptr, blob) -> np.ndarray:
    """uint64 FNV-1a hash of each row's bytes blob[ptr[i]:ptr[i + 1]], one byte position at a time over
    the rows still that long (longest first, so that they are a prefix)."""
    ptr = np.asarray(ptr, np.int64)
    blob = np.asarray(blob)
    lens = np.diff(ptr)
    order = np.argsort(-lens, kind="stable")
    starts, lens_sorted = ptr[:-1][order], lens[order]
    h = np.full(len(lens), _FNV_OFFSET, np.uint64)
    longest = int(lens_sorted[0]) if len(lens) else 0
    live = len(lens)
    for j in range(longest):
        while live and lens_sorted[live - 1] <= j:
            live -= 1
        h[:live] = (h[:live] ^ blob[starts[:live] + j].astype(np.uint64)) * _FNV_PRIME
    out = np.empty_like(h)
    out[order] = h
    return out
