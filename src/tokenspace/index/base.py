"""The SparseIndex protocol every engine implements (embedded, exact oracle, Milvus, ...).

Engines take a SparseBatch of queries and return one hit list per query, best first. They never
import torch: the index side of the project works on numpy arrays only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from tokenspace.sparse import SparseBatch


@dataclass(frozen=True, order=True)
class Hit:
    """One result: the document's external id and its score (dot product of sparse vectors)."""

    score: float
    id: str

    def to_dict(self) -> dict:
        return {"id": self.id, "score": self.score}


@runtime_checkable
class SparseIndex(Protocol):
    @classmethod
    def build(cls, batch: SparseBatch, ids: Sequence[str], **options) -> "SparseIndex": ...

    def add(self, batch: SparseBatch, ids: Sequence[str]) -> None: ...

    def delete(self, ids: Sequence[str]) -> int: ...

    def search(self, queries: SparseBatch, k: int = 10, **options) -> list[list[Hit]]: ...

    def get(self, ids: Sequence[str]) -> SparseBatch: ...

    def save(self, path) -> None: ...

    @classmethod
    def load(cls, path) -> "SparseIndex": ...

    def stats(self) -> dict: ...

    def __len__(self) -> int: ...
