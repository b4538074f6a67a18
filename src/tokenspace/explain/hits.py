"""Why an image matched: the query's score split into per-token contributions.

A sparse dot product is a sum over shared dimensions, so a hit's score decomposes exactly into
query_weight * image_weight per token: the explanation is the score, not an approximation of it.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from tokenspace.sparse import SparseBatch


@dataclass(frozen=True)
class Contribution:
    token: str
    query_weight: float
    doc_weight: float

    @property
    def contribution(self) -> float:
        return self.query_weight * self.doc_weight

    def to_dict(self) -> dict:
        return {"token": self.token, "query_weight": self.query_weight, "doc_weight": self.doc_weight,
                "contribution": self.contribution}


def contributions(query: SparseBatch, docs: SparseBatch, top_k: int | None = None) -> list[list[Contribution]]:
    """For one query row and each doc row: the shared tokens, largest contribution first.
    Their contributions sum to the dot product (the hit's score)."""
    if len(query) != 1:
        raise ValueError("contributions takes a single query row")
    if query.dim != docs.dim:
        raise ValueError(f"query dim {query.dim} != document dim {docs.dim}")
    vocab = docs.vocab or query.vocab
    qi, qv = query.row(0)
    out = []
    for d in range(len(docs)):
        di, dv = docs.row(d)
        shared, qa, da = np.intersect1d(qi, di, assume_unique=True, return_indices=True)
        parts = [Contribution(vocab.token(int(t)) if vocab is not None else str(int(t)), float(qv[a]), float(dv[b]))
                 for t, a, b in zip(shared, qa, da)]
        parts.sort(key=lambda c: -c.contribution)
        out.append(parts[:top_k] if top_k is not None else parts)
    return out


def caption(text: str, width: int = 60) -> str:
    """``text`` on one line in at most ``width`` characters, cut at a word boundary with an ellipsis."""
    short = textwrap.shorten(text, width, placeholder=" …")
    if short == "…":  # one word longer than width: cut inside it
        return " ".join(text.split())[:width - 1] + "…"
    return short


def format_hit(rank: int, hit_id: str, score: float, parts: list[Contribution], text: str | None = None,
               top: int = 6, penalty: float = 0.0) -> str:
    """One line per hit for terminals: rank, score, id, and the tokens that made the score (and the hub
    prior's penalty, when there is one)."""
    toks = ", ".join(f"{c.token} {c.contribution:.3f}" for c in parts[:top])
    label = f"  ({caption(text)})" if text else ""
    hub = f"; hub penalty -{penalty:.3f}" if penalty else ""
    return f"{rank:>3}. {score:.4f}  {hit_id}{label}\n       matched: {toks or '-'}{hub}"
