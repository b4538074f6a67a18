"""One immutable segment of the inverted index: its arrays, how to build them, how to search them.

A segment never changes once built (deletes are tombstones kept by the index), so it can be
memory-mapped from disk and shared between threads without locks.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace.index import metadata, road
from tokenspace.index.layout import HEAD_CODES, POSTING_CHUNK
from tokenspace.index.storage import IndexCorruptError
from tokenspace.sparse import SparseBatch

# every array of a segment, in the order they are written; all are needed to search
ARRAYS = (
    "fwd_indptr", "fwd_indices", "fwd_values",  # exact doc vectors (CSR): get() and rescoring
    "df", "wmax", "scale", "dense_slot",  # per term: doc frequency, max weight, code step, column
    "dense", "bmax",  # dense code columns [n_dense, n] and their block maxima [n_dense, n_blocks]
    "main_ptr", "main_docs", "main_codes",  # sparse posting lists (doc-sorted, chunked: see below)
    "res_ptr", "res_docs", "res_codes",  # postings outside each doc's approx_top_n (exact mode only)
    "band_ptr", "band_docs", "band_codes",  # impact bands of every term (see below)
    "ids_ptr", "ids_blob",  # external ids, UTF-8, concatenated
)
# the impact bands (format version 10): each term's postings of code >= 128, 64-127 and 32-63, taken out of
# its main list (kernels.impact_bands); a dense term's copied from its column
BANDS = ("band_ptr", "band_docs", "band_codes")
# the impact heads of format versions 4 to 9: nested copies (code >= 128, >= 64, >= 32) beside whole main
# lists. A segment saved with them, or by a version before 4 without either, is split into bands when
# loaded (with_bands) and keeps its files when saved in place.
HEADS = ("head_ptr", "head_docs", "head_codes")
# the residual lists: a segment built with residual_lists=False keeps and saves none (format version 9);
# exact search and dim filters derive them from the forward store on first use (Segment.residual)
RESIDUAL = ("res_ptr", "res_docs", "res_codes")
# Posting lists (format version 2): the docs are cut into chunks of layout.POSTING_CHUNK (65,536);
# main_ptr / res_ptr hold dim * n_chunks + 1 cell pointers, the postings of term t in chunk c being
# [ptr[t * n_chunks + c], ptr[t * n_chunks + c + 1]), and main_docs / res_docs hold each doc as a uint16
# offset from its chunk's first doc: 2 bytes a doc id instead of 4 (index 1.55x -> see
# docs/history.md, "compressed postings"). band_ptr holds len(layout.HEAD_CODES) * dim * n_chunks + 1
# cell pointers, band L of term t in chunk c being cell (L * dim + t) * n_chunks + c (kernels.impact_bands),
# or a single 0 in a segment built without impact heads (no_heads: its main lists are whole).
# fwd_indices is uint16 when dim <= 65,536 (BERT's 30,522), else int32.
FWD_INDEX_U16_MAX_DIM = 1 << 16


def fwd_index_dtype(dim: int) -> type:
    """dtype of the forward store's term ids for a vocabulary of ``dim`` dims."""
    return np.uint16 if dim <= FWD_INDEX_U16_MAX_DIM else np.int32


def n_chunks(n: int) -> int:
    """Posting chunks of a segment of n docs (at least 1, so that an empty term still has a cell)."""
    return max(1, -(-n // POSTING_CHUNK))


@dataclass
class Segment:
    n: int
    dim: int
    approx_top_n: int  # approximate search reads each doc's this many heaviest terms; 0 = all
    arrays: dict[str, np.ndarray]
    _ids: list[str] | None = field(default=None, repr=False)
    files: dict | None = field(default=None, repr=False)  # manifest entries once committed
    _kernel_arrays: tuple | None = field(default=None, repr=False)  # kernels.SegmentArrays
    _id_views: tuple[np.ndarray, memoryview] | None = field(default=None, repr=False)  # see ids_of
    _fwd_views: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)  # see rows
    # row metadata (metadata.py): the rows' dicts, or None with meta_file set (read on first use) or
    # unset (no row carries any field)
    _meta: list[dict] | None = field(default=None, repr=False)
    meta_file: Path | None = field(default=None, repr=False)
    _meta_index: metadata.RowIndex | None = field(default=None, repr=False)
    # the residual lists derived in memory for a segment that does not store them (residual())
    _residual: tuple | None = field(default=None, repr=False, compare=False)
    _residual_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __getattr__(self, name):  # arrays read as attributes: seg.main_docs
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        raise AttributeError(name)

    # ----------------------------------------------------------------- build
    @classmethod
    def build(cls, batch: SparseBatch, ids: list[str], *, dense_fraction: float, approx_top_n: int,
              impact_heads: bool = True, metadata: list[dict] | None = None, approx_mass: float = 0.0,
              residual_lists: bool = True) -> "Segment":
        indptr, indices, values = batch.indptr, batch.indices, batch.values
        n, dim = len(batch), batch.dim
        nch = n_chunks(n)
        # the rows' check, term statistics and posting counts in one pass (SparseBatch has checked the dims'
        # range, so a bad row cannot make it index out of bounds)
        kernels = road.kernels()  # a build runs the kernels whatever its size
        bad, df, wmax, df_main, is_main, main_cnt, res_cnt = kernels.segment_stats(
            indptr, indices, values, dim, approx_top_n, float(approx_mass), nch)
        if bad >= 0:
            raise ValueError(
                f"document row {bad} ({ids[bad]!r}) must have strictly increasing dims and finite "
                "weights >= 0 (build SparseBatch with from_scipy/from_dicts to sort and merge)")
        scale = (wmax / np.float32(255.0)).astype(np.float32)
        # dense columns for frequent terms: 1 byte per doc beats 5 bytes per posting above ~n/5,
        # and a streamed column is several times faster to add than a scattered list
        dense_min_df = max(1, int(np.ceil(dense_fraction * n))) if dense_fraction <= 1 else n + 1
        is_dense = df_main >= dense_min_df
        dense_slot = np.full(dim, -1, np.int32)
        dense_slot[is_dense] = np.arange(int(is_dense.sum()), dtype=np.int32)
        main_cnt.reshape(dim, nch)[is_dense] = 0  # their main postings go to their columns
        main_ptr = np.zeros(dim * nch + 1, np.int64)
        np.cumsum(main_cnt, out=main_ptr[1:])
        res_ptr = np.zeros(dim * nch + 1, np.int64)
        np.cumsum(res_cnt, out=res_ptr[1:])
        del main_cnt, res_cnt
        main_docs, main_codes, res_docs, res_codes, dense, bmax = kernels.fill_postings(
            indptr, indices, values, scale, is_main, dense_slot, int(is_dense.sum()), main_ptr, res_ptr)
        del is_main
        if impact_heads:
            main_ptr, main_docs, main_codes, *bands = kernels.impact_bands(main_ptr, main_docs, main_codes, dense,
                                                                           dense_slot, n)
        else:
            bands = no_heads()
        ids_ptr, ids_blob = _id_blob(ids)
        arrays = dict(
            # the forward store shares the batch's indptr and values (no 0.6 GB copy at 1M docs):
            # SparseBatch is immutable by contract, so do not modify a batch after indexing it. Term ids
            # are narrowed to uint16 when they fit (a copy of half the size).
            fwd_indptr=indptr, fwd_indices=indices.astype(fwd_index_dtype(dim)), fwd_values=values,
            df=df.astype(np.int32), wmax=wmax, scale=scale, dense_slot=dense_slot, dense=dense, bmax=bmax,
            main_ptr=main_ptr, main_docs=main_docs, main_codes=main_codes,
            res_ptr=res_ptr, res_docs=res_docs, res_codes=res_codes,
            **dict(zip(BANDS, bands)),
            ids_ptr=ids_ptr, ids_blob=ids_blob,
        )
        if not residual_lists:  # approximate search never reads them; exact search derives them (residual)
            for name in RESIDUAL:
                del arrays[name]
        if metadata is not None and not any(metadata):
            metadata = None  # no field anywhere: no file
        return cls(n, dim, approx_top_n, arrays, list(ids), _meta=metadata)

    @property
    def stores_residual(self) -> bool:
        """Whether the segment keeps (and saves) its residual lists; False: built with residual_lists=False,
        they are derived when first needed (residual)."""
        return RESIDUAL[0] in self.arrays

    def residual(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(res_ptr, res_docs, res_codes): the stored residual lists, or for a segment that keeps none the
        ones derived from its forward store, main lists and dense columns (kernels.residual_lists: the
        arrays a build with them would have stored), made once under a lock and kept in memory."""
        if self.stores_residual:
            return tuple(self.arrays[a] for a in RESIDUAL)
        if self._residual is None:
            with self._residual_lock:
                if self._residual is None:
                    a = self.arrays
                    self._residual = road.kernels().residual_lists(
                        a["fwd_indptr"], a["fwd_indices"], a["fwd_values"], a["scale"], a["dense_slot"], a["dense"],
                        a["main_ptr"], a["main_docs"], a["band_ptr"], a["band_docs"])
        return self._residual

    @property
    def has_heads(self) -> bool:
        """Whether the segment holds impact heads (built with impact_heads=False: a one-entry band_ptr; an
        older format's head_ptr before with_bands has split it)."""
        a = self.arrays
        return len(a["band_ptr"] if "band_ptr" in a else a.get("head_ptr", ())) > 1

    # ----------------------------------------------------------------- metadata
    def has_metadata(self) -> bool:
        return self._meta is not None or self.meta_file is not None

    def metadata(self) -> list[dict]:
        """The rows' metadata dicts ({} for a row without fields), read from the file on first use."""
        if self._meta is None:
            if self.meta_file is None:
                return [{}] * self.n
            self._meta = metadata.loads(self.meta_file, self.n)
        return self._meta

    def metadata_index(self) -> metadata.RowIndex:
        """Per-field postings of the rows' metadata, for filters (built once, lazily per field)."""
        if self._meta_index is None:
            self._meta_index = metadata.RowIndex(self.metadata())
        return self._meta_index

    # ----------------------------------------------------------------- checks
    def check(self, where) -> None:
        """Every value the kernels use as an index, checked in one O(size) pass, so that no byte pattern
        in a loaded file can make them read or write out of bounds (the loader has already checked
        dtypes and shapes; verify=False skips only the checksums, never this). Raises IndexCorruptError
        naming the file."""
        a, n, dim = self.arrays, self.n, self.dim
        n_dense = a["dense"].shape[0]
        nch = n_chunks(n)
        for ptr, items, hi, per in (("fwd_indptr", "fwd_indices", dim, 0), ("main_ptr", "main_docs", n, nch),
                                    ("res_ptr", "res_docs", n, nch), ("band_ptr", "band_docs", n, nch),
                                    ("head_ptr", "head_docs", n, nch)):
            if ptr not in a or (ptr in ("band_ptr", "head_ptr") and len(a[ptr]) == 1):  # absent, or built without
                continue
            # a posting list cell (term, chunk) holds offsets below the chunk's length (the kernels index
            # the chunk's accumulator by them), in doc order (the residual lists' derivation and the split
            # into bands walk them in order), so order is checked with the bounds.
            bad = road.check_lists(a[ptr], a[items], hi, per, POSTING_CHUNK)
            if bad == -1:
                _corrupt(where, ptr, f"pointers must rise from 0 to {len(a[items])}")
            if bad >= 0 and per:
                t, c = divmod(bad, per)
                t %= dim  # a band cell counts bands too
                _corrupt(where, items, f"term {t}, chunk {c} holds doc offsets outside the chunk or out of order")
            if bad >= 0:
                _corrupt(where, items, f"row {bad} holds values outside [0, {hi}) or out of order")
        ids_ptr = a["ids_ptr"]
        if ids_ptr[0] != 0 or ids_ptr[-1] != len(a["ids_blob"]) or bool(np.any(ids_ptr[1:] < ids_ptr[:-1])):
            _corrupt(where, "ids_ptr", f"pointers must rise from 0 to {len(a['ids_blob'])}")
        slot = a["dense_slot"]
        if len(slot) and (int(slot.min()) < -1 or int(slot.max()) >= n_dense):
            _corrupt(where, "dense_slot", f"slots must be in [-1, {n_dense})")
        for name in ("wmax", "scale"):  # a NaN or negative step would poison every score
            x = a[name]
            if len(x) and not (bool(np.all(np.isfinite(x))) and x.min() >= 0):
                _corrupt(where, name, "values must be finite and >= 0")
        df = a["df"]
        if len(df) and (int(df.min()) < 0 or int(df.max()) > n):
            _corrupt(where, "df", f"document frequencies must be in [0, {n}]")
        # a term some document holds has a positive code step (a zero one divides by zero in approx search)
        if bool(np.any((df > 0) & ~(a["scale"] > 0))):
            _corrupt(where, "scale", "a term held by documents has scale 0")
        try:
            self.ids_blob.tobytes().decode("utf-8")
        except UnicodeDecodeError as e:
            _corrupt(where, "ids_blob", f"not UTF-8 ({e.reason} at byte {e.start})")
        dup = self.duplicate_id()
        if dup is not None:
            _corrupt(where, "ids_blob", f"id {dup!r} appears twice")

    def id_hashes(self) -> np.ndarray:
        """uint64[n]: a hash of each id's bytes (FNV-1a), for uniqueness checks without decoding them."""
        return road.fnv1a(self.ids_ptr, self.ids_blob)

    def duplicate_id(self, hashes: np.ndarray | None = None) -> str | None:
        """An id that appears twice in this segment, or None (one O(bytes) hash pass and a sort; ids
        decoded only when two hashes are equal)."""
        hashes = self.id_hashes() if hashes is None else hashes
        ordered = np.sort(hashes)
        if not bool(np.any(ordered[1:] == ordered[:-1])):
            return None
        return duplicate(hashes, self.id_of)

    # ----------------------------------------------------------------- ids
    @property
    def ids(self) -> list[str]:
        """External ids of the docs, decoded once on first use (loading stays cheap)."""
        if self._ids is None:
            try:
                blob = self.ids_blob.tobytes().decode("utf-8")
                ptr = self.ids_ptr
                if len(blob) == len(self.ids_blob):  # pure ASCII: byte offsets are char offsets
                    self._ids = [blob[ptr[i]:ptr[i + 1]] for i in range(self.n)]
                else:
                    raw = self.ids_blob.tobytes()
                    self._ids = [raw[ptr[i]:ptr[i + 1]].decode("utf-8") for i in range(self.n)]
            except UnicodeDecodeError as e:  # an id cut inside a character: ids_ptr is damaged
                raise IndexCorruptError(f"segment ids are not UTF-8 ({e.reason}): ids_ptr or ids_blob damaged") from None
        return self._ids

    def id_of(self, local: int) -> str:
        return self.ids_of([local])[0]

    def ids_of(self, local: Sequence[int]) -> list[str]:
        """The external ids of these local docs, decoded from the blob (a search's few hits do not
        read the whole blob, as ids() does)."""
        if self._ids is not None:
            return list(map(self._ids.__getitem__, local))  # C-level: no comprehension frame per search
        # a memoryview of the blob: slicing and decoding it took a third less time than slicing the
        # array and copying out its bytes (and each slice of an np.memmap runs its __array_finalize__, ~3 us);
        # made once per segment: the two views and the two attribute reads (through __getattr__) were
        # ~2 us of every search
        if self._id_views is None:
            self._id_views = self.ids_ptr.view(np.ndarray), memoryview(self.ids_blob.view(np.ndarray))
        ptr, blob = self._id_views
        out = []
        for i in local:
            try:
                out.append(str(blob[ptr[i]:ptr[i + 1]], "utf-8"))
            except UnicodeDecodeError as e:
                raise IndexCorruptError(f"segment id {i} is not UTF-8 ({e.reason}): ids_ptr or ids_blob damaged") from None
        return out

    # ----------------------------------------------------------------- access
    def rows(self, local: np.ndarray) -> SparseBatch:
        """The stored vectors of these local docs. Gathered here, not through a SparseBatch of the whole
        store: that would convert (copy) and range-check every term id of the segment."""
        local = np.asarray(local, np.int64)
        ip, indices, values = self.fwd_views()
        starts, ends = ip[local], ip[local + 1]
        indptr = np.zeros(len(local) + 1, np.int64)
        np.cumsum(ends - starts, out=indptr[1:])
        gather = np.repeat(starts - indptr[:-1], ends - starts) + np.arange(indptr[-1])
        return SparseBatch(indptr, indices[gather].astype(np.int32), values[gather], self.dim)

    def fwd_views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fwd_indptr, fwd_indices, fwd_values) as plain ndarray views of the (memory-mapped) store, made
        once: indexing an np.memmap runs its __array_finalize__ on every result, which was most of a page's
        explanation (10 hits: ~1 ms)."""
        if self._fwd_views is None:
            self._fwd_views = tuple(a.view(np.ndarray) for a in (self.fwd_indptr, self.fwd_indices, self.fwd_values))
        return self._fwd_views

    def has_dim(self, d: int) -> np.ndarray:
        """bool[n]: docs whose weight for dim d is > 0 (from the posting lists)."""
        out = np.zeros(self.n, bool)
        if d < 0 or d >= self.dim or self.df[d] == 0:
            return out
        s = self.dense_slot[d]
        if s >= 0:
            out |= self.dense[s] > 0
        nch = n_chunks(self.n)
        res_ptr, res_docs, _ = self.residual()
        lists = [(res_ptr, res_docs, d * nch)]
        if s < 0:  # a list term's postings: its main list, its bands and its residual list
            lists.append((self.main_ptr, self.main_docs, d * nch))
            if self.has_heads:
                lists += [(self.band_ptr, self.band_docs, (L * self.dim + d) * nch) for L in range(len(HEAD_CODES))]
        for ptr, docs, first in lists:
            for c in range(nch):
                out[c * POSTING_CHUNK + docs[ptr[first + c]:ptr[first + c + 1]].astype(np.int64)] = True
        return out

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))

    def kernel_arrays(self, exact: bool = True) -> tuple:
        """The arrays search reads, as the kernels take them (built once: attribute lookups cost
        ~1 us each per query otherwise). Only exact search reads the residual lists: for approximate
        search a segment that keeps none hands empty ones (and derives nothing)."""
        if self._kernel_arrays is None or (exact and self._kernel_arrays.res_ptr is _NO_RESIDUAL[0]):
            if self.stores_residual or exact:
                res = self.residual()
            else:
                res = self._residual if self._residual is not None else _NO_RESIDUAL
            make = road.kernels().SegmentArrays
            self._kernel_arrays = make(
                **{name: self.arrays[name] for name in make._fields if name not in RESIDUAL},
                **dict(zip(RESIDUAL, res)))
        return self._kernel_arrays

    def kernel_segment(self, exact: bool = True):
        """kernel_arrays(exact) as the kernels take them (kernels.KernelSegment: one table of the arrays'
        addresses), made once per kernel_arrays (a save with remap=True makes new ones, an exact search
        on a segment that keeps no residual lists too)."""
        arrays = self.kernel_arrays(exact)
        cached = self.__dict__.get("_kernel_segment")
        if cached is None or cached.arrays is not arrays:
            cached = self.__dict__["_kernel_segment"] = road.kernels().kernel_segment(arrays)
        return cached


def _id_blob(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids_ptr, ids_blob): the ids' UTF-8 bytes concatenated and where each starts. ASCII ids (the usual
    case) are encoded in one piece, their byte lengths being their lengths: encoding them one by one was
    ~20 ms of a 100K-document build."""
    joined = "".join(ids)
    ptr = np.zeros(len(ids) + 1, np.int64)
    if joined.isascii():
        np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)), out=ptr[1:])
        return ptr, np.frombuffer(joined.encode("ascii"), np.uint8)
    blobs = [s.encode("utf-8") for s in ids]
    np.cumsum(np.fromiter(map(len, blobs), np.int64, len(blobs)), out=ptr[1:])
    return ptr, np.frombuffer(b"".join(blobs), np.uint8)


# the residual lists approximate search is handed by a segment that keeps none (it never reads them)
_NO_RESIDUAL = (np.zeros(1, np.int64), np.empty(0, np.uint16), np.empty(0, np.uint8))


def no_heads() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The head arrays of a segment built without impact heads: one pointer, no postings. The kernels
    read whole lists there (kernels._pick_list); InvertedIndex.search refuses an impact floor."""
    return np.zeros(1, np.int64), np.empty(0, np.uint16), np.empty(0, np.uint8)


def with_bands(arrays: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The arrays of a loaded segment as search reads them: a segment of format version 10 as it is; one
    saved with the nested heads of versions 4 to 9, or before 4 without heads, has whole main lists, split
    here into main lists and bands (in memory: the files stay as they are), or given no bands when it was
    built without heads."""
    if all(b in arrays for b in BANDS):
        return arrays
    out = {a: v for a, v in arrays.items() if a not in HEADS}
    if "head_ptr" in arrays and len(arrays["head_ptr"]) == 1:
        return dict(out, **dict(zip(BANDS, no_heads())))
    main_ptr, main_docs, main_codes, *bands = road.kernels().impact_bands(
        arrays["main_ptr"], arrays["main_docs"], arrays["main_codes"], arrays["dense"], arrays["dense_slot"], n)
    return dict(out, main_ptr=main_ptr, main_docs=main_docs, main_codes=main_codes, **dict(zip(BANDS, bands)))


def duplicate(hashes: np.ndarray, id_of) -> str | None:
    """A repeated id among rows with these hashes (``id_of(row)`` decodes one), or None."""
    order = np.argsort(hashes, kind="stable")
    sh = hashes[order]
    same = np.nonzero(sh[1:] == sh[:-1])[0]
    for j in same:  # equal hashes: compare the ids themselves (a 64-bit collision is not a duplicate)
        a, b = id_of(int(order[j])), id_of(int(order[j + 1]))
        if a == b:
            return a
    return None


def _corrupt(where, name: str, why: str):
    raise IndexCorruptError(f"{where}/{name}.npy: {why} (file damaged)")
