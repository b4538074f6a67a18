"""numba kernels of the inverted index: segment build and blocked top-k search.

Layout of one segment (n docs, vocabulary size V), see segment.py for the arrays:

* every posting carries a uint8 *code* (weight quantised per term, ``code * scale[t] ~ w``, present
  weights never round to 0), so scoring streams 1 byte per posting instead of 4;
* terms in at least ``dense_min_df`` docs are stored as a dense code column over all n docs (no doc
  ids; SIMD friendly), the others as (doc id, code) posting lists sorted by doc id, cut into chunks
  of POSTING_CHUNK docs so that a doc id is a uint16 offset in its chunk (3 bytes a posting);
* the exact float32 doc vectors stay in a forward CSR store (term ids as uint16 when the vocabulary
  has at most 65,536 dims).
* impact bands: a term's postings of code >= 128, 64-127 and 32-63 in three disjoint chunked posting lists
  beside its main list, which keeps the rest (impact_bands), so that approximate search can read a term
  only as far as its impacts matter and exact search reads every band.

The search kernels take the segment's arrays as one SegmentArrays (handed over as a KernelSegment: one
table of their addresses) and the knobs as one SearchOptions.
Search walks the docs in chunks of CHUNK (a posting chunk; the accumulator stays in L2), scatters the sparse lists,
adds the dense columns per BLOCK-doc block, skips blocks whose upper bound (block max of the scattered
part + block-max codes of the dense columns) cannot reach the running threshold, and keeps every doc
whose quantised score is within ``2 * err`` of the k-th best quantised score, where ``err`` bounds the
quantisation error of one doc's score. Those candidates are rescored exactly from the forward store,
so exact mode returns the exact top-k (proof in search_one's comment), not an approximation of it.
Approximate mode runs the same loop with a cut query (cut_row), no error window and a larger heap
(``rerank``): exactly the rerank best quantised scores are rescored with the full query. Its first
pass usually scores in uint16 with integer query weights, which needs no error bound; search_one is
one body compiled for a float32 and a uint16 accumulator (the steps that differ: _by_acc_dtype).
"""
from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic, overload

from tokenspace.index import numba_cache
from tokenspace.index.layout import BAD_QUERY, BLOCK, HEAD_CODES, POSTING_CHUNK, QUERY_OUT_OF_RANGE

numba_cache.ensure(__file__)  # before any cache=True kernel below: a place numba can write, or no cache

# docs per accumulator chunk: one posting chunk (256 KiB of float32, L2 resident), so that a chunk reads
# each of its sparse lists' cells whole, with no search for where a list leaves it. Against 16K chunks
# that bisected each list's end (a term's main list and three impact bands are four lists): 2-17% less time
# a query on real-text-100K and 200K, exact and approximate, with or without heads (in-process
# interleaved A/B, identical answers).
CHUNK = POSTING_CHUNK
# POSTING_CHUNK (docs per posting chunk, each doc a uint16 offset in it) and BLOCK (docs per block-max
# block) are layout.py's, so that the loader reads them without numba
SUB = 512  # docs per selection sub-chunk
# docs per selection piece inside a sub-chunk: 16 rather than 64 scans a quarter of the docs one by one
# where a dense column keeps many pieces above the threshold (real-text-967K, query_mass 0.8, impact_floor
# 0.2, rerank 100: ~8% less time a query, in-process A/B; exact mode unchanged within 1%)
PIECE = 16
# 4-byte entries per 64-byte cache line: rescoring touches each line of a candidate's row ahead of scoring it
# (uint16 term ids: each line twice). A constant: a step read from the array's itemsize is a run-time
# value to numba, and that loop cost more than touching only each row's ends (rescore-rows benchmark)
LINE_ENTRIES = 16
NO_THRESHOLD = -np.inf


# ----------------------------------------------------------------------------- build
@njit(cache=True, nogil=True)
def check_rows(indptr, indices, values):
    """-1 if every row has strictly increasing dims and finite weights >= 0, else the bad row."""
    for i in range(len(indptr) - 1):
        if not row_ok(indices, values, indptr[i], indptr[i + 1]):
            return i
    return -1


@njit(cache=True, nogil=True, inline="always")
def row_ok(indices, values, a, b) -> bool:
    """Whether entries [a, b) have strictly increasing dims and finite weights >= 0: the one rule a row
    meets, for documents (check_rows, segment_stats) and queries (search_query) alike."""
    for p in range(a, b):
        v = values[p]
        if not (v >= 0.0 and v < np.inf) or (p > a and indices[p] <= indices[p - 1]):
            return False
    return True



# ----------------------------------------------------------------------------- a loaded segment's checks
# (segment.Segment.check; numpy_checks.py holds the same checks in numpy, for a small index in a process
# without numba: index/road.py)
@njit(cache=True, nogil=True)
def fnv1a(ptr, blob):
    """uint64 FNV-1a hash of each row's bytes blob[ptr[i]:ptr[i + 1]]."""
    out = np.empty(len(ptr) - 1, np.uint64)
    for i in range(len(ptr) - 1):
        h = np.uint64(14695981039346656037)
        for p in range(ptr[i], ptr[i + 1]):
            h = (h ^ np.uint64(blob[p])) * np.uint64(1099511628211)
        out[i] = h
    return out


@njit(cache=True, nogil=True)
def check_lists(ptr, items, hi, per, chunk):
    """CSR structure: -1 when ``ptr`` does not rise from 0 to len(items); else the first row whose
    items are outside [0, hi) or not strictly increasing; -2 when all is well. per > 0: rows are
    (term, chunk) cells of posting lists, per cells a term, holding offsets from the chunk's first
    doc, so row r's items must be below min(chunk, hi - (r % per) * chunk)."""
    if ptr[0] != 0 or ptr[len(ptr) - 1] != len(items):
        return -1
    for r in range(len(ptr) - 1):  # all pointers first: the scan below must not leave items
        if ptr[r + 1] < ptr[r]:
            return -1
    for r in range(len(ptr) - 1):
        a, b = ptr[r], ptr[r + 1]
        top = hi
        if per > 0:
            top = min(chunk, hi - (r % per) * chunk)
        prev = -1
        for p in range(a, b):
            x = np.int64(items[p])
            if x <= prev or x >= top:
                return r
            prev = x
    return -2

# Impact bands: each term's postings split by code into disjoint bands, doc-sorted and chunked like the
# main lists. Band L holds the codes in [HEAD_CODES[L], HEAD_CODES[L - 1]) (>= 128, 64-127, 32-63: 1/2,
# 1/4, 1/8 of the term's largest weight; a level at 1/16 held 82% of all postings and was dropped), and a
# list term's main list keeps only its postings below HEAD_CODES[-1]. A term's impact head at level L
# (every posting of code >= HEAD_CODES[L]) is bands 0..L, read as L + 1 lists; a query term whose
# weight q makes its postings' impacts q * w small next to the query's largest one reads only the head
# that still holds every posting above the impact floor (see _pick_list), and a whole read is the main
# list and every band. Dense terms keep their whole column and get bands beside it, copied from it (a
# column has no list to take them from). Reading fewer postings per term is Seismic's static pruning
# made per query: on real-text-967K a floor of 0.2 to 0.3 of the query's largest impact cut the postings
# read 2.5-4x at the same recall once the heap held more candidates (docs/history.md, "impact heads").
# Until format version 9 the heads were nested copies beside whole main lists: 1.5x the postings of
# real-text-100K (99.6 MB against 67.9 without heads); a segment saved so is split when loaded.
# HEAD_CODES: layout.py's levels (128, 64, 32)


def impact_bands(main_ptr, main_docs, main_codes, dense, dense_slot, n):
    """(main_ptr, main_docs, main_codes, band_ptr, band_docs, band_codes): whole main lists (as
    fill_postings makes them) split into what stays in the main lists and the impact bands, the dense
    columns' bands copied from them; band L of term t in chunk c is cell (L * dim + t) * n_chunks + c."""
    dim = len(dense_slot)
    nch = (len(main_ptr) - 1) // dim
    keep = np.zeros(dim * nch, np.int64)
    count = np.zeros(len(HEAD_CODES) * dim * nch, np.int64)
    no16, no8 = np.empty(0, np.uint16), np.empty(0, np.uint8)
    _band_pass(main_ptr, main_docs, main_codes, dense, dense_slot, n, keep, count, no16, no8, no16, no8, False)
    new_ptr = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(keep, out=new_ptr[1:])
    band_ptr = np.zeros(len(count) + 1, np.int64)
    np.cumsum(count, out=band_ptr[1:])
    new_docs, new_codes = np.empty(new_ptr[-1], np.uint16), np.empty(new_ptr[-1], np.uint8)
    band_docs, band_codes = np.empty(band_ptr[-1], np.uint16), np.empty(band_ptr[-1], np.uint8)
    _band_pass(main_ptr, main_docs, main_codes, dense, dense_slot, n, new_ptr[:-1].copy(), band_ptr[:-1].copy(),
               new_docs, new_codes, band_docs, band_codes, True)
    return new_ptr, new_docs, new_codes, band_ptr, band_docs, band_codes


@njit(cache=True, nogil=True)
def _band_pass(main_ptr, main_docs, main_codes, dense, dense_slot, n, kpos, bpos, k_docs, k_codes, b_docs, b_codes,
               fill):
    """Walk every term's postings (list or column) in doc order: count what each main cell keeps into kpos
    and each band cell's postings into bpos, or (fill) also write them there."""
    dim = len(dense_slot)
    nch = (len(main_ptr) - 1) // dim
    for t in range(dim):
        s = dense_slot[t]
        for ch in range(nch):
            if s >= 0:
                col = dense[s, ch * POSTING_CHUNK:min(n, (ch + 1) * POSTING_CHUNK)]
                for j in range(len(col)):  # code 0 (doc without the term) is below every band
                    L = _band_of(col[j])
                    if L >= 0:
                        _put(bpos, (L * dim + t) * nch + ch, np.uint16(j), col[j], b_docs, b_codes, fill)
            else:
                for p in range(main_ptr[t * nch + ch], main_ptr[t * nch + ch + 1]):
                    L = _band_of(main_codes[p])
                    if L >= 0:
                        _put(bpos, (L * dim + t) * nch + ch, main_docs[p], main_codes[p], b_docs, b_codes, fill)
                    else:
                        _put(kpos, t * nch + ch, main_docs[p], main_codes[p], k_docs, k_codes, fill)


@njit(cache=True, nogil=True, inline="always")
def _band_of(c):
    """The band of code c (HEAD_CODES falls), or -1 below them all."""
    for L in range(len(HEAD_CODES)):
        if c >= HEAD_CODES[L]:
            return L
    return -1


@njit(cache=True, nogil=True, inline="always")
def _put(pos, cell, doc, c, docs, codes, fill):
    if fill:
        docs[pos[cell]] = doc
        codes[pos[cell]] = c
    pos[cell] += 1


@njit(cache=True, nogil=True)
def term_stats(indptr, indices, values, dim, approx_top_n, approx_mass=0.0):
    """Per-term doc frequency and max weight; with approx_top_n > 0 or approx_mass in (0, 1) also the
    df of each doc's top part.

    Returns (df, wmax, df_main, is_main) where is_main marks the postings that go to the main lists
    (all of them when both are off; otherwise each doc's approx_top_n heaviest and, with approx_mass,
    only its heaviest terms until they hold approx_mass of its weight: the term that crosses the mark
    stays, ties to the smaller dim); the others go to the residual lists, which only exact search reads.
    The mass cut is SINDI's document pruning (its doc_prune_ratio is 1 - approx_mass): a document with
    a few heavy terms keeps few, a flat one keeps many.
    """
    _, df, wmax, df_main, is_main, _, _ = segment_stats(indptr, indices, values, dim, approx_top_n, approx_mass, 0)
    return df, wmax, df_main, is_main


@njit(cache=True, nogil=True)
def segment_stats(indptr, indices, values, dim, approx_top_n, approx_mass, n_chunks):
    """What a segment build reads from its rows, in one pass over them (three passes cost ~25 ms more at
    100K documents): (bad, df, wmax, df_main, is_main, main_cnt, res_cnt).

    bad: the first row check_rows refuses (dims not strictly increasing, a weight not finite and >= 0),
    or -1; the other answers are then not to be used. df, wmax, df_main, is_main: term_stats. main_cnt,
    res_cnt: postings per (term, POSTING_CHUNK-doc chunk) cell, cell = term * n_chunks + chunk, of the
    main lists and of the residual lists (main_cnt still counts the main postings of the
    terms that become dense columns, whose cells the caller zeroes). n_chunks 0: no counts.
    """
    n = len(indptr) - 1
    df = np.zeros(dim, np.int64)
    df_main = np.zeros(dim, np.int64)
    wmax = np.zeros(dim, np.float32)
    is_main = np.ones(len(indices), np.bool_)
    main_cnt = np.zeros(dim * n_chunks, np.int64)
    res_cnt = np.zeros(dim * n_chunks, np.int64)
    bad = -1
    for i in range(n):
        a, b = indptr[i], indptr[i + 1]
        if bad < 0 and not row_ok(indices, values, a, b):
            bad = i
        if approx_top_n > 0 and b - a > approx_top_n:
            order = np.argsort(-values[a:b], kind="mergesort")
            for r in range(approx_top_n, b - a):
                is_main[a + order[r]] = False
        if 0.0 < approx_mass < 1.0 and b - a > 1:
            order = np.argsort(-values[a:b], kind="mergesort")
            total = 0.0
            for p in range(a, b):
                total += max(values[p], 0.0)
            mark = approx_mass * total
            held = 0.0
            for r in range(b - a):
                if held >= mark:
                    is_main[a + order[r]] = False
                else:
                    held += max(values[a + order[r]], 0.0)
        ch = i // POSTING_CHUNK
        for p in range(a, b):
            v = values[p]
            if v <= 0.0:
                is_main[p] = False
                continue
            t = indices[p]
            df[t] += 1
            if is_main[p]:
                df_main[t] += 1
                if n_chunks > 0:
                    main_cnt[t * n_chunks + ch] += 1
            elif n_chunks > 0:
                res_cnt[t * n_chunks + ch] += 1
            if v > wmax[t]:
                wmax[t] = v
    return bad, df, wmax, df_main, is_main, main_cnt, res_cnt


@njit(cache=True, nogil=True)
def encode(v, inv_scale):
    """uint8 code of weight v > 0 for a term with scale 1 / inv_scale: round to nearest, never 0."""
    c = np.int64(v * inv_scale + 0.5)
    if c < 1:
        c = 1
    if c > 255:
        c = 255
    return np.uint8(c)


@njit(cache=True, nogil=True)
def fill_postings(indptr, indices, values, scale, is_main, dense_slot, n_dense, main_ptr, res_ptr):
    """Scatter the forward CSR into posting lists, dense columns and block maxima.

    main_ptr/res_ptr: cell pointers (segment_stats' counts, summed): the postings of term t in chunk c
    are [ptr[t * n_chunks + c], ptr[t * n_chunks + c + 1]), doc-sorted, each doc stored as its uint16
    offset from the chunk's first doc (c * POSTING_CHUNK)."""
    n = len(indptr) - 1
    n_chunks = (len(main_ptr) - 1) // len(scale)
    main_docs = np.empty(main_ptr[-1], np.uint16)
    main_codes = np.empty(main_ptr[-1], np.uint8)
    res_docs = np.empty(res_ptr[-1], np.uint16)
    res_codes = np.empty(res_ptr[-1], np.uint8)
    dense = np.zeros((n_dense, n), np.uint8)
    nblocks = (n + BLOCK - 1) // BLOCK
    bmax = np.zeros((n_dense, nblocks), np.uint8)
    mpos = main_ptr[:-1].copy()
    rpos = res_ptr[:-1].copy()
    inv = np.zeros(len(scale), np.float32)
    for t in range(len(scale)):
        if scale[t] > 0:
            inv[t] = np.float32(1.0) / scale[t]
    for i in range(n):
        blk = i // BLOCK
        ch = i // POSTING_CHUNK
        off = np.uint16(i - ch * POSTING_CHUNK)
        for p in range(indptr[i], indptr[i + 1]):
            v = values[p]
            if v <= 0.0:
                continue
            t = indices[p]
            c = encode(v, inv[t])
            cell = t * n_chunks + ch
            if is_main[p]:
                s = dense_slot[t]
                if s >= 0:
                    dense[s, i] = c
                    if c > bmax[s, blk]:
                        bmax[s, blk] = c
                else:
                    main_docs[mpos[cell]] = off
                    main_codes[mpos[cell]] = c
                    mpos[cell] += 1
            else:
                res_docs[rpos[cell]] = off
                res_codes[rpos[cell]] = c
                rpos[cell] += 1
    return main_docs, main_codes, res_docs, res_codes, dense, bmax


@njit(cache=True, nogil=True)
def residual_lists(indptr, indices, values, scale, dense_slot, dense, main_ptr, main_docs, band_ptr, band_docs):
    """(res_ptr, res_docs, res_codes): the residual lists of a segment that did not keep them, derived from
    its forward store and its main lists, impact bands and dense columns. A posting is residual when its
    weight is > 0 and it is in neither its term's main list or bands nor its dense column (fill_postings
    put every other one there), so the answer is what fill_postings built, code for code, whatever cut
    chose the main postings. One pass over the rows finds them (a cursor per (term, chunk) cell of the
    main lists and of each band moves through them in doc order), a second writes them."""
    n = len(indptr) - 1
    dim = len(scale)
    n_chunks = (len(main_ptr) - 1) // dim
    res_ptr = np.zeros(dim * n_chunks + 1, np.int64)
    is_res = np.zeros(len(indices), np.bool_)
    cur = main_ptr[:-1].copy()
    bcur = band_ptr[:-1].copy()
    n_bands = len(HEAD_CODES) if len(band_ptr) > 1 else 0
    for i in range(n):
        ch = i // POSTING_CHUNK
        off = i - ch * POSTING_CHUNK
        for p in range(indptr[i], indptr[i + 1]):
            if values[p] <= 0.0:
                continue
            t = np.int64(indices[p])
            s = dense_slot[t]
            if s >= 0 and dense[s, i] > 0:
                continue
            cell = t * n_chunks + ch
            if s < 0 and cur[cell] < main_ptr[cell + 1] and np.int64(main_docs[cur[cell]]) == off:
                cur[cell] += 1
                continue
            banded = False
            for L in range(n_bands if s < 0 else 0):
                bc = (L * dim + t) * n_chunks + ch
                if bcur[bc] < band_ptr[bc + 1] and np.int64(band_docs[bcur[bc]]) == off:
                    bcur[bc] += 1
                    banded = True
                    break
            if banded:
                continue
            is_res[p] = True
            res_ptr[cell + 1] += 1
    for c in range(len(res_ptr) - 1):
        res_ptr[c + 1] += res_ptr[c]
    res_docs = np.empty(res_ptr[-1], np.uint16)
    res_codes = np.empty(res_ptr[-1], np.uint8)
    inv = np.zeros(dim, np.float32)
    for t in range(dim):
        if scale[t] > 0:
            inv[t] = np.float32(1.0) / scale[t]
    pos = res_ptr[:-1].copy()
    for i in range(n):
        ch = i // POSTING_CHUNK
        off = np.uint16(i - ch * POSTING_CHUNK)
        for p in range(indptr[i], indptr[i + 1]):
            if is_res[p]:
                t = np.int64(indices[p])
                cell = t * n_chunks + ch
                res_docs[pos[cell]] = off
                res_codes[pos[cell]] = encode(values[p], inv[t])
                pos[cell] += 1
    return res_ptr, res_docs, res_codes


# ----------------------------------------------------------------------------- search
class SegmentArrays(NamedTuple):
    """The arrays of one segment that search reads (segment.ARRAYS says what they hold), handed to the
    kernels as one value. Built by field name (Segment.kernel_arrays), so no list has to follow an
    argument order by hand. It crosses into numba as a KernelSegment (a table of the arrays' addresses)
    and is made again there (_segment; a field read is free)."""

    df: np.ndarray
    scale: np.ndarray
    dense_slot: np.ndarray
    dense: np.ndarray
    bmax: np.ndarray
    main_ptr: np.ndarray
    main_docs: np.ndarray
    main_codes: np.ndarray
    res_ptr: np.ndarray
    res_docs: np.ndarray
    res_codes: np.ndarray
    band_ptr: np.ndarray
    band_docs: np.ndarray
    band_codes: np.ndarray
    fwd_indptr: np.ndarray
    fwd_indices: np.ndarray
    fwd_values: np.ndarray


class SearchOptions(NamedTuple):
    """How to search one segment. Build it with search_options: numba compiles the kernels once per
    combination of field types, so the fields must always have the same ones."""

    k: int  # hits per query (at most the segment's size)
    rerank: int  # how many best first-pass scores the heap keeps: k in exact mode, the knob in approx
    exact: bool  # exact mode (2 err window, lists outside approx_top_n read) or approximate
    alpha: float  # block skipping: a 64-doc block is skipped when its bound is below threshold / alpha
    query_mass: float  # query term cut for candidate generation (1 = none); rescoring uses every term
    impact_floor: float  # approx: read only postings whose impact reaches this fraction of the largest
    mask: np.ndarray  # uint8[n], 1 = searchable; read only when has_mask
    has_mask: bool
    # a per-document penalty (float32[n], >= 0) subtracted from every score: the ranking is by
    # dot product - penalty (the hub prior, InvertedIndex.set_hub_prior); read only when has_prior
    penalty: np.ndarray
    has_prior: bool
    penalty_max: float  # the largest penalty: its float32 rounding widens exact mode's window
    # the smallest penalty of each PIECE-, SUB- and BLOCK-doc run, a hair below it (PenaltyMinima): a
    # run's largest dot product minus it bounds the run's penalised scores, so skipping stays as sharp
    # as without a prior where penalties are alike
    penalty_min: tuple
    # per-dim factors every query weight is multiplied by first (idf ** power), read when has_weights;
    # applied here rather than by building a weighted query batch (~10 us of a one-query search)
    weights: np.ndarray
    has_weights: bool


_NO_MASK = np.zeros(0, np.uint8)
_NO_PENALTY = np.zeros(0, np.float32)


class PenaltyMinima(NamedTuple):
    piece: np.ndarray
    sub: np.ndarray
    block: np.ndarray


_NO_MINIMA = PenaltyMinima(_NO_PENALTY, _NO_PENALTY, _NO_PENALTY)


def penalty_minima(penalty: np.ndarray) -> PenaltyMinima:
    """Per PIECE, SUB and BLOCK docs: the smallest penalty, shrunk by 1e-6 of it (rounding margin)."""
    def runs(size):
        return (np.minimum.reduceat(penalty, np.arange(0, len(penalty), size)) * np.float32(1 - 1e-6)).astype(np.float32)

    return PenaltyMinima(runs(PIECE), runs(SUB), runs(BLOCK)) if len(penalty) else _NO_MINIMA


def search_options(k, rerank, exact, alpha=1.0, query_mass=1.0, mask=None, impact_floor=0.0,
                   penalty=None, penalty_max=None, minima=None, weights=None) -> SearchOptions:
    """SearchOptions with fixed field types (mask: uint8[n] or None for every doc; penalty: float32[n]
    of values >= 0, or None for none; penalty_max and minima, penalty_minima(penalty): computed when not
    given; weights: float32[dim] of query-weight factors > 0, or None)."""
    if penalty is not None:
        penalty_max = float(penalty.max(initial=0.0)) if penalty_max is None else penalty_max
        minima = penalty_minima(penalty) if minima is None else minima
    return SearchOptions(int(k), int(rerank), bool(exact), float(alpha), float(query_mass), float(impact_floor),
                         _NO_MASK if mask is None else mask, mask is not None,
                         _NO_PENALTY if penalty is None else penalty, penalty is not None,
                         float(penalty_max or 0.0), tuple(_NO_MINIMA if minima is None else minima),
                         _NO_PENALTY if weights is None else weights, weights is not None)


# ----------------------------------------------------------------------------- arrays into a kernel
# numba's dispatcher types and unboxes every array argument on every call, ~0.2 us each: the segment's
# 17 arrays and the three scratch buffers were ~5 us of every one-query search (a recall-0.95 query on
# real-text-100K takes ~100 us). They cross as one int64 table each, a row (address, rows, columns) per
# array, made once and kept beside the arrays, and the kernel views that memory again (carray: no copy,
# no reference count). So whoever holds a table holds the arrays it points into: KernelSegment, and the
# thread's scratch (_SCRATCH). The forward store's term ids cross as themselves: their dtype
# (segment.fwd_index_dtype) picks the compiled kernel.


class KernelSegment(NamedTuple):
    """A segment's arrays as the kernels take them (kernel_segment)."""

    table: np.ndarray  # int64 [16, 3]: every SegmentArrays field but fwd_indices, in field order
    fwd_indices: np.ndarray
    arrays: "SegmentArrays"  # what the table points into, kept alive with it


def array_table(arrays) -> np.ndarray:
    """int64 [len(arrays), 3]: each C-contiguous 1-D or 2-D array's address, rows and columns (0 for 1-D)."""
    table = np.zeros((len(arrays), 3), np.int64)
    for i, a in enumerate(arrays):
        if not a.flags.c_contiguous or a.ndim not in (1, 2):
            raise ValueError(f"array {i} must be C-contiguous and 1-D or 2-D, got shape {a.shape}")
        table[i] = a.__array_interface__["data"][0], a.shape[0], a.shape[1] if a.ndim == 2 else 0
    return table


# what _segment views each row of a KernelSegment's table as: (dtype, ndim), in SegmentArrays' field order
# without fwd_indices (a loaded segment's arrays are checked against the same dtypes: inverted._DTYPES)
TABLE_LAYOUT = ((np.int32, 1), (np.float32, 1), (np.int32, 1), (np.uint8, 2), (np.uint8, 2), (np.int64, 1),
                (np.uint16, 1), (np.uint8, 1), (np.int64, 1), (np.uint16, 1), (np.uint8, 1), (np.int64, 1),
                (np.uint16, 1), (np.uint8, 1), (np.int64, 1), (np.float32, 1))


def kernel_segment(arrays: SegmentArrays) -> KernelSegment:
    """The segment's arrays as one table; refuses an array that _segment would misread (another dtype or
    number of dimensions: the kernel sees only an address)."""
    fields = arrays._asdict()
    fwd_indices = fields.pop("fwd_indices")
    for (name, a), (dtype, ndim) in zip(fields.items(), TABLE_LAYOUT, strict=True):
        if a.dtype != dtype or a.ndim != ndim:
            raise ValueError(f"{name} must be {ndim}-D {np.dtype(dtype)}, got {a.ndim}-D {a.dtype}")
    return KernelSegment(array_table(list(fields.values())), fwd_indices, arrays)


@intrinsic
def _address(typingctx, address, dtype):
    """The int64 ``address`` as a pointer to items of ``dtype`` (a numpy scalar type), for carray."""
    pointer = types.CPointer(dtype.instance_type)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(pointer))

    return pointer(address, dtype), codegen


@njit(cache=True, nogil=True, inline="always")
def _view1(table, i, dtype):
    return carray(_address(table[i, 0], dtype), (table[i, 1],))


@njit(cache=True, nogil=True, inline="always")
def _view2(table, i, dtype):
    return carray(_address(table[i, 0], dtype), (table[i, 1], table[i, 2]))


@njit(cache=True, nogil=True, inline="always")
def _segment(t, fwd_indices):
    """SegmentArrays again from a KernelSegment's table and term ids (dtypes: segment.ARRAYS)."""
    u8, u16, i32, i64, f32 = np.uint8, np.uint16, np.int32, np.int64, np.float32
    return SegmentArrays(_view1(t, 0, i32), _view1(t, 1, f32), _view1(t, 2, i32), _view2(t, 3, u8), _view2(t, 4, u8),
                         _view1(t, 5, i64), _view1(t, 6, u16), _view1(t, 7, u8), _view1(t, 8, i64), _view1(t, 9, u16),
                         _view1(t, 10, u8), _view1(t, 11, i64), _view1(t, 12, u16), _view1(t, 13, u8),
                         _view1(t, 14, i64), fwd_indices, _view1(t, 15, f32))


# A query's working arrays (its lists, heap, candidates, block runs, rescoring rows) were ~25 small arrays
# allocated and freed inside the kernels on every query; after the query's streaming their allocator's
# memory is cold, and they cost several us of a one-query search. They are kept per thread beside the
# accumulators instead (Work), sized for TERM_CAP query terms and CAND_CAP candidates; a query that needs
# more gets new arrays for that query (_take).
TERM_CAP = 1024  # query terms (after the weights and the cut) the kept term arrays hold
CAND_CAP = 4096  # heap and candidate slots the kept arrays hold (a heap of rerank; 4 * rerank candidates)
LISTS_PER_TERM = len(HEAD_CODES) + 2  # a term's main list, its bands and a residual list (_query_terms_f32)


class Work(NamedTuple):
    """One thread's search buffers. The first three are all zeros between searches (search_one leaves them
    so, as it must between the rows of a batch); the others are overwritten by each query."""

    qdense: np.ndarray  # float32[dim]: the full query, for rescoring
    acc: np.ndarray  # float32[CHUNK]: the exact first pass's accumulator
    acc16: np.ndarray  # uint16[CHUNK16]: the 16-bit first pass's accumulator
    sp_w32: np.ndarray  # the query's sparse lists: weight (float32 or uint16 by pass), first cell, source
    sp_w16: np.ndarray
    sp_cell: np.ndarray
    sp_src: np.ndarray
    sp_pos: np.ndarray  # each list's first posting and end in the current posting chunk
    sp_end: np.ndarray
    dn_slot: np.ndarray  # the query's dense columns: slot and weight (float32 or uint16)
    dn_w32: np.ndarray
    dn_w16: np.ndarray
    heap: np.ndarray  # float32: min-heap of the best first-pass scores
    c_doc: np.ndarray  # candidates: doc and first-pass score
    c_s: np.ndarray
    run0: np.ndarray  # doc ranges of a chunk's scored blocks
    run1: np.ndarray
    ub32: np.ndarray  # block bounds (float32 or int64 by pass)
    ub64: np.ndarray
    cand: np.ndarray  # rescoring: each kept candidate's doc and forward-store row bounds
    start: np.ndarray
    end: np.ndarray
    one: np.ndarray  # float32[1]: a float's bits (_float_bits), and the rescoring's touched sum


# dtype of each Work field after the first three (which depend on dim) and its size; the dense columns'
# arrays hold 4 more than TERM_CAP: the 16-bit pass pads its columns to whole quads (QUAD, below)
_WORK_LAYOUT = ((np.float32, LISTS_PER_TERM * TERM_CAP), (np.uint16, LISTS_PER_TERM * TERM_CAP),
                (np.int64, LISTS_PER_TERM * TERM_CAP), (np.int8, LISTS_PER_TERM * TERM_CAP),
                (np.int64, LISTS_PER_TERM * TERM_CAP), (np.int64, LISTS_PER_TERM * TERM_CAP),
                (np.int64, TERM_CAP + 4), (np.float32, TERM_CAP + 4), (np.uint16, TERM_CAP + 4),
                (np.float32, CAND_CAP), (np.int64, CAND_CAP), (np.float32, CAND_CAP),
                (np.int64, CHUNK // BLOCK), (np.int64, CHUNK // BLOCK), (np.float32, CHUNK // BLOCK),
                (np.int64, CHUNK // BLOCK), (np.int64, CAND_CAP), (np.int64, CAND_CAP), (np.int64, CAND_CAP),
                (np.float32, 1))


@njit(cache=True, nogil=True, inline="always")
def _work(t):
    """This thread's Work again from its table (one row per field, in field order)."""
    u16, i8, i64, f32 = np.uint16, np.int8, np.int64, np.float32
    return Work(_view1(t, 0, f32), _view1(t, 1, f32), _view1(t, 2, u16), _view1(t, 3, f32), _view1(t, 4, u16),
                _view1(t, 5, i64), _view1(t, 6, i8), _view1(t, 7, i64), _view1(t, 8, i64), _view1(t, 9, i64),
                _view1(t, 10, f32), _view1(t, 11, u16), _view1(t, 12, f32), _view1(t, 13, i64), _view1(t, 14, f32),
                _view1(t, 15, i64), _view1(t, 16, i64), _view1(t, 17, f32), _view1(t, 18, i64), _view1(t, 19, i64),
                _view1(t, 20, i64), _view1(t, 21, i64), _view1(t, 22, f32))


@njit(cache=True, nogil=True, inline="always")
def _take(buf, n):
    """The first n items of a kept buffer, or a new array of n when it holds fewer."""
    if n <= len(buf):
        return buf[:n]
    return np.empty(n, buf.dtype)


_SCRATCH = threading.local()


def scratch(dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's zeroed search buffers: qdense float32[dim] and the float32 and uint16 accumulators
    (Work's first three). They are all zeros between searches and kept per thread with the rest of its
    Work: allocating and clearing them (~220 KB then; ~500 KB now) took ~6 us of every one-query search.
    Call drop_scratch when a search raised part-way."""
    return _scratch(dim)[2]


def scratch_table(dim: int) -> np.ndarray:
    """The table (array_table) of this thread's Work for dim, as search_query and search_batch take it."""
    return _scratch(dim)[1]


def _scratch(dim: int) -> tuple:
    kept = getattr(_SCRATCH, "kept", None)
    if kept is None or len(kept[0].qdense) != dim:
        work = Work(np.zeros(dim, np.float32), np.zeros(CHUNK, np.float32), np.zeros(CHUNK16, np.uint16),
                    *(np.empty(size, dtype) for dtype, size in _WORK_LAYOUT))
        kept = _SCRATCH.kept = work, array_table(work), work[:3]
    return kept


def query_scratch(dim: int, rows: int, k: int) -> tuple[np.ndarray, list]:
    """This thread's scratch_table(dim) and ``rows`` result buffers (docs int64[k], scores float32[k]) for
    search_query, in one call, kept per thread for the last (dim, k): after a query's kernel work the
    process's own memory is cold, and allocating two arrays and looking up the scratch there cost several
    us of a one-query search (real-text-200K). The buffers are overwritten by the thread's next search:
    its results are read out before it returns. The scratch is kept here with its table (a table only
    holds addresses): a search of another dim in between may replace the thread's scratch(dim)."""
    kept = getattr(_SCRATCH, "query", None)
    if kept is None or kept[0] != dim or kept[1] != k or len(kept[3]) < rows:
        outs = [(np.empty(k, np.int64), np.empty(k, np.float32)) for _ in range(rows)]
        kept = _SCRATCH.query = dim, k, _scratch(dim), outs
    return kept[2][1], kept[3]


def drop_scratch() -> None:
    _SCRATCH.kept = _SCRATCH.query = None


def search_batch(seg: KernelSegment, opt: SearchOptions, q_indptr, q_indices, q_values, rows, out_docs, out_scores,
                 out_count, dim: int) -> None:
    """search_one over the query rows `rows` of a CSR batch with this thread's scratch(dim); results land
    in row r of the out_* arrays.

    opt.query_mass < 1 cuts each query (cut_row) for candidate generation; rescoring uses the full row.
    Approximate queries take the 16-bit first pass where use_u16 says so, all others the float one.
    The cut is done here, not in Python: building a cut SparseBatch cost ~50 us per query.
    """
    # opt crosses into numba as a plain tuple and is named again inside: numba's dispatcher types a plain
    # tuple in C but a NamedTuple field by field in Python (~3 us of a one-query search; docs/history.md)
    _search_batch(seg.table, seg.fwd_indices, tuple(opt), q_indptr, q_indices, q_values, rows, out_docs, out_scores,
                  out_count, scratch_table(dim))


@njit(cache=True, nogil=True)
def _search_batch(seg_table, fwd_indices, opt_fields, q_indptr, q_indices, q_values, rows, out_docs, out_scores,
                  out_count, work_table):
    seg, opt, work = _segment(seg_table, fwd_indices), SearchOptions(*opt_fields), _work(work_table)
    for r in rows:
        a, b = q_indptr[r], q_indptr[r + 1]
        out_count[r] = _search_row(seg, opt, q_indices[a:b], q_values[a:b], work, out_docs[r], out_scores[r])


@njit(cache=True, nogil=True, inline="always")
def _search_row(seg, opt, f_idx, f_val, work, out_docs, out_scores):
    """One query row (full dims and weights) over one segment: the weights, the cut, the first pass."""
    if opt.has_weights:
        f_val = f_val * opt.weights[f_idx]
    q_idx, q_val = f_idx, f_val
    if opt.query_mass < 1.0:
        q_idx, q_val = cut_row(f_idx, f_val, opt.query_mass)
    if not opt.exact and use_u16(q_idx, q_val, seg.df, seg.dense_slot):
        return search_one(seg, opt, q_idx, q_val, f_idx, f_val, work, work.acc16, out_docs, out_scores)
    return search_one(seg, opt, q_idx, q_val, f_idx, f_val, work, work.acc, out_docs, out_scores)


@njit(cache=True, nogil=True)
def search_query(seg_table, fwd_indices, opt_fields, q_idx, q_val, dim, work_table, out_docs, out_scores):
    """One query (its dims and weights) over one segment, checked first: what search_batch does for one
    row, in one call from Python (the checks, the cut and the search were separate calls, a few us of a
    one-query search). seg_table, fwd_indices: a KernelSegment's; opt_fields: tuple(SearchOptions);
    work_table: scratch_table(dim). Returns how many hits it wrote to out_docs/out_scores,
    QUERY_OUT_OF_RANGE for a dim outside [0, dim), or BAD_QUERY for dims not strictly increasing or a
    weight not finite and >= 0 (check_rows)."""
    for p in range(len(q_idx)):
        if q_idx[p] < 0 or q_idx[p] >= dim:
            return QUERY_OUT_OF_RANGE
    if not row_ok(q_idx, q_val, 0, len(q_idx)):
        return BAD_QUERY
    return _search_row(_segment(seg_table, fwd_indices), SearchOptions(*opt_fields), q_idx, q_val,
                       _work(work_table), out_docs, out_scores)


@njit(cache=True, nogil=True)
def search_one(seg, opt, q_idx, q_val, f_idx, f_val, work, acc, out_docs, out_scores):
    """Top-k of one query over one segment; writes out_docs/out_scores[:m] and returns m.

    q_idx/q_val: the terms that generate candidates (maybe cut); f_idx/f_val: the full query used
    for exact rescoring; work: this thread's Work. acc: its accumulator for this query, whose dtype picks
    the first pass, compiled from this one body: float32 scores codes times float query weights within
    a proven error bound (exact mode, and approximate queries use_u16 turns down); uint16 scores them
    with integer weights (approximate only, see the 16-bit section). The opt.rerank best first-pass
    scores are kept in a heap; exact mode also keeps every doc within 2 err of the heap's minimum.

    Why exact: let t be the rerank-th best quantised score at the end and err the largest
    |quantised - exact| of any doc (sum over query terms of q * scale). The rerank >= k docs in the
    heap have exact scores >= t - err, so the true k-th exact score is >= t - err, and any doc of the
    true top-k has a quantised score >= t - 2 err = the final threshold. The running threshold only
    grows towards it, so such a doc was kept as a candidate and survives. Skipped blocks are bounded
    below the running threshold. Candidates are then ranked by their exact score (ties: doc id).

    With a penalty (opt.has_prior) every score above is the dot product minus the doc's penalty, in
    the first pass (the penalty converted to the accumulator's unit) as in rescoring, so the argument
    holds unchanged: the penalty is exact in both, and |quantised - exact| is still the dot product's.
    A penalty is >= 0, so an unpenalised bound (block maxima, a piece's max) still bounds a penalised
    score from above: skipping stays safe. Docs that share no dim with the query are still never hits.
    """
    sp_w, sp_cell, sp_src, n_sp, dn_slot, dn_w, n_dn, slack, unit_inv = _query_terms(acc, seg, opt, q_idx, q_val,
                                                                                     work)
    if n_sp == 0 and n_dn == 0:
        return 0
    n = len(seg.fwd_indptr) - 1
    sp_pos = _take(work.sp_pos, len(sp_w))  # each list's first posting and end in the posting chunk
    sp_end = _take(work.sp_end, len(sp_w))
    mask, has_mask = opt.mask, opt.has_mask
    has_prior = opt.has_prior
    p_piece, p_sub, p_block = opt.penalty_min
    if has_prior and opt.exact:  # the penalty's float32 rounding, on top of the dot product's window
        slack += np.float32(4e-7 * opt.penalty_max)
    heap = _take(work.heap, opt.rerank)  # min-heap of the best first-pass scores
    hsize = 0
    thr = np.float32(NO_THRESHOLD)  # a doc scoring below it cannot make the top k
    c_doc = _take(work.c_doc, max(1024, 4 * opt.rerank))  # candidates: doc, first-pass score
    c_s = _take(work.c_s, len(c_doc))
    nc = 0
    chunk = len(acc)  # a multiple of BLOCK: bmax is indexed by c0 // BLOCK
    inv_alpha = 1.0 / opt.alpha
    nblk_chunk = (chunk + BLOCK - 1) // BLOCK
    run0 = _take(work.run0, nblk_chunk)  # doc ranges of the chunk's scored (unskipped) blocks
    run1 = _take(work.run1, nblk_chunk)
    ub = _bounds_array(acc, nblk_chunk, work)
    zero = _zero(acc)
    scratch = work.one
    # Loops below index through slices starting at 0: numba cannot vectorise acc[c0 + j] because of
    # negative-index wraparound, and a scalar loop over 1M docs costs more than the whole query.
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        width = c1 - c0
        a = acc[:width]
        _enter_posting_chunk(seg, c0 // POSTING_CHUNK, sp_cell, sp_src, n_sp, sp_pos, sp_end)
        # 1) the sparse lists of this chunk
        cnt, sp_max = _scatter(seg, a, sp_w, sp_pos, sp_end, sp_src, n_sp, zero)
        if n_dn == 0:
            if cnt == 0:
                continue
            if cnt * 8 < width:
                # few postings: select over the touched docs only (a reset marks a doc as done)
                if sp_max < thr:
                    # no doc of the chunk reaches the threshold (a penalty only lowers a score): reset the
                    # touched docs with stores alone. With an impact floor many chunks of a large segment
                    # take this road (its terms read as short band lists), and the select's load and two
                    # data-dependent branches per posting were a 10M query's costliest loop (~30% of its
                    # samples under perf)
                    _reset_touched(seg, a, sp_pos, sp_end, sp_src, n_sp)
                    continue
                for i in range(n_sp):
                    docs = _list_docs(seg, sp_src[i])
                    for p in range(np.uintp(sp_pos[i]), np.uintp(sp_end[i])):
                        d = c0 + np.int64(docs[p])
                        s = np.float32(a[np.uintp(d - c0)])
                        if s == 0.0:
                            continue
                        a[np.uintp(d - c0)] = 0
                        if s < thr or (has_mask and mask[d] == 0):
                            continue
                        if has_prior:
                            s = np.float32(s - opt.penalty[d] * unit_inv)
                            if s < thr:
                                continue
                        c_doc, c_s, nc, hsize = _add_candidate(c_doc, c_s, nc, thr, heap, hsize, d, s)
                        if hsize == len(heap):
                            thr = np.float32(heap[0] - slack)
                continue
        # 2) block bounds (block-max codes of the dense columns + the chunk max of the scattered
        # part): skip blocks that cannot reach threshold / alpha
        nb = (width + BLOCK - 1) // BLOCK
        n_run = _whole_chunk(width, run0, run1)
        if thr > NO_THRESHOLD and n_dn > 0:
            u = ub[:nb]
            _block_bounds(seg, u, c0 // BLOCK, dn_slot, dn_w, n_dn)
            if has_prior:
                b0 = c0 // BLOCK
                for b in range(nb):
                    u[b] = u[b] - _penalty_units(acc, p_block[b0 + b] * unit_inv)
            n_run = _block_runs(u, _block_limit(sp_max, thr, inv_alpha), width, run0, run1)
            if n_run == 0:
                a[:] = 0
                continue
            _zero_skipped(a, run0, run1, n_run)
        # 3) dense columns, over runs of unskipped blocks
        _add_dense(a, seg.dense, c0, c1, dn_slot, dn_w, n_dn, run0, run1, n_run)
        # 4) select: only PIECE-doc pieces whose max reaches the threshold are scanned doc by doc (the
        # max is vectorised; see _select_view). Two levels (SUB, then PIECE) keep the scalar scan small
        # when the threshold is low (large rerank: the 512-level scan alone cost ~0.5 ms per query at
        # 1M docs, rerank 100).
        view = _select_view(a)
        key = _select_key(a, thr, scratch)
        for s0 in range(0, width, SUB):
            s1 = min(width, s0 + SUB)
            m = _max_of(view[s0:s1])
            # with a prior, the run's smallest penalty raises the bar; its key is worked out only for runs
            # that pass the plain one (a float's bits cost a call: ~60 us a query when made for every piece)
            if m < key or (has_prior and m < _select_key(a, thr + p_sub[(c0 + s0) // SUB] * unit_inv, scratch)):
                continue
            for p0 in range(s0, s1, PIECE):
                p1 = min(width, p0 + PIECE)
                m = _max_of(view[p0:p1])
                if m < key or (has_prior and m < _select_key(a, thr + p_piece[(c0 + p0) // PIECE] * unit_inv,
                                                             scratch)):
                    continue
                for j in range(np.uintp(p0), np.uintp(p1)):  # unsigned: no wraparound code
                    s = np.float32(a[j])
                    if s < thr or s == 0.0:
                        continue
                    d = c0 + j
                    if has_mask and mask[d] == 0:
                        continue
                    if has_prior:
                        s = np.float32(s - opt.penalty[d] * unit_inv)
                        if s < thr:
                            continue
                    c_doc, c_s, nc, hsize = _add_candidate(c_doc, c_s, nc, thr, heap, hsize, d, s)
                    if hsize == len(heap):
                        thr = np.float32(heap[0] - slack)
                        key = _select_key(a, thr, scratch)
        for r in range(n_run):  # outside the runs the accumulator is already zero
            a[run0[r]:run1[r]] = 0
    # 5) exact rescoring of the surviving candidates with the full query
    return _rescore(seg, opt, c_doc, c_s, nc, thr, f_idx, f_val, work, out_docs, out_scores)


MAIN, RES, BAND = 0, 1, 2  # where a query's sparse list lives: main, residual or impact-band lists


@njit(cache=True, nogil=True, inline="always")
def _list_docs(seg, src):
    return seg.main_docs if src == MAIN else seg.res_docs if src == RES else seg.band_docs


@njit(cache=True, nogil=True, inline="always")
def _enter_posting_chunk(seg, ch, sp_cell, sp_src, n_sp, sp_pos, sp_end):
    """Point every sparse list at its postings in posting chunk ``ch`` (cell sp_cell[i] + ch)."""
    for i in range(n_sp):
        ptr = seg.main_ptr if sp_src[i] == MAIN else seg.res_ptr if sp_src[i] == RES else seg.band_ptr
        sp_pos[i] = ptr[sp_cell[i] + ch]
        sp_end[i] = ptr[sp_cell[i] + ch + 1]


@njit(cache=True, nogil=True, inline="always")
def _scatter(seg, a, sp_w, sp_pos, sp_end, sp_src, n_sp, zero):
    """Add every sparse list's postings in the current posting chunk, [sp_pos, sp_end) of the cells
    _enter_posting_chunk entered (list entries are offsets from the chunk's first doc), to the chunk's
    accumulator ``a``; returns (how many, max value written). The max is taken here: numba's
    array.max() is a slow scalar loop."""
    cnt = 0
    sp_max = zero
    for i in range(n_sp):
        p = sp_pos[i]
        e = sp_end[i]
        w = sp_w[i]
        docs = _list_docs(seg, sp_src[i])
        codes = seg.main_codes if sp_src[i] == MAIN else seg.res_codes if sp_src[i] == RES else seg.band_codes
        # a loop with no test on the data (a per-posting exit kept the loads from running ahead); unsigned
        # positions spare every load numba's negative-index wraparound (approximate 3-8% more)
        for q in range(np.uintp(p), np.uintp(e)):
            x = np.uintp(docs[q])
            v = _add_code(a[x], w, codes[q])
            a[x] = v
            if v > sp_max:
                sp_max = v
        cnt += e - p
    return cnt, sp_max


@njit(cache=True, nogil=True, inline="always")
def _reset_touched(seg, a, sp_pos, sp_end, sp_src, n_sp):
    """Zero the accumulator at every doc the current posting chunk's sparse lists touched."""
    for i in range(n_sp):
        docs = _list_docs(seg, sp_src[i])
        for q in range(np.uintp(sp_pos[i]), np.uintp(sp_end[i])):
            a[np.uintp(docs[q])] = 0


@njit(cache=True, nogil=True, inline="always")
def _block_bounds(seg, u, b0, dn_slot, dn_w, n_dn):
    """u[b]: upper bound of the dense columns' part of the score in block b0 + b (block-max codes)."""
    u[:] = 0
    nb = len(u)
    for h in range(n_dn):
        bm = seg.bmax[dn_slot[h], b0:b0 + nb]
        w = dn_w[h]
        for b in range(nb):
            u[b] += _bound_term(w, bm[b])


@njit(cache=True, nogil=True)
def _rescore(seg, opt, c_doc, c_s, nc, thr, f_idx, f_val, work, out_docs, out_scores):
    """Exact scores (forward store, full query, minus the doc's penalty with opt.has_prior) of the
    candidates whose first-pass score is >= thr; writes the best opt.k to out_docs/out_scores (ties:
    smaller doc id) and returns how many. A doc whose dot product is 0 is never a hit."""
    k = opt.k
    fwd_indptr, fwd_indices, fwd_values = seg.fwd_indptr, seg.fwd_indices, seg.fwd_values
    qdense = work.qdense
    for j in range(len(f_idx)):
        qdense[f_idx[j]] = f_val[j]
    # The candidates' rows lie anywhere in the store, each several cache misses away. Their bounds are
    # read first and every cache line of every row touched in loops of independent loads, so the misses
    # overlap instead of stalling the scoring loop one row at a time: random rows of the 10M store scored
    # in ~300 ns each, against ~340 touching only each row's first and last entries and ~580 touching
    # nothing (benchmarks/rescore_rows.py). The touched sum is stored in work.one only so that the loads
    # are not dropped.
    cand = _take(work.cand, nc)
    start = _take(work.start, nc)
    end = _take(work.end, nc)
    nk = 0
    for c in range(nc):
        if c_s[c] >= thr:
            d = c_doc[c]
            cand[nk] = d
            start[nk] = fwd_indptr[d]
            end[nk] = fwd_indptr[d + 1]
            nk += 1
    work.one[0] = touch_rows(fwd_indices, fwd_values, start, end, nk)
    # the best k go straight into out_docs/out_scores, kept in order (score down, then doc id up) by
    # insertion: candidates arrive in no score order, so few of them displace one of the k (two argsorts
    # over all candidates and their five arrays cost more at k = 10); a candidate that cannot enter costs
    # one comparison
    r = 0
    for i in range(nk):
        s = np.float32(0.0)
        for p in range(np.uintp(start[i]), np.uintp(end[i])):
            s += qdense[fwd_indices[p]] * fwd_values[p]
        if not s > 0.0:
            continue
        d = cand[i]
        if opt.has_prior:
            s = np.float32(s - opt.penalty[d])
        if r == k and not _ranks_before(s, d, out_scores[k - 1], out_docs[k - 1]):
            continue
        j = r if r < k else k - 1
        while j > 0 and _ranks_before(s, d, out_scores[j - 1], out_docs[j - 1]):
            out_scores[j] = out_scores[j - 1]
            out_docs[j] = out_docs[j - 1]
            j -= 1
        out_scores[j] = s
        out_docs[j] = d
        if r < k:
            r += 1
    for j in range(len(f_idx)):
        qdense[f_idx[j]] = 0.0
    return r


@njit(cache=True, nogil=True, inline="always")
def touch_rows(indices, values, start, end, n):
    """Read every cache line of rows [start[i], end[i]) for i < n (see _rescore); returns the sum of what
    was read, for the caller to keep so that the loads are not dropped. benchmarks/rescore_rows.py times it."""
    touched = np.float32(0.0)
    for i in range(n):
        s0, s1 = start[i], end[i]
        if s1 > s0:
            for p in range(s0, s1, LINE_ENTRIES):
                touched += values[p]
            for p in range(s0, s1, LINE_ENTRIES):
                touched += np.float32(indices[p])
            touched += values[s1 - 1] + np.float32(indices[s1 - 1])  # the last line, when s0 is not aligned
    return touched


@njit(cache=True, nogil=True, inline="always")
def _ranks_before(s, d, s2, d2):
    """Whether a hit (score s, doc d) ranks before (s2, d2): a higher score, or the same and a smaller doc."""
    return s > s2 or (s == s2 and d < d2)


# ----------------------------------------------------------------------------- the two first passes
# search_one's body is shared; what differs by accumulator dtype is below, one small function per
# step, picked at compile time (numba.extending.overload on the dtype of the first argument).
#
# float32 (exact mode): query weights q * scale[t] in float32; candidates within 2 err of the
# threshold are kept (err: the quantisation bound plus float32 slack); the lists outside each doc's
# approx_top_n are read too. Dense columns are added four per pass, then two (a quarter of the
# accumulator loads/stores of one per pass; two measured ~15% faster than one, four another 3-5% of exact
# search on real-text-200K, in-process A/B, same answers).
#
# uint16 (approximate mode): approximate mode needs only the `rerank` best first-pass scores, not
# scores within a proven error, so it scores in uint16: each query term's code step (q * scale[t])
# becomes an integer weight on a per-query unit chosen so that the largest possible score fits in 16
# bits. Twice the docs per SIMD register and half the accumulator bytes; dense columns are added four
# per pass (one accumulator load/store per four codes). Rounding the weights adds at most unit/2 * 255
# per term to a doc's score, which grows with the term count, so long queries (more than
# U16_MAX_TERMS terms after the cut) and queries without dense columns (nothing to vectorise) keep
# the float pass (use_u16). Measurements: docs/history.md ("the 16-bit approximate first pass").
U16_MAX_TERMS = 48
U16_MAX = 65535
QUAD = 4  # dense columns per pass in the 16-bit pass
CHUNK16 = POSTING_CHUNK  # docs per uint16 accumulator chunk (128 KiB), for the same reason as CHUNK
# an accumulator chunk is a posting chunk (search_one enters each list's cell at every chunk's first doc)
assert CHUNK == CHUNK16 == POSTING_CHUNK


@njit(cache=True, nogil=True)
def use_u16(q_idx, q_val, df, dense_slot):
    """Whether an approximate query takes the 16-bit first pass (see the comment above)."""
    nt = 0
    n_dn = 0
    for j in range(len(q_idx)):
        t = q_idx[j]
        if q_val[j] > 0.0 and df[t] > 0:
            nt += 1
            if dense_slot[t] >= 0:
                n_dn += 1
    return n_dn > 0 and nt <= U16_MAX_TERMS


def _by_acc_dtype(float_impl, u16_impl):
    """A kernel step with a float32 and a uint16 implementation, picked by the dtype of its first
    argument (an accumulator array or value, or a query weight) when numba compiles the caller."""
    def step(*args):
        raise NotImplementedError("a numba kernel step: call it from jitted code")

    @functools.wraps(float_impl)  # numba checks the implementations against this signature
    def pick(first, *rest):
        dt = first.dtype if isinstance(first, types.Array) else first
        if dt == types.float32:
            return float_impl
        if dt == types.uint16:
            return u16_impl
        return None

    # inlined into the caller's numba IR: as separate calls the steps cost 1-3% (docs/benchmarks.md)
    overload(step, inline="always", jit_options={"nogil": True})(pick)
    step.__name__ = float_impl.__name__.removesuffix("_f32")
    return step


DENSE, NONE = 3, 4  # _pick_list: read the term's dense column, or nothing
# A dense term reads an impact head instead of its column only when the head holds fewer than n /
# HEAD_OVER_COLUMN postings: a scattered posting cost ~4-6 ns on real-text-967K, while a column is
# streamed and vectorised but adds its selection over every doc (a query reading one column took ~0.5 ms
# more than one reading none there). 8 was ~3% faster than 16 at the same recall (query_mass 0.7,
# impact_floor 0.35, rerank 100; in-process A/B); 4 lost recall.
HEAD_OVER_COLUMN = 8


@njit(cache=True, nogil=True)
def _impact_floor(seg, opt, q_idx, q_val):
    """The impact (query weight x doc weight) below which approximate search reads no posting:
    opt.impact_floor times the largest impact any term of the query can have; 0 in exact mode."""
    if opt.exact or opt.impact_floor <= 0.0:
        return 0.0
    top = 0.0
    for j in range(len(q_idx)):
        top = max(top, q_val[j] * seg.scale[q_idx[j]] * 255.0)  # scale * 255: the largest weight
    return opt.impact_floor * top


@njit(cache=True, nogil=True)
def _pick_list(seg, t, qs, floor, n_chunks):
    """(source, first cell, top band) of what term t (query weight qs per code step) reads: its dense
    column, or its main list and bands 0..top (top -1: none; a segment built without bands has whole
    main lists), or with an impact floor (source BAND) only bands 0..top, the smallest impact head
    holding every posting whose impact reaches the floor (NONE when not even the term's heaviest posting
    does). Exact mode has floor 0."""
    top = len(HEAD_CODES) - 1 if len(seg.band_ptr) > 1 else -1
    if seg.dense_slot[t] >= 0:
        full, full_top = DENSE, -1
    else:
        full, full_top = MAIN, top
        if seg.main_ptr[(t + 1) * n_chunks] == seg.main_ptr[t * n_chunks] and _band_size(seg, t, top, n_chunks) == 0:
            return NONE, 0, -1
    if floor <= 0.0 or top < 0:
        return full, t * n_chunks, full_top
    need = floor / qs  # the smallest code worth reading
    if need > 255.0:
        return NONE, 0, -1
    for L in range(len(HEAD_CODES)):
        if HEAD_CODES[L] <= need:
            size = _band_size(seg, t, L, n_chunks)
            if size == 0:
                return NONE, 0, -1
            if full == MAIN or size * HEAD_OVER_COLUMN < len(seg.fwd_indptr) - 1:
                return BAND, 0, L
            break
    return full, t * n_chunks, full_top


@njit(cache=True, nogil=True, inline="always")
def _band_size(seg, t, top, n_chunks):
    """Postings of term t in bands 0..top."""
    dim = len(seg.df)
    size = 0
    for L in range(top + 1):
        cell = (L * dim + t) * n_chunks
        size += seg.band_ptr[cell + n_chunks] - seg.band_ptr[cell]
    return size


@njit(cache=True, nogil=True, inline="always")
def _add_lists(seg, t, src, cell, top, w, sp_w, sp_cell, sp_src, n_sp, n_chunks):
    """Append term t's lists that _pick_list chose (its main list when src is MAIN, then its non-empty
    bands 0..top), each with query weight w; returns the new list count."""
    if src == MAIN and seg.main_ptr[cell + n_chunks] > seg.main_ptr[cell]:
        sp_w[n_sp] = w
        sp_cell[n_sp] = cell
        sp_src[n_sp] = MAIN
        n_sp += 1
    dim = len(seg.df)
    for L in range(top + 1):
        bc = (L * dim + t) * n_chunks
        if seg.band_ptr[bc + n_chunks] > seg.band_ptr[bc]:
            sp_w[n_sp] = w
            sp_cell[n_sp] = bc
            sp_src[n_sp] = BAND
            n_sp += 1
    return n_sp


def _query_terms_f32(acc, seg, opt, q_idx, q_val, work):
    nq = len(q_idx)
    # each term may have a main list and bands (or a dense column) and, in exact mode, a residual list
    per = LISTS_PER_TERM
    sp_w = _take(work.sp_w32, per * nq)
    sp_cell = _take(work.sp_cell, per * nq)
    sp_src = _take(work.sp_src, per * nq)
    n_chunks = _n_chunks(seg)
    dn_slot = _take(work.dn_slot, nq)
    dn_w = _take(work.dn_w32, nq)
    n_sp = 0
    n_dn = 0
    err = 0.0
    bound = 0.0
    floor = _impact_floor(seg, opt, q_idx, q_val)
    for j in range(nq):
        t = q_idx[j]
        w = q_val[j]
        if w <= 0.0 or seg.df[t] == 0:
            continue
        qs = w * seg.scale[t]
        err += qs
        bound += qs * 255.0
        src, cell, top = _pick_list(seg, t, qs, floor, n_chunks)
        if src == DENSE:
            dn_slot[n_dn] = seg.dense_slot[t]
            dn_w[n_dn] = qs
            n_dn += 1
        elif src != NONE:
            n_sp = _add_lists(seg, t, src, cell, top, qs, sp_w, sp_cell, sp_src, n_sp, n_chunks)
        if opt.exact and seg.res_ptr[(t + 1) * n_chunks] > seg.res_ptr[t * n_chunks]:
            sp_w[n_sp] = qs
            sp_cell[n_sp] = t * n_chunks
            sp_src[n_sp] = RES
            n_sp += 1
    # float32 accumulation slack on top of the quantisation bound
    err = err * 1.0001 + bound * 1e-5
    slack = 2.0 * err if opt.exact else 0.0
    return sp_w, sp_cell, sp_src, n_sp, dn_slot, dn_w, n_dn, slack, 1.0


def _query_terms_u16(acc, seg, opt, q_idx, q_val, work):
    nq = len(q_idx)
    per = len(HEAD_CODES) + 1  # a main list and bands (approximate mode: no residual lists)
    sp_w = _take(work.sp_w16, per * nq)
    sp_cell = _take(work.sp_cell, per * nq)
    sp_src = _take(work.sp_src, per * nq)
    n_chunks = _n_chunks(seg)
    dn_slot = _take(work.dn_slot, nq + QUAD)
    dn_w = _take(work.dn_w16, nq + QUAD)
    n_sp = 0
    n_dn = 0
    total = 0.0
    nt = 0
    for j in range(nq):
        t = q_idx[j]
        if q_val[j] > 0.0 and seg.df[t] > 0:
            total += 255.0 * q_val[j] * seg.scale[t]
            nt += 1
    if nt == 0:
        return sp_w, sp_cell, sp_src, n_sp, dn_slot, dn_w, n_dn, 0.0, 0.0
    # weights round to at most q/unit + 1/2, so the largest score is <= total/unit + 127.5 nt = U16_MAX
    unit = total / (U16_MAX - 127.5 * nt)
    floor = _impact_floor(seg, opt, q_idx, q_val)
    for j in range(nq):
        t = q_idx[j]
        if q_val[j] <= 0.0 or seg.df[t] == 0:
            continue
        w = np.int64(q_val[j] * seg.scale[t] / unit + 0.5)
        if w == 0:  # below half a unit: contributes nothing at this precision
            continue
        src, cell, top = _pick_list(seg, t, q_val[j] * seg.scale[t], floor, n_chunks)
        if src == DENSE:
            dn_slot[n_dn] = seg.dense_slot[t]
            dn_w[n_dn] = w
            n_dn += 1
        elif src != NONE:
            n_sp = _add_lists(seg, t, src, cell, top, np.uint16(w), sp_w, sp_cell, sp_src, n_sp, n_chunks)
    # pad the dense terms to whole quads with weight-0 reads of a column already being read
    n_pad = n_dn
    while n_pad % QUAD != 0:
        dn_slot[n_pad] = dn_slot[0]
        dn_w[n_pad] = 0
        n_pad += 1
    return sp_w, sp_cell, sp_src, n_sp, dn_slot, dn_w, n_dn, 0.0, 1.0 / unit


# (sp_w, sp_cell, sp_src, n_sp, dn_slot, dn_w, n_dn, slack, unit_inv): the query's sparse lists (weight, first
# cell of the list in the pointers of sp_src: MAIN, RES or BAND) and dense columns with weights in the
# accumulator's type; slack: how far below the heap's minimum a candidate is still kept (2 err in
# exact mode, else 0); unit_inv: accumulator units per unit of score (1 in float32), which converts a
# doc's penalty into the first pass's scale
_query_terms = _by_acc_dtype(_query_terms_f32, _query_terms_u16)


def _add_code_f32(acc_value, w, code):
    return acc_value + w * np.float32(code)


def _add_code_u16(acc_value, w, code):
    return np.uint16(acc_value + w * np.uint16(code))


_add_code = _by_acc_dtype(_add_code_f32, _add_code_u16)  # accumulator value + weight * uint8 code


def _bounds_array_f32(acc, nb, work):
    return _take(work.ub32, nb)


def _bounds_array_u16(acc, nb, work):
    return _take(work.ub64, nb)


_bounds_array = _by_acc_dtype(_bounds_array_f32, _bounds_array_u16)  # block bounds' scratch


def _zero_f32(acc):
    return np.float32(0.0)


def _zero_u16(acc):
    return np.uint16(0)


_zero = _by_acc_dtype(_zero_f32, _zero_u16)  # a zero of the accumulator's type


def _bound_term_f32(w, code):
    return w * np.float32(code)


def _bound_term_u16(w, code):
    return np.int64(w) * np.int64(code)


_bound_term = _by_acc_dtype(_bound_term_f32, _bound_term_u16)  # one dense column's part of a block bound


def _penalty_units_f32(acc, p):
    return np.float32(p)


def _penalty_units_u16(acc, p):
    return np.int64(p)  # rounded down: the bound stays above every penalised score


# a run's smallest penalty (in accumulator units) as the block bounds' type (picked by the accumulator acc)
_penalty_units = _by_acc_dtype(_penalty_units_f32, _penalty_units_u16)


def _block_limit_f32(sp_max, thr, inv_alpha):
    return np.float32(thr * inv_alpha) - sp_max


def _block_limit_u16(sp_max, thr, inv_alpha):
    return thr * inv_alpha - sp_max


# a block whose dense-column bound is below this cannot reach thr / alpha (sp_max: the chunk's largest
# scattered score)
_block_limit = _by_acc_dtype(_block_limit_f32, _block_limit_u16)


def _add_dense_f32(a, dense, c0, c1, dn_slot, dn_w, n_dn, run0, run1, n_run):
    h = 0
    while h + 3 < n_dn:  # four columns per pass
        ca = dense[dn_slot[h], c0:c1]
        cb = dense[dn_slot[h + 1], c0:c1]
        cc = dense[dn_slot[h + 2], c0:c1]
        cd = dense[dn_slot[h + 3], c0:c1]
        wa, wb, wc, wd = dn_w[h], dn_w[h + 1], dn_w[h + 2], dn_w[h + 3]
        for r in range(n_run):
            j0, j1 = run0[r], run1[r]
            aa = a[j0:j1]
            xa, xb, xc, xd = ca[j0:j1], cb[j0:j1], cc[j0:j1], cd[j0:j1]
            for j in range(j1 - j0):
                aa[j] += ((wa * np.float32(xa[j]) + wb * np.float32(xb[j]))
                          + (wc * np.float32(xc[j]) + wd * np.float32(xd[j])))
        h += 4
    while h < n_dn:  # two columns per pass
        two = h + 1 < n_dn
        col = dense[dn_slot[h], c0:c1]
        col2 = dense[dn_slot[h + 1] if two else dn_slot[h], c0:c1]
        w = dn_w[h]
        w2 = dn_w[h + 1] if two else np.float32(0.0)
        for r in range(n_run):
            j0, j1 = run0[r], run1[r]
            aa = a[j0:j1]
            cc = col[j0:j1]
            cc2 = col2[j0:j1]
            for j in range(j1 - j0):
                aa[j] += w * np.float32(cc[j]) + w2 * np.float32(cc2[j])
        h += 2


def _add_dense_u16(a, dense, c0, c1, dn_slot, dn_w, n_dn, run0, run1, n_run):
    for h in range(0, n_dn, QUAD):  # four columns per pass (dn_slot/dn_w are padded to whole quads)
        ca = dense[dn_slot[h], c0:c1]
        cb = dense[dn_slot[h + 1], c0:c1]
        cc = dense[dn_slot[h + 2], c0:c1]
        cd = dense[dn_slot[h + 3], c0:c1]
        wa, wb, wc, wd = dn_w[h], dn_w[h + 1], dn_w[h + 2], dn_w[h + 3]
        for r in range(n_run):
            j0, j1 = run0[r], run1[r]
            aa = a[j0:j1]
            xa, xb, xc, xd = ca[j0:j1], cb[j0:j1], cc[j0:j1], cd[j0:j1]
            for j in range(j1 - j0):
                aa[j] = np.uint16(aa[j] + np.uint16(xa[j]) * wa + np.uint16(xb[j]) * wb
                                  + np.uint16(xc[j]) * wc + np.uint16(xd[j]) * wd)


# add the dense columns of docs [c0, c1) to the chunk's accumulator, over the runs of unskipped blocks
_add_dense = _by_acc_dtype(_add_dense_f32, _add_dense_u16)


def _select_view_f32(a):
    return a.view(np.int32)


def _select_view_u16(a):
    return a


# What the selection takes the max of. float32: the int32 bits of the scores (non-negative floats
# order like their bits), which numba vectorises; a float max or count does not vectorise as well
# (measured 0.06 vs 0.14 ns per doc). uint16: the scores themselves.
_select_view = _by_acc_dtype(_select_view_f32, _select_view_u16)


def _select_key_f32(a, thr, scratch):
    return _float_bits(thr, scratch)


def _select_key_u16(a, thr, scratch):
    return thr


_select_key = _by_acc_dtype(_select_key_f32, _select_key_u16)  # thr, comparable with _select_view's max


@njit(cache=True, nogil=True, inline="always")
def _max_of(x):
    """max of a non-empty slice starting at 0 (so that numba vectorises the loop)."""
    m = x[0]
    for j in range(len(x)):
        m = max(m, x[j])
    return m


# ----------------------------------------------------------------------------- shared steps
@njit(cache=True, nogil=True)  # not inline="always": called from inlined steps (see _float_bits)
def _n_chunks(seg):
    """Posting chunks of the segment (main_ptr holds dim * n_chunks + 1 cell pointers)."""
    return (len(seg.main_ptr) - 1) // len(seg.df)


@njit(cache=True, nogil=True)  # not inline="always": inside an inlined step numba warns on the IR
def _float_bits(x, scratch):
    """int32 bits of float32 x (scratch: a float32[1]); for x >= 0 they order like x, and any x < 0
    maps below every x >= 0."""
    if x < 0.0:
        return np.int32(-1)
    scratch[0] = x
    return scratch.view(np.int32)[0]


@njit(cache=True, nogil=True, inline="always")
def _whole_chunk(width, run0, run1):
    """One run covering the whole chunk (no block bounds computed); returns the run count, 1."""
    run0[0] = 0
    run1[0] = width
    return 1


@njit(cache=True, nogil=True, inline="always")
def _block_runs(u, lim, width, run0, run1):
    """Doc ranges [run0[r], run1[r]) of the maximal runs of BLOCK-doc blocks whose bound u[b] reaches
    lim (blocks below it are skipped); returns how many runs (0: the whole chunk is skipped)."""
    nb = len(u)
    m = 0
    b = 0
    while b < nb:
        if u[b] < lim:
            b += 1
            continue
        e = b
        while e < nb and not u[e] < lim:
            e += 1
        run0[m] = b * BLOCK
        run1[m] = min(width, e * BLOCK)
        m += 1
        b = e
    return m


@njit(cache=True, nogil=True, inline="always")
def _zero_skipped(a, run0, run1, n_run):
    """Reset the accumulator outside the scored runs (the skipped blocks got sparse-list scores only)."""
    prev = 0
    for r in range(n_run):
        a[prev:run0[r]] = 0
        prev = run1[r]
    a[prev:len(a)] = 0


@njit(cache=True, nogil=True)
def _heap_push(heap, size, s):
    """Min-heap of the best len(heap) first-pass scores; returns the new size."""
    if size < len(heap):
        j = size
        heap[j] = s
        size += 1
        while j > 0:
            parent = (j - 1) // 2
            if heap[parent] <= heap[j]:
                break
            heap[parent], heap[j] = heap[j], heap[parent]
            j = parent
        return size
    if s <= heap[0]:
        return size
    heap[0] = s
    j = 0
    while True:
        left = 2 * j + 1
        if left >= size:
            break
        m = left
        if left + 1 < size and heap[left + 1] < heap[left]:
            m = left + 1
        if heap[j] <= heap[m]:
            break
        heap[j], heap[m] = heap[m], heap[j]
        j = m
    return size


@njit(cache=True, nogil=True, inline="always")
def _add_candidate(c_doc, c_s, nc, thr, heap, hsize, d, s):
    """Append doc d with first-pass score s to the candidates and push s on the heap; returns
    (c_doc, c_s, nc, hsize). The buffer is compacted (or grown) when full."""
    if nc == len(c_doc):
        nc, c_doc, c_s = _compact(c_doc, c_s, nc, thr)
    c_doc[nc] = d
    c_s[nc] = s
    return c_doc, c_s, nc + 1, _heap_push(heap, hsize, s)


@njit(cache=True, nogil=True)
def _compact(c_doc, c_s, nc, thr):
    """Drop candidates below the threshold; grow the buffer when that frees too little."""
    m = 0
    for c in range(nc):
        if c_s[c] >= thr:
            c_doc[m] = c_doc[c]
            c_s[m] = c_s[c]
            m += 1
    size = len(c_doc)
    if m * 2 > size:
        nd = np.empty(2 * size, np.int64)
        ns = np.empty(2 * size, np.float32)
        nd[:m] = c_doc[:m]
        ns[:m] = c_s[:m]
        return m, nd, ns
    return m, c_doc, c_s


@njit(cache=True, nogil=True)
def cut_row(indices, values, mass):
    """Query term cut: the heaviest terms covering `mass` of the row's L1 weight (ties: earlier term),
    returned in their original (dim) order."""
    n = len(indices)
    total = 0.0
    for p in range(n):
        total += values[p]
    order = np.argsort(-values, kind="mergesort")
    keep = np.zeros(n, np.bool_)
    got = 0.0
    m = 0
    for r in range(n):
        keep[order[r]] = True
        m += 1
        got += values[order[r]]
        if got >= mass * total:
            break
    out_i = np.empty(m, indices.dtype)
    out_v = np.empty(m, values.dtype)
    j = 0
    for p in range(n):
        if keep[p]:
            out_i[j] = indices[p]
            out_v[j] = values[p]
            j += 1
    return out_i, out_v
