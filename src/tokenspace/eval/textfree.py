"""Text-encoder-free query side (STAIR_IMAGE, stair.txt App. E.2): a text is the mask of its tokens.

Only the image encoder runs; each caption or class prompt becomes a sparse vector over the vocabulary
that is nonzero on every (non-special) token it tokenizes into. Feed the result to RetrievalEvaluator
(as the text embeddings) or ZeroShotEvaluator (``encode_text=TokenMaskEncoder(...)``).

The mask is L2-normalised (weight 1/sqrt(#tokens)) by default: STAIR scores a pair by cosine
similarity (eq. 2), and the image side is already unit-norm, so a plain dot product with the
normalised mask *is* that cosine. A 0/1 mask would score by sqrt(#tokens) x cosine instead and rank a
long caption above a short one with the same cosine when one image is the query (image -> text).
Text -> image rankings are the same either way (one query's scores are all scaled alike).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tokenspace.sparse import SparseBatch


def token_mask_embeddings(texts: Sequence[str], token_ids: Callable[[str], Sequence[int]], dim: int,
                          vocab=None, exclude_ids: Sequence[int] | None = None,
                          normalize: bool = True) -> SparseBatch:
    """One row per text, equal weight on each distinct token id (repeats count once: a mask, not a bag):
    1/sqrt(#tokens) when ``normalize`` (unit-norm rows, cosine scoring), else 1.0 (the raw 0/1 mask)."""
    if isinstance(texts, str):
        raise TypeError("token_mask_embeddings takes a list of texts (batches in, batches out)")
    if exclude_ids is None:
        exclude_ids = vocab.special_ids if vocab is not None else ()
    exclude = np.asarray(list(exclude_ids), np.int64)
    indptr, indices, values = [0], [], []
    for t in texts:
        ids = np.unique(np.asarray(list(token_ids(t)), np.int64))
        ids = ids[~np.isin(ids, exclude)]
        indices.extend(ids.tolist())
        w = 1.0 / np.sqrt(len(ids)) if normalize and len(ids) else 1.0
        values.extend([w] * len(ids))
        indptr.append(len(indices))
    return SparseBatch(np.array(indptr), np.array(indices, np.int32), np.array(values, np.float32), dim, vocab)


class TokenMaskEncoder:
    """An ``encode_text`` callable that needs no text model: texts -> (L2-normalised) token masks."""

    def __init__(self, token_ids: Callable[[str], Sequence[int]], dim: int, vocab=None,
                 exclude_ids: Sequence[int] | None = None, normalize: bool = True):
        self.token_ids, self.dim, self.vocab, self.exclude_ids = token_ids, dim, vocab, exclude_ids
        self.normalize = normalize

    def __call__(self, texts: Sequence[str]) -> SparseBatch:
        return token_mask_embeddings(texts, self.token_ids, self.dim, self.vocab, self.exclude_ids, self.normalize)
