"""DenseIndex: exact inner-product search over dense float32 rows (FAISS ``IndexFlatIP``).

The dense twin of the SparseIndex protocol, for CLIP-style baselines: same methods, same ``Hit``
results, but rows are ``np.ndarray`` float32 ``[n, d]`` instead of a SparseBatch, so sparse and dense
search are measured the same way by benchmarks/search_speed.py. Needs the ``dense`` extra
(``pip install tokenspace[dense]``, i.e. faiss-cpu); the import is lazy so the rest of the index
package works without it.

Layout on disk (``save(path)``; ``path`` is a directory): ``flat-NNNNNN.faiss`` (FAISS's own format; a
new number per save) and ``ids.json`` (external ids in internal-id order, the format version and the
name of the FAISS file). ``ids.json`` is the commit point: the FAISS file is written under a name no file
of the folder has, then ``ids.json`` replaced, so a kill leaves the old pair or the new one, never new
vectors under old ids. Version 1 named the FAISS file ``flat.faiss`` (still read).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokenspace import atomic
from tokenspace.index.base import Hits

FORMAT = "tokenspace-dense-flat"
VERSION = 2  # 2: the FAISS file named per save, in ids.json; 1: flat.faiss
READABLE = (1, 2)
_FAISS_FILE = re.compile(r"flat(-[0-9]{6})?\.faiss")


def _faiss():
    try:
        import faiss  # optional: faiss (the dense extra)
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("DenseIndex needs faiss-cpu: pip install 'tokenspace[dense]'") from e
    return faiss


def _rows(x, dim: int | None = None) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"expected rows of shape [n, d], got {x.shape}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"rows have {x.shape[1]} dimensions, the index has {dim}")
    if not np.all(np.isfinite(x)):
        raise ValueError("rows must be finite")
    return x


class DenseIndex:
    """Exact maximum-inner-product search. Normalise rows yourself for cosine similarity.

    Internally an ``IndexIDMap2(IndexFlatIP)`` keyed by int64 handles, so deletes do not renumber
    the remaining rows; external string ids map to those handles.
    """

    def __init__(self, dim: int):
        faiss = _faiss()
        self.dim = int(dim)
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        self._ids: dict[int, str] = {}  # handle -> external id
        self._handles: dict[str, int] = {}  # external id -> handle
        self._next = 0

    # ----------------------------------------------------------------- protocol
    @classmethod
    def build(cls, vectors: np.ndarray, ids: Sequence[str]) -> DenseIndex:
        vectors = _rows(vectors)
        index = cls(vectors.shape[1])
        index.add(vectors, ids)
        return index

    def add(self, vectors: np.ndarray, ids: Sequence[str]) -> None:
        vectors = _rows(vectors, self.dim)
        ids = [str(i) for i in ids]
        if len(ids) != len(vectors):
            raise ValueError(f"got {len(ids)} ids for {len(vectors)} rows")
        if len(set(ids)) != len(ids):
            raise ValueError("ids must be unique")
        clash = [i for i in ids if i in self._handles]
        if clash:
            raise ValueError(f"ids already in the index: {clash[:5]}")
        handles = np.arange(self._next, self._next + len(ids), dtype=np.int64)
        self._index.add_with_ids(vectors, handles)
        for h, i in zip(handles.tolist(), ids):
            self._ids[h] = i
            self._handles[i] = h
        self._next += len(ids)

    def delete(self, ids: Sequence[str]) -> int:
        """Remove the given ids; unknown ids are ignored. Returns how many were removed."""
        handles = [self._handles.pop(str(i)) for i in ids if str(i) in self._handles]
        if handles:
            self._index.remove_ids(np.array(handles, dtype=np.int64))
            for h in handles:
                del self._ids[h]
        return len(handles)

    def search(self, queries: np.ndarray, k: int = 10, *, where=None, must: Sequence | None = None,
               must_not: Sequence | None = None, subset: Sequence[str] | None = None,
               threads: int | None = None) -> list[Hits]:
        """Top-k by inner product for each query row, best first (the SparseIndex keywords).

        ``threads`` sets FAISS's OpenMP threads for this call (None keeps the current setting).
        ``subset`` searches only those ids (exactly, on their stored rows; unknown ids raise KeyError).
        Dense rows have no tokens: ``where`` / ``must`` / ``must_not`` are refused.
        """
        if where is not None or must is not None or must_not is not None:
            raise ValueError("DenseIndex rows have no tokens: where / must / must_not need a sparse index")
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError("k must be positive")
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        queries = _rows(queries, self.dim)
        if subset is not None:
            sub = [str(i) for i in subset]
            rows = self.get(sub)  # [m, d]
            scores = queries @ rows.T  # [nq, m]
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            return [Hits.of((float(scores[q, j]), sub[j]) for j in order[q]) for q in range(len(queries))]
        if len(self) == 0 or len(queries) == 0:
            return [Hits() for _ in range(len(queries))]
        faiss = _faiss()
        before = faiss.omp_get_max_threads()
        if threads is not None:
            faiss.omp_set_num_threads(int(threads))
        try:
            scores, handles = self._index.search(queries, min(int(k), len(self)))
        finally:
            faiss.omp_set_num_threads(before)
        return [
            Hits.of((float(s), self._ids[int(h)]) for s, h in zip(srow, hrow) if h >= 0)
            for srow, hrow in zip(scores, handles)
        ]

    def get(self, ids: Sequence[str]) -> np.ndarray:
        """Rows ``[len(ids), d]`` in the order asked; unknown ids raise KeyError."""
        out = np.zeros((len(ids), self.dim), np.float32)
        for r, i in enumerate(ids):
            if str(i) not in self._handles:
                raise KeyError(f"unknown id {i!r}")
            out[r] = self._index.reconstruct(self._handles[str(i)])
        return out

    def save(self, path: str | os.PathLike) -> None:
        faiss = _faiss()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        handles = sorted(self._ids)
        # a FAISS file name above every one there: the one the committed ids.json names is never replaced
        used = [int(m[1][1:]) for p in path.iterdir() if (m := _FAISS_FILE.fullmatch(p.name)) and m[1]]
        name = f"flat-{max(used, default=0) + 1:06d}.faiss"
        meta = {"format": FORMAT, "version": VERSION, "dim": self.dim, "next": self._next,
                "handles": handles, "ids": [self._ids[h] for h in handles], "faiss": name}
        with atomic.atomic_path(path / name) as tmp:
            faiss.write_index(self._index, str(tmp))
        atomic.write_text(path / "ids.json", json.dumps(meta))  # the commit
        for p in path.iterdir():  # the FAISS files of earlier saves
            if _FAISS_FILE.fullmatch(p.name) and p.name != name:
                p.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: str | os.PathLike) -> DenseIndex:
        faiss = _faiss()
        path = Path(path)
        try:
            meta = json.loads((path / "ids.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: not a DenseIndex directory ({e})") from e
        if meta.get("format") != FORMAT or meta.get("version") not in READABLE:
            raise ValueError(f"{path}: unsupported format {meta.get('format')!r} v{meta.get('version')}")
        name = meta.get("faiss", "flat.faiss") if meta["version"] >= 2 else "flat.faiss"
        if not isinstance(name, str) or not _FAISS_FILE.fullmatch(name):  # never a path outside the folder
            raise ValueError(f"{path}: ids.json names no FAISS file of this folder ({str(name)[:40]!r})")
        index = cls(meta["dim"])
        index._index = faiss.read_index(str(path / name))
        if index._index.ntotal != len(meta["ids"]):
            raise ValueError(f"{path}: flat.faiss holds {index._index.ntotal} rows, ids.json {len(meta['ids'])}")
        index._ids = dict(zip(meta["handles"], meta["ids"]))
        index._handles = {i: h for h, i in index._ids.items()}
        index._next = meta["next"]
        return index

    def stats(self) -> dict:
        return {"engine": "faiss-flat-ip", "docs": len(self), "dim": self.dim,
                "bytes": len(self) * self.dim * 4}

    def __len__(self) -> int:
        return int(self._index.ntotal)
