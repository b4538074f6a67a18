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


def contributions(query: SparseBatch, docs: SparseBatch, top_k: int | None = None, *,
                  vocab=None) -> list[list[Contribution]]:
    """For one query row and each doc row: the shared tokens, largest contribution first (ties: the
    lower token id first). Their contributions sum to the dot product (the hit's score). ``vocab`` names
    the dimensions (default: the docs' vocabulary, else the query's; without one a token is its id).

    All rows in one pass: each stored entry of ``docs`` is looked up among the query's dimensions at
    once, and only the shared ones become Python objects. Why: a row at a time (numpy's intersect1d per
    hit) cost more than the search itself for a page of hits, and the service explains every hit."""
    if len(query) != 1:
        raise ValueError("contributions takes a single query row")
    if query.dim != docs.dim:
        raise ValueError(f"query dim {query.dim} != document dim {docs.dim}")
    vocab = vocab if vocab is not None else docs.vocab or query.vocab
    if vocab is not None and len(vocab) != docs.dim:
        raise ValueError(f"vocabulary has {len(vocab)} entries but dim is {docs.dim}")
    qi, qv = query.row(0)
    n = len(docs)
    if not len(qi) or not docs.nnz:
        return [[] for _ in range(n)]
    if len(qi) > 1 and (qi[1:] <= qi[:-1]).any():  # the lookup below needs the query's dims in order
        order = np.argsort(qi, kind="stable")
        qi, qv = qi[order], qv[order]
    di = docs.indices
    at = np.minimum(np.searchsorted(qi, di), len(qi) - 1)  # where each doc entry's dim is (or would be) in qi
    shared = np.flatnonzero(qi[at] == di)
    row = np.searchsorted(docs.indptr, shared, side="right") - 1
    token = di[shared]
    # float64, as the Python floats the contributions are: the product is the one Contribution computes
    qw, dw = qv[at[shared]].astype(np.float64), docs.values[shared].astype(np.float64)
    order = np.lexsort((token, -(qw * dw), row))  # by row, then largest contribution, then token id
    counts = np.bincount(row, minlength=n)
    names = vocab.tokens if vocab is not None else None
    out, start = [], 0
    token, qw, dw = token[order].tolist(), qw[order].tolist(), dw[order].tolist()
    for end in np.cumsum(counts).tolist():
        parts = [Contribution(names[t] if names is not None else str(t), q, d)
                 for t, q, d in zip(token[start:end], qw[start:end], dw[start:end])]
        out.append(parts[:top_k] if top_k is not None else parts)
        start = end
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
