"""Steering: boost or suppress tokens of a query vector before it is searched.

A sparse query is a bag of weighted tokens, so steering is plain arithmetic on its weights and the
result stays explainable: every hit's score is still the sum of query_weight x image_weight over the
shared tokens, with the steered weights.

    steer(q, {"dog": 2.0})    doubles dog's weight (the query leans towards dogs)
    steer(q, {"cat": 0})      removes cat from the query (cat no longer adds to any score)
    steer(q, {"beach": 1.0})  adds beach (absent from the query) as strong as the query's top token

Present tokens are *scaled* by their factor; absent tokens are *added* with factor x the row's
largest weight, so a factor means the same thing in both cases (relative to the query's own scale)
whatever the model's normalisation. Steered queries are not re-normalised: the weights the page shows
are the ones that produced the score.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from tokenspace.sparse import SparseBatch


def resolve_tokens(tokens, vocab) -> list[int]:
    """Dimension ids of ``tokens``; ValueError naming *every* unknown one (one round trip to fix them)."""
    if vocab is None:
        raise ValueError("resolving tokens needs a vocabulary")
    unknown = [t for t in tokens if t not in vocab]
    if unknown:
        raise ValueError(f"unknown tokens {unknown} (not in the {len(vocab)}-entry vocabulary {vocab.name!r})")
    return [vocab.id(t) for t in tokens]


def steer(query: SparseBatch, weights: Mapping[str, float], vocab=None) -> SparseBatch:
    """Apply ``{token: factor}`` to every row of ``query``: factor 0 removes the token, other factors
    scale it (present) or add it at factor x the row's max weight (absent). Factors must be finite and
    >= 0 (the index needs non-negative weights; suppress with a factor below 1)."""
    vocab = vocab if vocab is not None else query.vocab
    if not weights:
        return query
    bad = {t: w for t, w in weights.items() if not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0}
    if bad:
        raise ValueError(f"steering factors must be finite numbers >= 0, got {bad}")
    dims = resolve_tokens(list(weights), vocab)
    factor = {d: float(weights[t]) for t, d in zip(weights, dims)}
    rows = []
    for i in range(len(query)):
        idx, val = query.row(i)
        row = {int(d): float(v) for d, v in zip(idx, val)}
        top = max(row.values(), default=1.0)  # an empty row adds at the raw factor
        for d, f in factor.items():
            row[d] = row[d] * f if d in row else f * top
        rows.append({d: w for d, w in row.items() if w > 0})
    out = SparseBatch.from_dicts(rows, dim=query.dim)
    return out.with_vocab(query.vocab if query.vocab is not None else vocab)

