"""The SparseIndex protocol every engine implements (embedded, exact oracle, Milvus, ...).

Engines take a SparseBatch of queries and return one hit list per query, best first. They never
import torch: the index side of the project works on numpy arrays only.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence, runtime_checkable

from tokenspace.index.query import Node
from tokenspace.sparse import SparseBatch


# a named tuple: a search returns k of them per query, and right after the kernels (caches cold) ten of
# them were made in ~10 us against ~15 for a frozen slotted dataclass (inverted._hits)
class Hit(NamedTuple):
    """One result: the document's external id and its score (dot product of sparse vectors). Immutable;
    ordered and hashed by (score, id)."""

    score: float
    id: str

    def to_dict(self) -> dict:
        return {"id": self.id, "score": self.score}


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
               subset: Sequence[str] | None = None, threads: int = 1) -> list[list[Hit]]:
        """Top-k by dot product per query row, best first. ``where``: boolean token query (a string
        parsed over the vocabulary, or a query.Node); ``must`` / ``must_not``: dims or tokens a document
        must all have / have none of; ``subset``: only these ids; ``threads``: parallelism."""
        ...

    def get(self, ids: Sequence[str]) -> SparseBatch: ...

    def save(self, path) -> None: ...

    @classmethod
    def load(cls, path) -> "SparseIndex": ...

    def stats(self) -> dict: ...

    def __len__(self) -> int: ...
