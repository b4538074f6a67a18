"""load(verify=False) skips the crc32s but still checks what is cheap: tombstone bytes
are 0 or 1, a term documents hold has a non-zero code step, ids are unique. Each file is rewritten in
place with the same size, so only these checks stand between the damage and a wrong answer."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenspace.index import IndexCorruptError, InvertedIndex

QS = random_batch(6, 40, 0.3, seed=2)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("vf") / "idx"
    docs = random_batch(120, 40, 0.15, seed=9, zipf=True)
    index = InvertedIndex.build(docs[:80], ids_for(80))
    index.save(root)
    index.add(docs[80:], ids_for(40, "e"))
    index.delete(["d1", "d2", "e5"])
    index.save(root)
    return root


def _rewrite(path, edit) -> None:
    """Rewrite one .npy in place (same dtype, shape and size) with ``edit`` applied to its array."""
    a = np.load(path)
    b = np.array(a)
    edit(b)
    size = path.stat().st_size
    with open(path, "wb") as f:
        np.lib.format.write_array(f, b, allow_pickle=False)
    assert path.stat().st_size == size


def _copy(saved, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(saved, root)
    return root


def test_tombstone_byte_other_than_0_or_1(saved, tmp_path):
    root = _copy(saved, tmp_path)
    tomb = next(root.glob("seg-000001.del-*.npy"))
    _rewrite(tomb, lambda a: a.__setitem__(1, 2))  # d1 was deleted: 2 brought it back in ids()
    with pytest.raises(IndexCorruptError, match="tombstone values must be 0 or 1"):
        InvertedIndex.load(root, verify=False)


def test_all_zero_scale(saved, tmp_path):
    root = _copy(saved, tmp_path)
    _rewrite(root / "seg-000001" / "scale.npy", lambda a: a.fill(0))  # was ZeroDivisionError in approx search
    with pytest.raises(IndexCorruptError, match="scale.npy: a term held by documents has scale 0"):
        InvertedIndex.load(root, verify=False)


def test_duplicate_id_inside_a_segment(saved, tmp_path):
    root = _copy(saved, tmp_path)
    # d10 -> d11: same length, so the pointers stay valid and only the uniqueness check can see it
    ptr = np.load(root / "seg-000001" / "ids_ptr.npy")

    def edit(blob):
        blob[ptr[10]:ptr[11]] = blob[ptr[11]:ptr[12]]
    _rewrite(root / "seg-000001" / "ids_blob.npy", edit)
    with pytest.raises(IndexCorruptError, match="id 'd11' appears twice"):
        InvertedIndex.load(root, verify=False)


def test_id_live_in_two_segments(saved, tmp_path):
    root = _copy(saved, tmp_path)
    ptr = np.load(root / "seg-000002" / "ids_ptr.npy")  # e10 -> d10 (live in segment 1)

    def edit(blob):
        blob[ptr[10]] = ord("d")
    _rewrite(root / "seg-000002" / "ids_blob.npy", edit)
    with pytest.raises(IndexCorruptError, match="id 'd10' is live in two segments"):
        InvertedIndex.load(root, verify=False)


def test_an_id_deleted_then_added_again_is_fine(tmp_path):
    docs = random_batch(10, 40, 0.3, seed=3)
    index = InvertedIndex.build(docs[:5], ids_for(5))
    index.delete(["d0"])
    index.add(docs[5:6], ["d0"])
    index.save(tmp_path / "idx")
    again = InvertedIndex.load(tmp_path / "idx", verify=False)
    assert again.ids() == ["d1", "d2", "d3", "d4", "d0"]


# ------------------------------------------------------------------ generated damage (property-based)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(["tombstones", "scale", "ids_blob"]), data=st.data())
def test_generated_cheap_damage_is_caught_or_harmless(saved, tmp_path_factory, target, data):
    """Random bytes in a tombstone file, random values in scale.npy, one id's bytes copied over
    another's: verify=False raises IndexCorruptError, or the index it loads is consistent (ids unique,
    len = live ids, exact and approximate search run and return only live ids)."""
    root = tmp_path_factory.mktemp("gen") / "idx"
    shutil.copytree(saved, root)
    seg = data.draw(st.sampled_from(["seg-000001", "seg-000002"]))
    if target == "tombstones":
        path = next(root.glob(f"{seg}.del-*.npy"))
        n = len(np.load(path))
        pos = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
        val = data.draw(st.lists(st.integers(0, 255), min_size=len(pos), max_size=len(pos)))
        _rewrite(path, lambda a: a.__setitem__(pos, val))
        must_catch = any(v > 1 for v in dict(zip(pos, val)).values())  # a later write to the same place wins
    elif target == "scale":
        path = root / seg / "scale.npy"
        df = np.load(root / seg / "df.npy")
        pos = data.draw(st.lists(st.integers(0, len(df) - 1), min_size=1, max_size=4))
        val = data.draw(st.lists(st.sampled_from([0.0, -0.0, 1e-3, 0.5, 7.0]), min_size=len(pos), max_size=len(pos)))
        _rewrite(path, lambda a: a.__setitem__(pos, val))
        final = dict(zip(pos, val))  # a later write to the same place wins
        must_catch = any(df[p] > 0 and v == 0 for p, v in final.items())
    else:
        path = root / seg / "ids_blob.npy"
        ptr = np.load(root / seg / "ids_ptr.npy")
        lens = np.diff(ptr)
        i = data.draw(st.integers(0, len(lens) - 1))
        same = [j for j in range(len(lens)) if lens[j] == lens[i] and j != i]
        j = data.draw(st.sampled_from(same))
        _rewrite(path, lambda a: a.__setitem__(slice(ptr[i], ptr[i + 1]), a[ptr[j]:ptr[j + 1]].copy()))
        must_catch = True
    try:
        index = InvertedIndex.load(root, verify=False)
        assert not must_catch, "damage not caught"
        ids = index.ids()
        assert len(ids) == len(index) == len(set(ids))
        for mode in ("exact", "approx"):
            for hits in index.search(QS, k=7, mode=mode):
                assert {h.id for h in hits} <= set(ids)
    except IndexCorruptError:
        pass
    finally:
        shutil.rmtree(root.parent)


@pytest.mark.parametrize("damage", ["same size", "truncated", "a line too many"])
def test_damaged_metadata_file(tmp_path, damage):
    """metadata.jsonl is named in the manifest like every file: the default load catches any change by
    its crc32; verify=False catches a size change at load and a line that is not a JSON object when the
    metadata is first read (never a wrong filter answer from a half-parsed file)."""
    docs = random_batch(20, 40, 0.3, seed=4)
    InvertedIndex.build(docs, ids_for(20), metadata=[{"k": i} for i in range(20)]).save(tmp_path / "idx")
    p = tmp_path / "idx" / "seg-000001" / "metadata.jsonl"
    raw = p.read_bytes()
    if damage == "same size":
        p.write_bytes(raw.replace(b'{"k": 3}', b'{"k": 3 '))
    elif damage == "truncated":
        p.write_bytes(raw[:-5])
    else:
        p.write_bytes(raw.replace(b'{"k": 3}\n{"k": 4}\n{"k": 5}\n', b'{"k":3}\n{"k":4}\n{"k":5}\n{}\n'))  # 21 lines
    assert damage == "truncated" or len(p.read_bytes()) == len(raw)
    with pytest.raises(IndexCorruptError, match="truncated" if damage == "truncated" else "crc32 mismatch"):
        InvertedIndex.load(tmp_path / "idx")
    if damage == "truncated":
        with pytest.raises(IndexCorruptError, match="truncated"):
            InvertedIndex.load(tmp_path / "idx", verify=False)
        return
    index = InvertedIndex.load(tmp_path / "idx", verify=False)
    why = "metadata.jsonl:4: not a JSON object" if damage == "same size" else "21 lines for a segment of 20 rows"
    with pytest.raises(IndexCorruptError, match=why):
        index.search(docs[:1], k=3, meta={"k": 3})
