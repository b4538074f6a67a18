"""Index-side token blacklist / whitelist (STAIR App. D): which dims a document may be indexed under.

STAIR's App. D lists token blacklists and whitelists "on both the query and index side" among the
uses of a token-based index. The query side is ``InvertedIndex.search(must=, must_not=, where=)``;
this is the index side: a deny list drops those dims from every document *before* it is indexed
(e.g. STAIR's spurious "https" token, Sec. 5.2), an allow list keeps only its dims. A filtered dim
then neither matches nor scores in any search, and the filter is stored with the index so every later
``add`` obeys it too.

It also down-weights generic tokens (``scale``: dim -> factor < 1, from hubness.generic_factors: a
token held by most of the collection's images keeps share / its share of its weight), each row then
L2-normalised again (``renormalize``), so an image made mostly of generic tokens weighs its specific ones
more. The factors are fixed when the index is built and applied to every later ``add``. Numpy only.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tokenspace.index import filters
from tokenspace.index.hubness import down_weight_generic, generic_factors
from tokenspace.sparse import SparseBatch


@dataclass(frozen=True)
class TokenFilter:
    """``deny``: dims never indexed; ``allow``: if given, the only dims indexed (deny still applies)."""

    dim: int
    deny: frozenset[int] = frozenset()
    allow: frozenset[int] | None = None
    scale: tuple[tuple[int, float], ...] = ()  # (dim, factor) pairs, dims ascending
    renormalize: bool = False

    @classmethod
    def resolve(cls, dim: int, vocab=None, deny: Iterable | None = None,
                allow: Iterable | None = None) -> "TokenFilter | None":
        """A filter from dims (ints) or token names (needs ``vocab``); None when both lists are absent."""
        if deny is None and allow is None:
            return None
        return cls(dim, frozenset(filters.dims(deny or (), dim, vocab, "deny")),
                   None if allow is None else frozenset(filters.dims(allow, dim, vocab, "allow")))

    def keep_mask(self) -> np.ndarray:
        """bool[dim]: the dims a document may be indexed under."""
        keep = np.ones(self.dim, bool) if self.allow is None else np.zeros(self.dim, bool)
        if self.allow is not None:
            keep[list(self.allow)] = True
        keep[list(self.deny)] = False
        return keep

    @classmethod
    def generic(cls, batch: SparseBatch, share: float, base: "TokenFilter | None" = None) -> "TokenFilter":
        """``base`` (or no deny / allow list) plus the generic-token factors of ``batch`` (hubness.py)."""
        factors = generic_factors(base.apply(batch) if base else batch, share)
        pairs = tuple((int(d), float(factors[d])) for d in np.nonzero(factors < 1)[0])
        return cls(batch.dim, base.deny if base else frozenset(), base.allow if base else None, pairs, True)

    def factors(self) -> np.ndarray | None:
        """float32[dim] of the scale factors (1 where none), or None without any."""
        if not self.scale:
            return None
        out = np.ones(self.dim, np.float32)
        dims, f = zip(*self.scale)
        out[list(dims)] = f
        return out

    def apply(self, batch: SparseBatch) -> SparseBatch:
        """The batch without the filtered dims (rows keep their order; a row may become empty), generic
        tokens scaled and rows normalised again when the filter says so."""
        if batch.dim != self.dim:
            raise ValueError(f"token filter is for dim {self.dim}, the batch has dim {batch.dim}")
        keep = self.keep_mask()[batch.indices]  # per stored entry
        rows = np.repeat(np.arange(len(batch)), batch.row_nnz())
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[keep], minlength=len(batch)))]).astype(batch.indptr.dtype)
        out = SparseBatch(indptr, batch.indices[keep], batch.values[keep], batch.dim, batch.vocab)
        factors = self.factors()
        if factors is not None:
            out = down_weight_generic(out, 1.0, factors, normalize=self.renormalize)
        return out

    def to_dict(self) -> dict:
        d = {"deny": sorted(self.deny), "allow": None if self.allow is None else sorted(self.allow)}
        if self.scale:
            d.update(scale=[[dim, f] for dim, f in self.scale], renormalize=self.renormalize)
        return d

    @classmethod
    def from_dict(cls, dim: int, d: dict | None) -> "TokenFilter | None":
        if not d:
            return None
        return cls(dim, frozenset(int(x) for x in d.get("deny") or ()),
                   None if d.get("allow") is None else frozenset(int(x) for x in d["allow"]),
                   tuple((int(a), float(b)) for a, b in d.get("scale") or ()), bool(d.get("renormalize", False)))

