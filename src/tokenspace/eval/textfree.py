"""Text-encoder-free query side (STAIR_IMAGE, stair.txt App. E.2): a text is the 0/1 mask of its tokens.

Only the image encoder runs; each caption or class prompt becomes a sparse vector with weight 1 on
every (non-special) vocabulary token it tokenizes into. Feed the result to RetrievalEvaluator (as the
text embeddings) or ZeroShotEvaluator (``encode_texts=TokenMaskEncoder(...)``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tokenspace.sparse import SparseBatch


def token_mask_embeddings(texts: Sequence[str], token_ids: Callable[[str], Sequence[int]], dim: int,
                          vocab=None, exclude_ids: Sequence[int] | None = None) -> SparseBatch:
    """One row per text, 1.0 on each distinct token id (repeats count once: it is a mask, not a bag)."""
    if isinstance(texts, str):
        raise TypeError("token_mask_embeddings takes a list of texts (batches in, batches out)")
    if exclude_ids is None:
        exclude_ids = vocab.special_ids if vocab is not None else ()
    exclude = np.asarray(list(exclude_ids), np.int64)
    indptr, indices = [0], []
    for t in texts:
        ids = np.unique(np.asarray(list(token_ids(t)), np.int64))
        ids = ids[~np.isin(ids, exclude)]
        indices.extend(ids.tolist())
        indptr.append(len(indices))
    return SparseBatch(np.array(indptr), np.array(indices, np.int32), np.ones(len(indices), np.float32), dim, vocab)


class TokenMaskEncoder:
    """An ``encode_texts`` callable that needs no text model: texts -> token masks."""

    def __init__(self, token_ids: Callable[[str], Sequence[int]], dim: int, vocab=None,
                 exclude_ids: Sequence[int] | None = None):
        self.token_ids, self.dim, self.vocab, self.exclude_ids = token_ids, dim, vocab, exclude_ids

    def __call__(self, texts: Sequence[str]) -> SparseBatch:
        return token_mask_embeddings(texts, self.token_ids, self.dim, self.vocab, self.exclude_ids)
