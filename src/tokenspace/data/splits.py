"""Deterministic, order-free split assignment.

A key's bucket is a hash of (seed, key) mapped to [0, 1). The held-out set is the exact fraction of
keys with the smallest buckets: unlike a shuffled list, adding or removing a few items elsewhere only
moves keys at the margin, and unlike a per-key threshold the held-out size is exact.
"""
from __future__ import annotations

import hashlib


def bucket(key: str, seed: int | str = 0) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``key``."""
    h = hashlib.sha1(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


def holdout_set(keys, fraction: float, seed: int | str = 0) -> set:
    """The ``round(fraction * len(keys))`` keys with the smallest buckets."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"hold-out fraction must be in [0, 1], got {fraction}")
    keys = sorted(set(keys))
    n = round(fraction * len(keys))
    return set(sorted(keys, key=lambda k: (bucket(k, seed), k))[:n])


def subsample(keys, n: int | None, seed: int | str = 0) -> set:
    """A deterministic subset of ``n`` keys (all of them when n is None or larger)."""
    keys = list(keys)
    if n is None or n >= len(keys):
        return set(keys)
    return set(sorted(keys, key=lambda k: (bucket(k, f"sub-{seed}"), k))[:n])
