"""Hubness reduction and collection statistics for ranking: CSLS's per-document prior, BM25's idf.

Hubs are documents that sit near many queries at once (in a learned space some images score high for
almost any text: "a rocket" and "an astronaut" both find the photo of grass). CSLS (Conneau et al.,
"Word translation without parallel data", ICLR 2018) corrects the score of a pair by how crowded each
side's neighbourhood is:

    CSLS(q, d) = 2 cos(q, d) - r_Q(q) - r_D(d),    r_D(d) = mean of d's K largest similarities to a bank of queries

For one query r_Q(q) is a constant, so the ranking is that of cos(q, d) - r_D(d) / 2: a per-document
prior. ``csls_hubness`` computes r_D from a *bank* of query vectors (training captions or a list of
prompts, never test queries); the index stores it and subtracts ``weight * r_D`` inside its kernels
(InvertedIndex.set_hub_prior; weight 0.5 is CSLS's formula).

``idf`` is BM25's inverse document frequency over the index's own postings (what Qdrant's IDF modifier
applies to sparse vectors): a query term held by most images says little about any one of them.

No torch here: the index side stays torch-free.
"""
from __future__ import annotations

import numpy as np

from tokenspace.sparse import SparseBatch

CSLS_WEIGHT = 0.5  # r_D's weight in a per-query ranking by 2 cos - r_Q - r_D, halved
DEFAULT_K = 10


def csls_hubness(docs: SparseBatch, bank: SparseBatch, k: int = DEFAULT_K, chunk: int = 2048) -> np.ndarray:
    """r_D of every document row: the mean of its ``k`` largest dot products with the ``bank`` rows
    (all of them when the bank holds fewer than k). float32[len(docs)], >= 0 for non-negative vectors.
    ``chunk`` documents at a time (a chunk x len(bank) float32 block is held at once)."""
    if not isinstance(docs, SparseBatch) or not isinstance(bank, SparseBatch):
        raise TypeError("csls_hubness takes SparseBatch documents and a SparseBatch bank")
    if docs.dim != bank.dim:
        raise ValueError(f"the bank has dim {bank.dim}, the documents {docs.dim}")
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    if len(bank) == 0:
        raise ValueError("the query bank is empty: give it training captions or prompts")
    kk = min(int(k), len(bank))
    bank_t = bank.to_scipy().T.tocsr()
    out = np.zeros(len(docs), np.float32)
    for start in range(0, len(docs), chunk):
        part = docs[start:start + chunk].to_scipy()
        sims = (part @ bank_t).toarray()  # [chunk, len(bank)]
        top = np.partition(sims, sims.shape[1] - kk, axis=1)[:, -kk:] if kk < sims.shape[1] else sims
        out[start:start + len(sims)] = top.mean(axis=1, dtype=np.float64)
    return out


def bm25_idf(df: np.ndarray, n: int) -> np.ndarray:
    """BM25's idf, ln(1 + (n - df + 0.5) / (df + 0.5)), float32 per term: > 0 for every df in [0, n],
    the largest for terms in no document. (The "+ 1" inside the log keeps it positive for df > n / 2,
    as Lucene and Qdrant do.)"""
    df = np.asarray(df, np.float64)
    return np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)


def weigh_queries(queries: SparseBatch, factors: np.ndarray) -> SparseBatch:
    """Each query weight times ``factors[dim]`` (float32 per dim, e.g. idf ** power)."""
    return SparseBatch(queries.indptr, queries.indices, queries.values * factors[queries.indices], queries.dim,
                       queries.vocab)


def generic_factors(docs: SparseBatch, share: float) -> np.ndarray:
    """float32[dim]: 1 for a dim held by at most ``share`` of the documents, share / (its share) above
    that, so a token in every image keeps ``share`` of its weight (generic image tokens: a token most
    images carry matches most queries' expansions and explains nothing)."""
    if not (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1):
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    held = np.bincount(docs.indices[docs.values > 0], minlength=docs.dim) / max(1, len(docs))
    return np.where(held > share, share / np.maximum(held, 1e-12), 1.0).astype(np.float32)


def down_weight_generic(docs: SparseBatch, share: float, factors: np.ndarray | None = None,
                        normalize: bool = True) -> SparseBatch:
    """The documents with their generic tokens down-weighted (``factors``, default generic_factors of
    the documents themselves) and, with ``normalize``, each row L2-normalised again: an image made
    mostly of generic tokens then weighs its specific ones more."""
    factors = generic_factors(docs, share) if factors is None else factors
    values = docs.values * factors[docs.indices]
    if normalize and len(values):
        rows = np.repeat(np.arange(len(docs)), docs.row_nnz())
        norms = np.sqrt(np.bincount(rows, weights=values.astype(np.float64) ** 2, minlength=len(docs)))
        values = values / np.where(norms > 0, norms, 1.0)[rows]
    return SparseBatch(docs.indptr, docs.indices, values.astype(np.float32), docs.dim, docs.vocab)
