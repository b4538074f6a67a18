"""ExactIndex: the slow, obviously-correct reference (scipy CSR product) every engine is tested against.

Same protocol and filter semantics as InvertedIndex, implemented the direct way: scores are
``D @ q`` in float64, filters are evaluated per document on Python sets of its dims and on its metadata
dict (resolved by the same filters.py / metadata.py as every engine). Only for tests and small
collections.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace import atomic
from tokenspace.index import filters
from tokenspace.index.base import Hits
from tokenspace.index.metadata import MetaFilter, check_rows
from tokenspace.sparse import SparseBatch


class ExactIndex:
    def __init__(self, dim: int, vocab=None):
        self.dim, self.vocab = int(dim), vocab
        self._batches: list[SparseBatch] = []
        self._ids: list[str] = []
        self._deleted: set[int] = set()
        self._meta: list[dict] = []

    @classmethod
    def build(cls, batch: SparseBatch, ids: Sequence[str], *, metadata: Sequence[dict] | None = None,
              **options) -> "ExactIndex":
        if options:
            raise ValueError(f"ExactIndex takes no build options, got {sorted(options)}")
        index = cls(batch.dim, batch.vocab)
        index.add(batch, ids, metadata=metadata)
        return index

    def add(self, batch: SparseBatch, ids: Sequence[str], metadata: Sequence[dict] | None = None) -> None:
        ids = list(ids)
        rows = check_rows(metadata, len(batch)) or [{}] * len(batch)
        if batch.dim != self.dim:
            raise ValueError(f"documents have dim {batch.dim}, the index has dim {self.dim}")
        if len(ids) != len(batch):
            raise ValueError(f"got {len(ids)} ids for {len(batch)} documents")
        live = {s for j, s in enumerate(self._ids) if j not in self._deleted}
        if len(set(ids)) != len(ids) or live & set(ids):
            raise ValueError("duplicate id (ids must be unique)")
        self._batches.append(batch)
        self._ids.extend(ids)
        self._meta.extend(rows)

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
               where=None, subset=None, meta=None, threads: int = 1, **options) -> list[Hits]:
        """threads is accepted (the protocol lists it) and checked, then ignored: one scipy product."""
        if mode != "exact" or options:
            raise ValueError("ExactIndex only supports mode='exact' without tuning options")
        if queries.dim != self.dim:
            raise ValueError(f"queries have dim {queries.dim}, the index has dim {self.dim}")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        D = self._matrix()
        allowed = self._allowed(D, must, must_not, where, subset, meta)
        scores = (D @ queries.to_scipy().astype(np.float64).T).toarray()  # [n_docs, n_queries]
        out = []
        for r in range(len(queries)):
            s = scores[:, r]
            docs = [j for j in np.nonzero(s > 0)[0] if allowed[j]]
            docs.sort(key=lambda j: (-s[j], j))
            out.append(Hits.of((float(s[j]), self._ids[j]) for j in docs[:k]))
        return out

    def _allowed(self, D, must, must_not, where, subset, meta) -> list[bool]:
        trees = filters.token_tree(self.dim, self.vocab, must, must_not, where)
        meta = MetaFilter.resolve(meta)
        sub = None
        if subset is not None:
            if isinstance(subset, str):
                raise TypeError("ids must be a sequence of strings, not one string")
            sub = set(subset)
            missing = sub - set(self.ids())
            if missing:
                raise ValueError(f"subset: {len(missing)} unknown id(s), e.g. {sorted(missing)[0]!r}")
        out = []
        for j in range(D.shape[0]):
            dims = set(D.indices[D.indptr[j]:D.indptr[j + 1]][D.data[D.indptr[j]:D.indptr[j + 1]] > 0].tolist())
            ok = j not in self._deleted and all(t.matches(dims) for t in trees)
            ok = ok and (sub is None or self._ids[j] in sub) and (meta is None or meta.matches(self._meta[j]))
            out.append(ok)
        return out

    def has_metadata(self) -> bool:
        return any(self._meta)

    def metadata(self, ids: Sequence[str]) -> list[dict]:
        pos = {s: j for j, s in enumerate(self._ids) if j not in self._deleted}
        return [self._meta[pos[s]] for s in ids]

    def get(self, ids: Sequence[str]) -> SparseBatch:
        pos = {s: j for j, s in enumerate(self._ids) if j not in self._deleted}
        rows = [pos[s] for s in ids]
        return SparseBatch.concat(self._batches)[rows] if rows else SparseBatch.empty(0, self.dim)

    def save(self, path) -> None:
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        SparseBatch.concat(self._batches).save(root / "docs.npz")
        atomic.write_text(root / "meta.json", json.dumps({"ids": self._ids, "deleted": sorted(self._deleted),
                                                          "dim": self.dim, "metadata": self._meta}))

    @classmethod
    def load(cls, path, mmap: bool = False) -> "ExactIndex":
        root = Path(path)
        meta = json.loads((root / "meta.json").read_text())
        index = cls(meta["dim"])
        index._batches = [SparseBatch.load(root / "docs.npz")]
        index._ids = meta["ids"]
        index._deleted = set(meta["deleted"])
        index._meta = meta.get("metadata") or [{}] * len(index._ids)
        return index

    def ids(self) -> list[str]:
        return [s for j, s in enumerate(self._ids) if j not in self._deleted]

    def stats(self) -> dict:
        return {"docs": len(self), "dim": self.dim}

    def __len__(self) -> int:
        return len(self._ids) - len(self._deleted)
