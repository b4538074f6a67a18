"""Persistence: round trips, incremental commits, crash safety, and damaged files -> IndexCorruptError."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for, random_batch

from tokenspace.index import ExactIndex, IndexCorruptError, InvertedIndex, storage
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary.latent(50)


@pytest.fixture
def data():
    docs = random_batch(400, 50, 0.15, seed=31, zipf=True).with_vocab(VOCAB)
    return docs, ids_for(400), random_batch(12, 50, 0.15, seed=32, zipf=True)


def test_roundtrip_mmap_and_incremental_commit(tmp_path, data):
    docs, ids, qs = data
    index = InvertedIndex.build(docs[:250], ids[:250], top_n=6)
    index.save(tmp_path / "idx")
    loaded = InvertedIndex.load(tmp_path / "idx")
    assert isinstance(loaded._segments[0].dense, np.memmap) or isinstance(loaded._segments[0].dense.base, np.memmap)
    assert loaded.vocab.tokens == VOCAB.tokens and loaded.top_n == 6
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
