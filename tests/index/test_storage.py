"""Persistence: round trips, incremental commits, crash safety, and damaged files -> IndexCorruptError."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for, random_batch

from tokenspace.index import ExactIndex, IndexCorruptError, InvertedIndex, kernels, storage
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary.latent(50)


@pytest.fixture
def data():
    docs = random_batch(400, 50, 0.15, seed=31, zipf=True).with_vocab(VOCAB)
    return docs, ids_for(400), random_batch(12, 50, 0.15, seed=32, zipf=True)


def test_roundtrip_mmap_and_incremental_commit(tmp_path, data):
    docs, ids, qs = data
    index = InvertedIndex.build(docs[:250], ids[:250], approx_top_n=6)
    index.save(tmp_path / "idx")
    loaded = InvertedIndex.load(tmp_path / "idx")
    assert isinstance(loaded._segments[0].dense, np.memmap) or isinstance(loaded._segments[0].dense.base, np.memmap)
    assert loaded.vocab.tokens == VOCAB.tokens and loaded.approx_top_n == 6
    assert loaded.search(qs, k=9) == index.search(qs, k=9)
    assert loaded.search(qs, k=9, mode="approx") == index.search(qs, k=9, mode="approx")
    # add after load = a new segment; delete = tombstones; save again only writes the new files
    first = sorted(p.name for p in (tmp_path / "idx").iterdir())
    seg1_mtime = os.stat(tmp_path / "idx" / "seg-000001" / "dense.npy").st_mtime_ns
    loaded.add(docs[250:], ids[250:])
    assert loaded.delete(ids[::5]) == 80
    loaded.save(tmp_path / "idx")
    assert os.stat(tmp_path / "idx" / "seg-000001" / "dense.npy").st_mtime_ns == seg1_mtime
    names = sorted(p.name for p in (tmp_path / "idx").iterdir())
    assert "seg-000002" in names and "seg-000002" not in first
    again = InvertedIndex.load(tmp_path / "idx", mmap=False)
    ref = ExactIndex.build(docs, ids)
    ref.delete(ids[::5])
    assert len(again) == len(ref) == 320
    assert_same_hits(again.search(qs, k=30), ref.search(qs, k=30))
    assert np.array_equal(again.get(["d251"]).to_dense(), docs[[251]].to_dense())
    # a second delete writes a new tombstone generation and removes the old one
    again.delete(["d1"])
    again.save(tmp_path / "idx")
    dels = [p.name for p in (tmp_path / "idx").iterdir() if ".del-" in p.name]
    assert len(dels) == 2 and len(InvertedIndex.load(tmp_path / "idx")) == 319


def test_save_to_another_folder_copies_everything(tmp_path, data):
    docs, ids, qs = data
    index = InvertedIndex.build(docs, ids)
    index.save(tmp_path / "a")
    loaded = InvertedIndex.load(tmp_path / "a")
    loaded.delete(["d3"])
    loaded.save(tmp_path / "b")
    b = InvertedIndex.load(tmp_path / "b")
    assert len(b) == 399 and len(InvertedIndex.load(tmp_path / "a")) == 400
    assert b.search(qs, k=5) == loaded.search(qs, k=5)


def _saved(tmp_path, data):
    docs, ids, _ = data
    InvertedIndex.build(docs, ids).save(tmp_path / "idx")
    return tmp_path / "idx"


@pytest.mark.parametrize("name", ["fwd_values.npy", "dense.npy", "main_docs.npy", "ids_blob.npy", "df.npy"])
def test_truncated_file(tmp_path, data, name):
    root = _saved(tmp_path, data)
    p = root / "seg-000001" / name
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) - 3])
    for verify in (True, False):  # sizes are checked even without crc32
        with pytest.raises(IndexCorruptError, match="truncated"):
            InvertedIndex.load(root, verify=verify)


@pytest.mark.parametrize("name", ["fwd_values.npy", "dense.npy", "main_codes.npy", "scale.npy", "fwd_indptr.npy"])
def test_bit_flip(tmp_path, data, name):
    root = _saved(tmp_path, data)
    p = root / "seg-000001" / name
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2 + 1] ^= 0x10
    p.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match="crc32 mismatch"):
        InvertedIndex.load(root)


def test_manifest_damage_and_version(tmp_path, data):
    root = _saved(tmp_path, data)
    man = root / storage.MANIFEST
    text = man.read_text()
    man.write_text(text.replace('"dim": 50', '"dim": 51'))
    with pytest.raises(IndexCorruptError, match="manifest checksum"):
        InvertedIndex.load(root)
    man.write_text(text[: len(text) // 2])
    with pytest.raises(IndexCorruptError, match="unreadable manifest"):
        InvertedIndex.load(root)
    raw = json.loads(text)
    raw["version"] = 99
    raw["manifest_crc32"] = storage._manifest_crc({k: v for k, v in raw.items() if k != "manifest_crc32"})
    man.write_text(json.dumps(raw))
    with pytest.raises(IndexCorruptError, match="version 99"):
        InvertedIndex.load(root)
    with pytest.raises(FileNotFoundError):
        InvertedIndex.load(tmp_path / "nowhere")


def test_missing_tombstone_and_segment(tmp_path, data):
    docs, ids, _ = data
    index = InvertedIndex.build(docs, ids)
    index.delete(["d0"])
    index.save(tmp_path / "idx")
    (next(p for p in (tmp_path / "idx").iterdir() if ".del-" in p.name)).unlink()
    with pytest.raises(IndexCorruptError, match="missing"):
        InvertedIndex.load(tmp_path / "idx")


def test_crash_before_manifest_keeps_previous_state(tmp_path, data, monkeypatch):
    # a failing manifest write; a kill before every write step, over other indexes too: test_save_kills.py
    docs, ids, qs = data
    root = tmp_path / "idx"
    index = InvertedIndex.build(docs[:200], ids[:200])
    index.save(root)
    before = InvertedIndex.load(root).search(qs, k=10)
    index.add(docs[200:], ids[200:])
    index.delete(["d1", "d2"])

    def crash(*a, **k):
        raise OSError("power cut")

    monkeypatch.setattr(storage, "write_manifest", crash)
    with pytest.raises(OSError, match="power cut"):
        index.save(root)
    monkeypatch.undo()
    # the new segment and tombstones exist on disk, but the manifest still names the old state
    (root / ".tmp-seg-000009-1").mkdir()  # and a half-written temporary from another crash
    (root / (storage.MANIFEST + ".tmp")).write_text("{garbage")
    survivor = InvertedIndex.load(root)
    assert len(survivor) == 200 and survivor.search(qs, k=10) == before
    survivor.add(docs[200:], ids[200:])
    survivor.save(root)  # the next commit cleans the leftovers up
    assert not any(p.name.startswith(".tmp") or p.name.endswith(".tmp") for p in root.iterdir())
    assert len(InvertedIndex.load(root)) == 400


# ------------------------------------------------------------------ verify=False never hands the kernels bad arrays
# Each array of a saved segment gets out-of-range values written in place (same size: the size check
# passes, and verify=False skips the crc32), then a fresh process loads the index with verify=False and
# searches (exact and approximate), gets rows and reads ids. A segfault kills only that process and
# fails the test; a clean run must raise IndexCorruptError (or, for a value the format cannot tell
# from a real one, answer normally).
_EXERCISE = r"""
import sys
from tokenspace.index import IndexCorruptError, InvertedIndex
from tokenspace.sparse import SparseBatch

qs = SparseBatch.load(sys.argv[1])
for root in sys.argv[2:]:
    print(root, end=" ", flush=True)
    try:
        index = InvertedIndex.load(root, verify=False)
        ids = index.ids()
        for mode in ("exact", "approx"):
            index.search(qs, k=20, mode=mode)
        index.search(qs, k=20, mode="approx", impact_floor=0.2)  # reads the impact heads
        index.get(list(ids))
    except IndexCorruptError:
        print("corrupt", flush=True)
        continue
    print("ok", flush=True)
"""

_LISTS = {"fwd_indptr": "fwd_indices", "main_ptr": "main_docs", "res_ptr": "res_docs", "band_ptr": "band_docs"}


def _valid(name: str, b: np.ndarray, seg) -> bool:
    """Slow reference: is the segment with array ``name`` replaced by ``b`` structurally sound (every
    value the kernels index by in bounds, lists in order, ids decodable)? Plain Python loops."""
    a = dict(seg.arrays, **{name: b})
    n, dim, n_dense = seg.n, seg.dim, seg.dense.shape[0]
    chunk = kernels.POSTING_CHUNK
    n_chunks = -(-n // chunk)
    for ptr, items in _LISTS.items():
        p, x = a[ptr].tolist(), a[items].tolist()
        if p[0] != 0 or p[-1] != len(x) or any(p[i + 1] < p[i] for i in range(len(p) - 1)):
            return False
        for r in range(len(p) - 1):
            # forward rows: dims < dim; posting cells (term, chunk): offsets inside the chunk
            hi = dim if ptr == "fwd_indptr" else min(chunk, n - (r % n_chunks) * chunk)
            row = x[p[r]:p[r + 1]]
            if any(not 0 <= v < hi for v in row) or any(row[i + 1] <= row[i] for i in range(len(row) - 1)):
                return False
    ip, blob = a["ids_ptr"].tolist(), a["ids_blob"].tobytes()
    if ip[0] != 0 or ip[-1] != len(blob) or any(ip[i + 1] < ip[i] for i in range(len(ip) - 1)):
        return False
    try:
        [blob[ip[i]:ip[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError:
        return False
    if any(not -1 <= v < n_dense for v in a["dense_slot"].tolist()):
        return False
    if any(not 0 <= v <= n for v in a["df"].tolist()):
        return False
    return all(np.isfinite(v) and v >= 0 for k in ("wmax", "scale") for v in a[k].tolist())


def _damages(name: str, a: np.ndarray, n: int, dim: int, rng) -> list[tuple[str, np.ndarray]]:
    """(label, damaged copy) pairs: out-of-range values at the start, the end and random places."""
    out = []
    if a.size == 0:
        return out
    flat_positions = sorted({0, a.size - 1, *rng.integers(0, a.size, 3).tolist()})
    if np.issubdtype(a.dtype, np.floating):
        values = [np.nan, np.inf, -1.0, -np.inf]
    elif a.dtype == np.uint8:
        values = [255, 0x80, 0]
    else:
        info = np.iinfo(a.dtype)
        values = [-1, n, dim, n + 1, dim + 7, info.max, info.min, int(a.max()) + 1]
        # what the dtype can hold (uint16 doc offsets and term ids cannot be negative or above 65,535)
        values = [v for v in values if info.min <= v <= info.max]
    for pos in flat_positions:
        for v in values:
            b = np.array(a)
            b.reshape(-1)[pos] = v
            if not np.array_equal(b, a, equal_nan=True):
                out.append((f"{name}[{pos}]={v}", b))
    if a.ndim == 1 and a.size > 2 and np.issubdtype(a.dtype, np.integer):  # order broken, values in range
        b = np.array(a)
        i = int(rng.integers(1, a.size - 1))
        b[i], b[i + 1] = b[i + 1], b[i]
        if not np.array_equal(b, a):
            out.append((f"{name}[{i}]<->[{i + 1}]", b))
    return out


@pytest.mark.parametrize("name", list(__import__("tokenspace.index.segment", fromlist=["ARRAYS"]).ARRAYS))
def test_out_of_range_values_never_crash_a_verify_false_load(tmp_path, data, name):
    import shutil
    import subprocess
    import sys

    docs, ids, qs = data
    base = tmp_path / "base"
    InvertedIndex.build(docs, ids, approx_top_n=6).save(base)  # residual lists exist too
    qs.save(tmp_path / "qs.npz")
    seg = InvertedIndex.load(base)._segments[0]
    assert seg.dense.shape[0] > 0 and len(seg.res_docs) > 0 and len(seg.main_docs) > 0
    original = np.load(base / "seg-000001" / f"{name}.npy")
    cases = _damages(name, original, seg.n, seg.dim, np.random.default_rng(len(name)))
    assert cases
    roots, must_catch = {}, set()
    for k, (label, arr) in enumerate(cases):
        root = tmp_path / f"c{k}"
        shutil.copytree(base, root)
        with open(root / "seg-000001" / f"{name}.npy", "wb") as f:
            np.lib.format.write_array(f, arr, allow_pickle=False)
        assert (root / "seg-000001" / f"{name}.npy").stat().st_size == (base / "seg-000001" / f"{name}.npy").stat().st_size
        roots[str(root)] = label
        if not _valid(name, arr, seg):
            must_catch.add(str(root))
    p = subprocess.run([sys.executable, "-c", _EXERCISE, str(tmp_path / "qs.npz"), *roots],
                       capture_output=True, text=True, timeout=600)
    results = dict(line.split() for line in p.stdout.splitlines() if len(line.split()) == 2)
    last = p.stdout.split()[-1] if p.stdout.split() else None
    assert p.returncode == 0, (f"exit {p.returncode} (a crash) at {roots.get(last, last)}", p.stderr[-2000:])
    assert set(results) == set(roots)
    assert set(results.values()) <= {"ok", "corrupt"}
    missed = [roots[r] for r in must_catch if results[r] != "corrupt"]
    assert not missed, f"damage not caught: {missed}"
    if name in ("fwd_indptr", "fwd_indices", "main_ptr", "main_docs", "res_ptr", "res_docs", "band_ptr",
                "band_docs", "ids_ptr", "dense_slot"):
        assert must_catch  # the cases do reach outside the valid range


@pytest.mark.parametrize("what", ["vocab", "ids"])
def test_non_utf8_vocab_or_ids_is_index_corrupt(tmp_path, data, what):
    docs, ids, _ = data
    ids = [f"doc-é-{i}" for i in range(len(ids))]
    InvertedIndex.build(docs, ids).save(tmp_path / "idx")
    if what == "vocab":
        p = next((tmp_path / "idx").glob("vocab-*.txt"))
        p.write_bytes(b"\xff" + p.read_bytes()[1:])
    else:
        p = tmp_path / "idx" / "seg-000001" / "ids_blob.npy"
        raw = bytearray(p.read_bytes())
        raw[-3] = 0xFF  # inside the last id's bytes
        p.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match="UTF-8"):
        InvertedIndex.load(tmp_path / "idx", verify=False).ids()


def test_load_sweeps_what_a_killed_save_left(tmp_path):
    """A `.tmp-seg-*` folder of a save whose process is gone is removed when the index is next loaded."""
    from _inverted_data import ids_for, random_batch

    from tokenspace.index import InvertedIndex

    InvertedIndex.build(random_batch(20, 10, 0.3, seed=1), ids_for(20)).save(tmp_path)
    dead = tmp_path / ".tmp-seg-000007-4194304"  # above Linux's largest pid: no such process
    dead.mkdir()
    (dead / "df.npy").write_bytes(b"partial")
    assert len(InvertedIndex.load(tmp_path)) == 20
    assert not dead.exists()
