"""SparseBatch: the one type that crosses every boundary (model -> index -> eval -> explain).

A batch of non-negative sparse vectors in CSR form over a fixed dimension, optionally carrying the
Vocabulary its dimensions are named by. Numpy only: the index imports this module and must never
pull in torch, so torch conversions import it lazily.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from tokenspace.atomic import atomic_open
from tokenspace.vocab import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse
    import torch  # lazy: the index side must not import torch

INDEX_DTYPE = np.int32
VALUE_DTYPE = np.float32
PTR_DTYPE = np.int64


@dataclass(frozen=True, eq=False)
class SparseBatch:
    """CSR rows: row i has dims ``indices[indptr[i]:indptr[i+1]]`` (sorted, unique) with ``values``."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int
    vocab: "Vocabulary | None" = None

    def __post_init__(self):
        indptr = np.ascontiguousarray(self.indptr, dtype=PTR_DTYPE)
        indices = np.ascontiguousarray(self.indices, dtype=INDEX_DTYPE)
        values = np.ascontiguousarray(self.values, dtype=VALUE_DTYPE)
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "dim", int(self.dim))
        if indptr.ndim != 1 or len(indptr) < 1 or indptr[0] != 0:
            raise ValueError("indptr must be 1-D and start at 0")
        if indices.shape != values.shape or indices.ndim != 1 or indptr[-1] != len(indices):
            raise ValueError(
                f"CSR arrays disagree: indptr[-1]={indptr[-1]}, len(indices)={len(indices)}, "
                f"len(values)={len(values)}"
            )
        if (indptr[1:] < indptr[:-1]).any():  # not np.diff: ~3x the cost, felt by one-query batches
            raise ValueError("indptr must be non-decreasing")
        # one reduction, not min and max: a negative int32 read as uint32 is >= 2**31 (the cap keeps
        # that true for any dim; int32 indices cannot name a dim past it anyway)
        if len(indices) and indices.view(np.uint32).max() >= min(self.dim, 2**31):
            raise ValueError(f"indices out of range [0, {self.dim})")
        if self.vocab is not None and len(self.vocab) != self.dim:
            raise ValueError(f"vocabulary has {len(self.vocab)} entries but dim is {self.dim}")

    # ----------------------------------------------------------------- construction
    @classmethod
    def empty(cls, n: int, dim: int, vocab=None) -> "SparseBatch":
        return cls(np.zeros(n + 1, PTR_DTYPE), np.zeros(0, INDEX_DTYPE), np.zeros(0, VALUE_DTYPE), dim, vocab)

    @classmethod
    def from_dense(cls, dense, vocab=None, threshold: float = 0.0) -> "SparseBatch":
        """Keep entries strictly greater than ``threshold`` (vectors are non-negative)."""
        dense = np.asarray(dense, dtype=VALUE_DTYPE)
        if dense.ndim == 1:
            dense = dense[None, :]
        if dense.ndim != 2:
            raise ValueError(f"expected a 2-D array, got shape {dense.shape}")
        rows, cols = np.nonzero(dense > threshold)
        indptr = np.zeros(dense.shape[0] + 1, PTR_DTYPE)
        np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
        return cls(indptr, cols, dense[rows, cols], dense.shape[1], vocab)

    @classmethod
    def from_torch(cls, tensor: "torch.Tensor", vocab=None, threshold: float = 0.0) -> "SparseBatch":
        import torch  # lazy: the index side must not import torch

        with torch.no_grad():
            # the non-zeros are found on the tensor's own device: a GPU batch crosses to the host as its
            # few non-zeros, not as [B, V] dense floats (nonzero is row-major on every device)
            t = tensor.detach().float()
            if t.ndim == 1:
                t = t[None]
            mask = t > threshold
            rows, cols = mask.nonzero(as_tuple=True)
            vals = t[rows, cols].cpu()
            counts = torch.bincount(rows, minlength=t.shape[0]).cpu()
        indptr = np.zeros(t.shape[0] + 1, PTR_DTYPE)
        np.cumsum(counts.numpy(), out=indptr[1:])
        return cls(indptr, cols.cpu().numpy(), vals.numpy(), t.shape[1], vocab)

    @classmethod
    def from_scipy(cls, matrix: "scipy.sparse.spmatrix", vocab=None) -> "SparseBatch":
        m = matrix.tocsr(copy=True)
        m.sum_duplicates()
        m.sort_indices()
        m.eliminate_zeros()
        return cls(m.indptr, m.indices, m.data, m.shape[1], vocab)

    @classmethod
    def from_dicts(cls, rows: Sequence[Mapping], dim: int | None = None, vocab=None) -> "SparseBatch":
        """Rows as ``{dim_id or token: weight}``; token keys need a vocabulary."""
        if dim is None:
            if vocab is None:
                raise ValueError("from_dicts needs dim or vocab")
            dim = len(vocab)
        indptr = [0]
        indices: list[int] = []
        values: list[float] = []
        for row in rows:
            acc: dict[int, float] = {}
            for key, w in row.items():
                if isinstance(key, str):
                    if vocab is None:
                        raise ValueError(f"token key {key!r} needs a vocabulary")
                    key = vocab.id(key)  # raises KeyError with a clear message for unknown tokens
                w = float(w)
                if not np.isfinite(w) or w < 0:
                    raise ValueError(f"weights must be finite and non-negative, got {w} for {key!r}")
                if w > 0:
                    acc[int(key)] = acc.get(int(key), 0.0) + w
            for k in sorted(acc):
                indices.append(k)
                values.append(acc[k])
            indptr.append(len(indices))
        return cls(np.array(indptr), np.array(indices, dtype=INDEX_DTYPE), np.array(values), dim, vocab)

    @classmethod
    def concat(cls, batches: Iterable["SparseBatch"]) -> "SparseBatch":
        batches = list(batches)
        if not batches:
            raise ValueError("concat needs at least one batch")
        dim, vocab = batches[0].dim, batches[0].vocab
        if any(b.dim != dim for b in batches):
            raise ValueError("cannot concat batches of different dim")
        offsets = np.cumsum([0] + [b.nnz for b in batches[:-1]])
        indptr = np.concatenate([[0]] + [b.indptr[1:] + o for b, o in zip(batches, offsets)])
        return cls(
            indptr,
            np.concatenate([b.indices for b in batches]),
            np.concatenate([b.values for b in batches]),
            dim,
            vocab,
        )

    # ----------------------------------------------------------------- access
    def __len__(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def row_nnz(self) -> np.ndarray:
        return np.diff(self.indptr)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, values) of row i, views into the batch."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} out of range for a batch of {len(self)}")
        i %= len(self)
        a, b = self.indptr[i], self.indptr[i + 1]
        return self.indices[a:b], self.values[a:b]

    def __getitem__(self, key) -> "SparseBatch":
        """Select rows: an int keeps a batch of one (batches in, batches out)."""
        if isinstance(key, (int, np.integer)):
            key = [int(key)]
        if isinstance(key, slice):
            key = range(*key.indices(len(self)))
        rows = np.asarray(key, dtype=np.int64)
        if rows.dtype == bool:
            rows = np.nonzero(rows)[0]
        if len(rows) and (rows.min() < -len(self) or rows.max() >= len(self)):
            raise IndexError("row index out of range")
        rows %= max(len(self), 1)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.zeros(len(rows) + 1, PTR_DTYPE)
        np.cumsum(lengths, out=indptr[1:])
        gather = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        return SparseBatch(indptr, self.indices[gather], self.values[gather], self.dim, self.vocab)

    def with_vocab(self, vocab) -> "SparseBatch":
        return SparseBatch(self.indptr, self.indices, self.values, self.dim, vocab)

    # ----------------------------------------------------------------- conversion
    def to_scipy(self) -> "scipy.sparse.csr_matrix":
        import scipy.sparse as sp  # start-up: the package root imports this module

        return sp.csr_matrix((self.values, self.indices, self.indptr), shape=(len(self), self.dim))

    def to_dense(self) -> np.ndarray:
        out = np.zeros((len(self), self.dim), VALUE_DTYPE)
        rows = np.repeat(np.arange(len(self)), self.row_nnz())
        out[rows, self.indices] = self.values
        return out

    def to_torch(self, sparse: bool = False):
        """A dense float32 [N, D] tensor, or with ``sparse=True`` a coalesced sparse COO tensor: the layout
        torch and sentence-transformers' SparseEncoder use by default (torch's sparse CSR is still beta
        and warns)."""
        import torch  # lazy: the index side must not import torch

        if not sparse:
            return torch.from_numpy(self.to_dense())
        rows = np.repeat(np.arange(len(self), dtype=np.int64), self.row_nnz())
        coords = torch.from_numpy(np.stack([rows, self.indices.astype(np.int64)]))
        values = torch.from_numpy(self.values.copy())
        # invariants opted out explicitly (torch warns when left implicit): a SparseBatch is already checked
        t = torch.sparse_coo_tensor(coords, values, size=(len(self), self.dim), check_invariants=False)
        return t.coalesce()

    def to_dicts(self, use_tokens: bool = False) -> list[dict]:
        """Rows as dicts keyed by dim id, or by token name when ``use_tokens`` (needs a vocab)."""
        if use_tokens and self.vocab is None:
            raise ValueError("to_dicts(use_tokens=True) needs a vocabulary")
        out = []
        for i in range(len(self)):
            idx, val = self.row(i)
            keys = [self.vocab.token(int(j)) for j in idx] if use_tokens else [int(j) for j in idx]
            out.append(dict(zip(keys, (float(v) for v in val))))
        return out

    # ----------------------------------------------------------------- pruning
    def prune_topk(self, k: int) -> "SparseBatch":
        """Keep the k largest weights per row (VisualSparta's top-n term pruning)."""
        if k <= 0:
            raise ValueError("k must be positive")
        keep = np.zeros(self.nnz, bool)
        for i in range(len(self)):
            a, b = self.indptr[i], self.indptr[i + 1]
            if b - a <= k:
                keep[a:b] = True
            else:
                top = np.argpartition(-self.values[a:b], k - 1)[:k]
                keep[a + top] = True
        return self._mask(keep)

    def threshold(self, min_weight: float) -> "SparseBatch":
        return self._mask(self.values > min_weight)

    def _mask(self, keep: np.ndarray) -> "SparseBatch":
        rows = np.repeat(np.arange(len(self)), self.row_nnz())
        indptr = np.zeros(len(self) + 1, PTR_DTYPE)
        np.cumsum(np.bincount(rows[keep], minlength=len(self)), out=indptr[1:])
        return SparseBatch(indptr, self.indices[keep], self.values[keep], self.dim, self.vocab)

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, float]:
        nnz = self.row_nnz()
        # FLOPs as in SPLADE/STAIR: sum over dims of (mean activation probability)^2 times N... here the
        # expected number of multiply-adds between two random rows of this batch.
        df = np.bincount(self.indices, minlength=self.dim) / max(len(self), 1)
        return {
            "rows": float(len(self)),
            "mean_nnz": float(nnz.mean()) if len(self) else 0.0,
            "median_nnz": float(np.median(nnz)) if len(self) else 0.0,
            "max_nnz": float(nnz.max()) if len(self) else 0.0,
            "flops": float(np.sum(df * df)),
            "active_dims": float(np.count_nonzero(df)),
        }

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write an .npz atomically (tokenspace.atomic), so a crash never leaves half a file. Given a
        file object, np.savez adds no ``.npz``: the file is ``path`` exactly."""
        meta = {"dim": self.dim, "vocab": self.vocab.name if self.vocab is not None else None}
        with atomic_open(path, "wb") as f:
            np.savez(f, indptr=self.indptr, indices=self.indices, values=self.values,
                     meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))

    @classmethod
    def load(cls, path: str | os.PathLike, vocab=None) -> "SparseBatch":
        try:
            with np.load(os.fspath(path)) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                return cls(z["indptr"], z["indices"], z["values"], meta["dim"], vocab)
        except (OSError, ValueError, KeyError, EOFError) as e:
            raise ValueError(f"{path}: not a readable SparseBatch file ({e})") from e

    def __repr__(self) -> str:
        v = f", vocab={self.vocab.name!r}" if self.vocab is not None else ""
        return f"SparseBatch(rows={len(self)}, dim={self.dim}, nnz={self.nnz}{v})"
