"""Format version 2: posting doc ids as uint16 offsets in 65,536-doc chunks, uint16 forward term ids.

Checked against the exact reference (ExactIndex) across chunk boundaries, for a vocabulary too large
for uint16 term ids, after a memory-mapped reload, and for damaged or older index folders.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for

from tokenspace.index import ExactIndex, IndexCorruptError, InvertedIndex, kernels, storage
from tokenspace.index.segment import n_chunks
from tokenspace.sparse import SparseBatch

CH = kernels.POSTING_CHUNK
N = 2 * CH + 9  # three posting chunks, the last one 9 docs long
BOUNDARY = 300  # only in docs CH - 1 and CH (the last doc of chunk 0 and the first of chunk 1)
LAST_ONLY = 301  # only in the last chunk's docs
MIDDLE_ONLY = 302  # only in chunk 1, at its first and last doc
DIM = 400


def _rows_to_batch(rows: list[list[tuple[int, float]]], dim: int) -> SparseBatch:
    rows = [sorted(r) for r in rows]
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    idx = np.array([t for r in rows for t, _ in r], np.int32)
    val = np.array([w for r in rows for _, w in r], np.float32)
    return SparseBatch(indptr, idx, val, dim)


@pytest.fixture(scope="module")
def chunked():
    """N docs: each has two common-ish terms (df ~ N/50 and N/7, lists span every chunk) plus the
    special terms at the chunk edges. Weights vary so that ranks are not all ties."""
    rng = np.random.default_rng(7)
    a = np.arange(N)
    t1 = a % 50
    t2 = 50 + a % 7
    w1 = rng.uniform(0.1, 2.0, N).astype(np.float32)
    w2 = rng.uniform(0.1, 2.0, N).astype(np.float32)
    extra = {CH - 1: [(BOUNDARY, 3.0)], CH: [(BOUNDARY, 2.5), (MIDDLE_ONLY, 1.5)],
             2 * CH - 1: [(MIDDLE_ONLY, 2.0)]}
    for d in range(2 * CH, N):
        extra[d] = [(LAST_ONLY, 0.5 + 0.1 * (d - 2 * CH))]
    rows = [sorted([(int(t1[d]), float(w1[d])), (int(t2[d]), float(w2[d]))] + extra.get(d, [])) for d in range(N)]
    docs = _rows_to_batch(rows, DIM)
    queries = _rows_to_batch([[(BOUNDARY, 1.0)], [(LAST_ONLY, 1.0)], [(MIDDLE_ONLY, 1.0)],
                              [(3, 1.0), (BOUNDARY, 0.2), (LAST_ONLY, 5.0)], [(7, 0.5), (52, 1.0)],
                              [(BOUNDARY, 1.0), (MIDDLE_ONLY, 1.0), (LAST_ONLY, 1.0)]], DIM)
    ids = ids_for(N)
    return docs, queries, ids, ExactIndex.build(docs, ids).search(queries, k=12)


@pytest.mark.parametrize("dense_fraction", [0.125, 2.0])  # 2.0: every term in posting lists
def test_chunk_boundaries_match_the_reference(chunked, dense_fraction):
    docs, queries, ids, want = chunked
    # without impact heads the main lists are whole (with them the heavy postings sit in the bands)
    seg = InvertedIndex.build(docs, ids, dense_fraction=dense_fraction, impact_heads=False)._segments[0]
    assert n_chunks(N) == 3 and len(seg.main_ptr) == DIM * 3 + 1 and seg.main_docs.dtype == np.uint16
    assert seg.fwd_indices.dtype == np.uint16
    # the edge terms sit where intended: BOUNDARY's last posting of chunk 0 is offset CH - 1, its
    # first of chunk 1 offset 0; LAST_ONLY has postings in chunk 2 only
    p = seg.main_ptr
    assert seg.main_docs[p[BOUNDARY * 3 + 1] - 1] == CH - 1 and seg.main_docs[p[BOUNDARY * 3 + 1]] == 0
    assert p[LAST_ONLY * 3 + 2] == p[LAST_ONLY * 3] and p[LAST_ONLY * 3 + 3] - p[LAST_ONLY * 3 + 2] == 9
    for heads in (False, True):
        _searches_match_the_reference(InvertedIndex.build(docs, ids, dense_fraction=dense_fraction,
                                                          impact_heads=heads), docs, queries, want)


def _searches_match_the_reference(index, docs, queries, want):
    got = index.search(queries, k=12)
    assert [h.id for h in got[0]] == [f"d{CH - 1}", f"d{CH}"]
    assert [h.id for h in got[1]] == [f"d{d}" for d in range(N - 1, 2 * CH - 1, -1)]
    assert [h.id for h in got[2]] == [f"d{2 * CH - 1}", f"d{CH}"]
    assert_same_hits(got, want)
    # approximate mode without pruning reads the same lists and must agree too
    assert_same_hits(index.search(queries, k=12, mode="approx", query_mass=1.0, alpha=1.0, rerank=N), want)
    # filters read the chunked lists through has_dim
    hits = index.search(queries[4:5], k=5, must=[BOUNDARY])
    assert [h.id for h in hits[0]] == [f"d{CH}"]  # d{CH - 1} shares no term with that query
    assert index.get([f"d{CH}", f"d{N - 1}"]).to_dense().tolist() == docs[[CH, N - 1]].to_dense().tolist()


def test_chunked_segment_survives_mmap_reload(chunked, tmp_path):
    docs, queries, ids, want = chunked
    index = InvertedIndex.build(docs, ids, approx_top_n=1)  # residual lists are chunked as well
    assert len(index._segments[0].res_docs) > 0
    index.save(tmp_path / "idx")
    loaded = InvertedIndex.load(tmp_path / "idx")
    seg = loaded._segments[0]
    for name, dtype in (("main_docs", np.uint16), ("res_docs", np.uint16), ("fwd_indices", np.uint16)):
        arr = seg.arrays[name]
        assert arr.dtype == dtype and isinstance(arr, np.memmap), name
    assert_same_hits(loaded.search(queries, k=12), want)
    assert loaded.search(queries, k=12, mode="approx") == index.search(queries, k=12, mode="approx")


def test_offset_past_the_last_chunk_is_corrupt(chunked, tmp_path):
    """An offset is < 65,536 by its type, but the last chunk is only 9 docs long: 9 would read past n."""
    docs, _, ids, _ = chunked
    InvertedIndex.build(docs, ids, dense_fraction=2.0, impact_heads=False).save(tmp_path / "idx")  # whole lists
    path = tmp_path / "idx" / "seg-000001" / "main_docs.npy"
    seg = InvertedIndex.load(tmp_path / "idx")._segments[0]
    last = int(seg.main_ptr[LAST_ONLY * 3 + 3]) - 1  # LAST_ONLY's final posting (offset 8)
    arr = np.load(path)
    assert arr[last] == 8
    arr[last] = 9
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, allow_pickle=False)
    with pytest.raises(IndexCorruptError, match=f"term {LAST_ONLY}, chunk 2"):
        InvertedIndex.load(tmp_path / "idx", verify=False)


def test_vocabulary_above_uint16_keeps_int32_term_ids(tmp_path):
    """dim > 65,536: the forward store falls back to int32 term ids; get() returns them exactly."""
    dim = 70_000
    rng = np.random.default_rng(3)
    rows = []
    for d in range(500):
        terms = sorted(set(rng.choice([5, 9, 65_535, 65_536, 65_537, 69_999], 3).tolist())
                       | {int(rng.integers(60_000, dim))})
        rows.append([(t, float(rng.uniform(0.1, 2.0))) for t in terms])
    docs = _rows_to_batch(rows, dim)
    queries = _rows_to_batch([[(65_536, 1.0)], [(65_535, 1.0), (69_999, 2.0)], [(5, 0.3), (65_537, 1.0)]], dim)
    ids = ids_for(500)
    index = InvertedIndex.build(docs, ids)
    assert index._segments[0].fwd_indices.dtype == np.int32
    assert index.get(ids).to_dense().tolist() == docs.to_dense().tolist()
    want = ExactIndex.build(docs, ids).search(queries, k=10)
    assert_same_hits(index.search(queries, k=10), want)
    index.save(tmp_path / "big")
    loaded = InvertedIndex.load(tmp_path / "big")
    assert loaded._segments[0].fwd_indices.dtype == np.int32
    assert_same_hits(loaded.search(queries, k=10), want)
    assert loaded.get(["d17"]).to_dense().tolist() == docs[[17]].to_dense().tolist()


def _as_version(root, version):
    man = root / storage.MANIFEST
    raw = json.loads(man.read_text())
    raw.pop("manifest_crc32")
    raw["version"] = version
    raw["manifest_crc32"] = storage._manifest_crc(raw)
    man.write_text(json.dumps(raw))


def test_version_1_folder_asks_for_a_rebuild(tmp_path):
    docs = _rows_to_batch([[(1, 1.0), (3, 2.0)], [(2, 0.5)]], 8)
    InvertedIndex.build(docs, ["a", "b"]).save(tmp_path / "old")
    _as_version(tmp_path / "old", 1)
    with pytest.raises(IndexCorruptError, match="format version 1 .*rebuild the index"):
        InvertedIndex.load(tmp_path / "old")
    # the CLI shows that message as one line, not a traceback
    p = subprocess.run([sys.executable, "-m", "tokenspace.cli", "index", "stats", str(tmp_path / "old")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "rebuild the index" in p.stderr and "Traceback" not in p.stderr, p.stderr
