"""The SparseIndex protocol every engine implements (embedded, exact oracle, Milvus, ...).

Engines take a SparseBatch of queries and return one Hits per query, best first. They never
import torch: the index side of the project works on numpy arrays only.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple, Protocol, runtime_checkable

from tokenspace.index.query import Node
from tokenspace.sparse import SparseBatch


# a named tuple: made from C (Hits), ten of them cost ~10 us right after the kernels (caches cold) against
# ~15 for a frozen slotted dataclass
class Hit(NamedTuple):
    """One result: the document's external id and its score (dot product of sparse vectors). Immutable;
    ordered and hashed by (score, id)."""

    score: float
    id: str

    def to_dict(self) -> dict:
        return {"id": self.id, "score": self.score}


_new_tuple = tuple.__new__  # a Hit made from C: no Python-level __new__ per hit


class Hits(Sequence):
    """One query's hits, best first: a read-only sequence of Hit that equals the list of them, with the
    ids and the scores as tuples (``hits.ids``, ``hits.scores``).

    It holds the two tuples and makes each Hit when it is read. Hit objects kept alive would be ten more
    objects per query for Python's garbage collector to count and walk, which a caller keeping the answers
    of its queries paid for at every collection (docs/benchmarks.md, "through search()").
    A sequence, not a list: ``list(hits)`` for list operations (``+``, ``sort``, ``copy``, comparing
    answers), ``[h.to_dict() for h in hits]`` for JSON."""

    __slots__ = ("_scores", "_ids")

    def __init__(self, scores: Sequence[float] = (), ids: Sequence[str] = ()):
        scores, ids = tuple(scores), tuple(ids)
        if len(scores) != len(ids):
            raise ValueError(f"Hits: {len(scores)} scores and {len(ids)} ids")
        self._scores, self._ids = scores, ids

    @classmethod
    def of(cls, hits) -> "Hits":
        """Hits from Hit objects (or (score, id) pairs), in their order."""
        pairs = list(hits)
        return cls([s for s, _ in pairs], [i for _, i in pairs])

    @property
    def ids(self) -> tuple[str, ...]:
        return self._ids

    @property
    def scores(self) -> tuple[float, ...]:
        return self._scores

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return _made(self._scores[i], self._ids[i])
        return _new_tuple(Hit, (self._scores[i], self._ids[i]))

    def __iter__(self):
        return map(_new_tuple, repeat(Hit), zip(self._scores, self._ids))

    def __eq__(self, other):
        if isinstance(other, Hits):
            return self._ids == other._ids and self._scores == other._scores
        if isinstance(other, list):  # equal to the list of its hits, as a list of Hit was
            return list(self) == other
        return NotImplemented

    __hash__ = None  # equal to lists, which have no hash

    def __repr__(self) -> str:  # evaluates back to an equal Hits
        return f"Hits(scores={self._scores!r}, ids={self._ids!r})"

    def __reduce__(self):
        return Hits, (self._scores, self._ids)


_new_hits = object.__new__


def _made(scores: tuple, ids: tuple) -> Hits:
    """Hits over two tuples of one length, without __init__'s checks (the search's own results)."""
    h = _new_hits(Hits)
    h._scores, h._ids = scores, ids
    return h


def hits_of(scores: list, ids: list) -> Hits:
    """Hits from a search's python floats and ids (lists of one length): the engines' constructor."""
    return _made(tuple(scores), tuple(ids))


@runtime_checkable
class SparseIndex(Protocol):
    """What every engine answers, with the same keyword names (InvertedIndex, ExactIndex, MilvusIndex;
    DenseIndex takes dense rows and no token filters). The sparse engines also take ``meta=``, a filter
    on the rows' metadata (metadata.py), and resolve every filter through filters.py / metadata.py, so
    a filter gives the same answer or the same error on each. An engine may add its own keyword-only knobs (InvertedIndex's
    ``mode``, Milvus' ``drop_ratio_search``); it never swallows unknown ones."""

    @classmethod
    def build(cls, batch: SparseBatch, ids: Sequence[str]) -> "SparseIndex": ...

    def add(self, batch: SparseBatch, ids: Sequence[str]) -> None: ...

    def delete(self, ids: Sequence[str]) -> int: ...

    def search(self, queries: SparseBatch, k: int = 10, *, where: "str | Node | None" = None,
               must: Sequence | None = None, must_not: Sequence | None = None,
               subset: Sequence[str] | None = None, threads: int = 1) -> list[Hits]:
        """Top-k by dot product per query row, best first (one Hits per row). ``where``: boolean token query (a string
        parsed over the vocabulary, or a query.Node); ``must`` / ``must_not``: dims or tokens a document
        must all have / have none of; ``subset``: only these ids; ``threads``: parallelism."""
        ...

    def get(self, ids: Sequence[str]) -> SparseBatch: ...

    def save(self, path) -> None: ...

    @classmethod
    def load(cls, path) -> "SparseIndex": ...

    def stats(self) -> dict: ...

    def __len__(self) -> int: ...
