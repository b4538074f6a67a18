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

Feature steering (Sparse CLIP Sec. 4, Fig. 8b) acts on an *image's* raw activations instead: zero the
top-K features of the true label and set the top-K features of an alternative label to a steering
strength (SS), the features chosen through the text encoder (the label's own raw text activations).
The paper feeds the steered vector to a VLM; with no VLM here, ``steering_sweep`` (eval/steering.py) runs
the same protocol on zero-shot classification and counts how often the prediction becomes the alternative
label.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from tokenspace.sparse import SparseBatch


def resolve_tokens(tokens, vocab) -> list[int]:
    """Dimension ids of ``tokens``: a vocabulary entry as typed, else a word that the vocabulary's
    tokenizer turns into exactly one entry ("Dog", "dog " -> dog), as a boolean query's words are read.
    ValueError naming *every* unknown one (one round trip to fix them), with the pieces of a word that
    is several tokens ("dogs" = dog ##s)."""
    if vocab is None:
        raise ValueError("resolving tokens needs a vocabulary")
    ids, unknown, split = [], [], []
    for t in tokens:
        d, pieces = _one_token(t, vocab)
        if d is None:
            unknown.append(t)
            if len(pieces) > 1:
                split.append(f"{t!r} is {' '.join(vocab.tokens[p] for p in pieces)}")
        ids.append(d)
    if unknown:
        why = f" ({'; '.join(split)}: one token each here; a `where` query takes such words)" if split else ""
        raise ValueError(f"unknown tokens {unknown} (not in the {len(vocab)}-entry vocabulary {vocab.name!r}){why}")
    return ids


def _one_token(word: str, vocab) -> tuple[int | None, list[int]]:
    """(dim, []) for an entry or a one-token word; (None, the word's pieces) otherwise (none for an
    unknown word; vocabularies without a WordPiece tokenizer, f00012, take names only)."""
    if word in vocab:
        return vocab.id(word), []
    pieces = vocab.word_ids(word) or []
    return (pieces[0], []) if len(pieces) == 1 else (None, pieces)


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



# ------------------------------------------------------------------------------ feature steering (Sec. 4)
def top_features(acts: np.ndarray, k: int) -> np.ndarray:
    """[C, F] raw activations -> [C, k] ids of each row's k most active features, heaviest first (ties:
    lower id); -1 pads a row with fewer than k active features (nothing to steer there)."""
    acts = np.asarray(acts, np.float32)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k_eff = min(k, acts.shape[1])
    order = np.lexsort((np.broadcast_to(np.arange(acts.shape[1]), acts.shape), -acts), axis=1)[:, :k_eff]
    ids = np.where(np.take_along_axis(acts, order, 1) > 0, order, -1)
    return np.pad(ids, ((0, 0), (0, k - k_eff)), constant_values=-1)


def steer_features(acts: np.ndarray, suppress: np.ndarray, boost: np.ndarray | None = None,
                   strength: float = 2.0) -> np.ndarray:
    """A steered copy of [N, F] activations: row i's features ``suppress[i]`` set to 0, then its
    features ``boost[i]`` set to ``strength`` (the paper's "dog 1.21 -> 0.0, cat 0.0 -> 2.0"); -1 ids
    are skipped. A feature in both lists ends at ``strength``."""
    out = np.array(acts, np.float32, copy=True)
    for ids, value in ((suppress, 0.0), (boost, strength)):
        if ids is None:
            continue
        ids = np.asarray(ids)
        rows = np.broadcast_to(np.arange(len(out))[:, None], ids.shape)
        keep = ids >= 0
        out[rows[keep], ids[keep]] = value
    return out
