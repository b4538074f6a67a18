"""Query hubs: tokens a model's text side adds to most queries, whatever they ask for (numpy and scipy only).

A learned expansion that puts ``def``, ``tower`` or ``wash`` into "a red car", "a cup of coffee" and "a
lighthouse" alike carries no meaning for any of them, and the page shows it to the user as the query's
words. Over a set of queries (rows of encoded text), a token is a hub when it is among the ``top``
heaviest tokens of at least ``min_share`` of them; the measure is the share of the queries' top-``top``
weight that hubs carry (0: every query's heaviest tokens are its own).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class HubReport:
    hubs: dict[int, float]  # token id -> the fraction of queries holding it among their top tokens
    weight_share: float  # of the queries' top-``top`` weight, the part on hub tokens
    top: int
    min_share: float

    def to_dict(self, tokens=None) -> dict:
        name = (lambda i: tokens[i]) if tokens is not None else str  # noqa: E731
        return {"weight_share": self.weight_share, "top": self.top, "min_share": self.min_share,
                "hubs": {name(i): round(f, 3) for i, f in sorted(self.hubs.items(), key=lambda x: -x[1])}}


def top_tokens(rows: sp.csr_matrix, top: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each row's ``top`` heaviest (ids, weights), heaviest first (ties: lower id first)."""
    rows = sp.csr_matrix(rows)
    out = []
    for i in range(rows.shape[0]):
        lo, hi = rows.indptr[i], rows.indptr[i + 1]
        ids, w = rows.indices[lo:hi], rows.data[lo:hi]
        order = np.lexsort((ids, -w))[:top]
        out.append((ids[order], w[order]))
    return out


def query_hubs(rows, top: int = 20, min_share: float = 0.2) -> HubReport:
    """Hub tokens of a set of encoded queries (``rows``: [Q, V], a SparseBatch's csr or any scipy
    sparse / dense matrix) and the weight share they carry."""
    if not 0 < min_share <= 1 or top < 1:
        raise ValueError(f"top must be >= 1 and min_share in (0, 1], not {top}, {min_share}")
    rows = sp.csr_matrix(rows)
    if rows.shape[0] == 0:
        raise ValueError("query_hubs needs at least one query")
    tops = top_tokens(rows, top)
    counts: dict[int, int] = {}
    for ids, _ in tops:
        for t in ids.tolist():
            counts[t] = counts.get(t, 0) + 1
    n = rows.shape[0]
    hubs = {t: c / n for t, c in counts.items() if c / n >= min_share}
    total = sum(float(w.sum()) for _, w in tops)
    on_hubs = sum(float(w[np.isin(ids, list(hubs))].sum()) for ids, w in tops) if hubs else 0.0
    return HubReport(hubs, on_hubs / total if total > 0 else 0.0, top, min_share)
