"""ExactIndex: the slow, obviously-correct reference (scipy CSR product) every engine is tested against.

Same protocol and filter semantics as InvertedIndex, implemented the direct way: scores are
``D @ q`` in float64, filters are evaluated per document on Python sets of its dims. Only for tests and
small collections.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace import atomic
from tokenspace.index.base import Hit
from tokenspace.index.query import parse_query
from tokenspace.sparse import SparseBatch


class ExactIndex:
    def __init__(self, dim: int, vocab=None):
        self.dim, self.vocab = int(dim), vocab
        self._batches: list[SparseBatch] = []
        self._ids: list[str] = []
        self._deleted: set[int] = set()

    @classmethod
    def build(cls, batch: SparseBatch, ids: Sequence[str], **options) -> "ExactIndex":
        if options:
            raise ValueError(f"ExactIndex takes no build options, got {sorted(options)}")
        index = cls(batch.dim, batch.vocab)
        index.add(batch, ids)
        return index

    def add(self, batch: SparseBatch, ids: Sequence[str]) -> None:
        ids = list(ids)
        if batch.dim != self.dim:
            raise ValueError(f"documents have dim {batch.dim}, the index has dim {self.dim}")
        if len(ids) != len(batch):
            raise ValueError(f"got {len(ids)} ids for {len(batch)} documents")
        live = {s for j, s in enumerate(self._ids) if j not in self._deleted}
        if len(set(ids)) != len(ids) or live & set(ids):
            raise ValueError("duplicate id (ids must be unique)")
        self._batches.append(batch)
        self._ids.extend(ids)

    def delete(self, ids: Sequence[str]) -> int:
        want, count = set(ids), 0
        for j, s in enumerate(self._ids):
            if s in want and j not in self._deleted:
                self._deleted.add(j)
                count += 1
        return count

    def _matrix(self):
        import scipy.sparse as sp  # start-up: the index side loads scipy only for this matrix

        if not self._batches:
            return sp.csr_matrix((0, self.dim), dtype=np.float64)
        return SparseBatch.concat(self._batches).to_scipy().astype(np.float64).tocsr()

    def search(self, queries: SparseBatch, k: int = 10, *, mode: str = "exact", must=None, must_not=None,
               where=None, subset=None, **options) -> list[list[Hit]]:
        if mode != "exact" or options:
            raise ValueError("ExactIndex only supports mode='exact' without tuning options")
        if queries.dim != self.dim:
            raise ValueError(f"queries have dim {queries.dim}, the index has dim {self.dim}")
        D = self._matrix()
        allowed = self._allowed(D, must, must_not, where, subset)
        scores = (D @ queries.to_scipy().astype(np.float64).T).toarray()  # [n_docs, n_queries]
        out = []
        for r in range(len(queries)):
            s = scores[:, r]
            docs = [j for j in np.nonzero(s > 0)[0] if allowed[j]]
            docs.sort(key=lambda j: (-s[j], j))
            out.append([Hit(float(s[j]), self._ids[j]) for j in docs[:k]])
        return out

    def _allowed(self, D, must, must_not, where, subset) -> list[bool]:
        if isinstance(where, str):
            where = parse_query(where, self.vocab)
        tok = lambda x: self.vocab.id(x) if isinstance(x, str) else int(x)  # noqa: E731
        must = {tok(x) for x in must or ()}
        must_not = {tok(x) for x in must_not or ()}
        sub = None if subset is None else set(subset)
        out = []
        for j in range(D.shape[0]):
            dims = set(D.indices[D.indptr[j]:D.indptr[j + 1]][D.data[D.indptr[j]:D.indptr[j + 1]] > 0].tolist())
            ok = j not in self._deleted and must <= dims and not (must_not & dims)
            ok = ok and (sub is None or self._ids[j] in sub) and (where is None or where.matches(dims))
            out.append(ok)
        return out

    def get(self, ids: Sequence[str]) -> SparseBatch:
        pos = {s: j for j, s in enumerate(self._ids) if j not in self._deleted}
        rows = [pos[s] for s in ids]
        return SparseBatch.concat(self._batches)[rows] if rows else SparseBatch.empty(0, self.dim)

    def save(self, path) -> None:
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        SparseBatch.concat(self._batches).save(root / "docs.npz")
        atomic.write_text(root / "meta.json", json.dumps({"ids": self._ids, "deleted": sorted(self._deleted), "dim": self.dim}))

    @classmethod
    def load(cls, path, mmap: bool = False) -> "ExactIndex":
        root = Path(path)
        meta = json.loads((root / "meta.json").read_text())
        index = cls(meta["dim"])
        index._batches = [SparseBatch.load(root / "docs.npz")]
        index._ids = meta["ids"]
        index._deleted = set(meta["deleted"])
        return index

    def ids(self) -> list[str]:
        return [s for j, s in enumerate(self._ids) if j not in self._deleted]

    def stats(self) -> dict:
        return {"docs": len(self), "dim": self.dim}

    def __len__(self) -> int:
        return len(self._ids) - len(self._deleted)
