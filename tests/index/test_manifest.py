"""MANIFEST.json read through one typed schema: every shape error is an IndexCorruptError naming the file
and the field, with the default load and with verify=False."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _inverted_data import as_older_format, ids_for, random_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenspace.index import IndexCorruptError, InvertedIndex, storage
from tokenspace.index.segment import BANDS, HEADS
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary.latent(30)


def _build(root, deleted=("d3",)):
    docs = random_batch(60, 30, 0.2, seed=5, zipf=True).with_vocab(VOCAB)
    index = InvertedIndex.build(docs[:40], ids_for(40), deny=[7],
                                metadata=[{"source": "a" if i % 2 else "b"} for i in range(40)])
    index.save(root)
    index.add(docs[40:], ids_for(20, "e"))  # a second segment
    index.delete(list(deleted))
    index.save(root)
    return root


def _doc(root) -> dict:
    return json.loads((root / storage.MANIFEST).read_text())


def _write(root, doc) -> None:
    """Write an edited manifest with a valid checksum (a checksum-valid edit)."""
    if isinstance(doc, dict) and doc.get("format") == storage.FORMAT:
        doc = {k: v for k, v in doc.items() if k != "manifest_crc32"}
        doc["manifest_crc32"] = storage._manifest_crc(doc)
    (root / storage.MANIFEST).write_text(json.dumps(doc))


def _set(path, value):
    def edit(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return doc
    return edit


SEG0 = ["segments", 0]
EDITS = {  # name -> (edit, the field the error must name)
    "n abc": (_set(["n"], "abc"), "n: expected an int"),
    "segment n abc": (_set([*SEG0, "n"], "abc"), "segments[0].n: expected an int"),
    "vocab x": (_set(["vocab"], "x"), "vocab: expected an object"),
    "token_filter list": (_set(["token_filter"], [1, 2]), "token_filter: expected an object"),
    "no segments": (_set(["segments"], KeyError), "segments: missing"),
    "dense_fraction 0": (_set(["dense_fraction"], 0), "dense_fraction: expected a finite number > 0"),
    "top_n -3": (_set(["top_n"], -3), "top_n: expected an int >= 0"),
    "segments []": (_set(["segments"], []), "segments: 0 segment(s) of 0 rows, the index has n = 60"),
    "segments {}": (_set(["segments"], {}), "segments: expected a list"),
    "segment twice": (lambda d: dict(d, segments=[d["segments"][0]] * 2, n=80), "segment seg-000001 listed twice"),
    "segment name outside": (_set([*SEG0, "name"], "../../etc"), "segments[0].name: expected a string matching"),
    "dim bool": (_set(["dim"], True), "dim: expected an int"),
    "unknown field": (_set(["extra"], 1), "extra: unknown field"),
    "file entry crc str": (lambda d: _set([*SEG0, "files", "seg-000001/df.npy", "crc32"], "x")(d),
                           "segments[0].files['seg-000001/df.npy'].crc32: expected an int"),
    "array file missing": (lambda d: _set([*SEG0, "files", "seg-000001/df.npy"], KeyError)(d),
                           "segments[0].files.seg-000001/df.npy: missing"),
    "tombstone elsewhere": (_set(["segments", 1, "tombstones"], {"file": "../x.npy", "bytes": 1, "crc32": 1}),
                            "segments[1].tombstones.file: expected a string matching"),
    "deny out of range": (_set(["token_filter", "deny"], [99]), "token_filter.deny[0]: expected an int in [0, 30)"),
    "block": (_set(["block"], 32), "block: block size"),
    "version string": (_set(["version"], "3"), "version: expected an int"),
    "version list": (_set(["version"], [2]), "version: expected an int"),
    "crc missing": (lambda d: {k: v for k, v in d.items() if k != "manifest_crc32"} | {"manifest_crc32": None},
                    "manifest_crc32: missing or not an int"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("manifest") / "idx")


@pytest.mark.parametrize("name", list(EDITS))
def test_checksum_valid_edit_is_index_corrupt_naming_the_field(saved, tmp_path, name):
    edit, field = EDITS[name]
    root = tmp_path / "idx"
    shutil.copytree(saved, root)
    doc = edit(_doc(root))
    if name == "crc missing":
        (root / storage.MANIFEST).write_text(json.dumps(doc))
    else:
        _write(root, doc)
    for verify in (True, False):
        with pytest.raises(IndexCorruptError) as e:
            InvertedIndex.load(root, verify=verify)
        assert str(e.value).startswith(str(root / storage.MANIFEST)), e.value
        assert field in str(e.value), e.value


@pytest.mark.parametrize("content, why", [
    ("null", r"\(null, not a JSON object\)"),
    ("[1, 2]", r"\(an array, not a JSON object\)"),
    ("7", r"\(a number, not a JSON object\)"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
    ('{"hello": "world"}', "not a tokenspace-inverted index manifest"),
    ("\xff\xfe", "unreadable manifest"),
])
def test_manifest_that_is_not_an_object(saved, tmp_path, content, why):
    root = tmp_path / "idx"
    shutil.copytree(saved, root)
    (root / storage.MANIFEST).write_bytes(content.encode("latin-1") if content.startswith("\xff") else content.encode())
    for verify in (True, False):
        with pytest.raises(IndexCorruptError, match=why):
            InvertedIndex.load(root, verify=verify)


def test_manifest_a_folder(saved, tmp_path):
    root = tmp_path / "idx"
    shutil.copytree(saved, root)
    (root / storage.MANIFEST).unlink()
    (root / storage.MANIFEST).mkdir()
    with pytest.raises(IndexCorruptError, match="unreadable manifest"):
        InvertedIndex.load(root, verify=False)
    with pytest.raises(IndexCorruptError, match="unreadable manifest"):
        InvertedIndex(30).save(root)  # no commit could replace it: nothing is written


def test_round_trip_keeps_the_schema(saved):
    index = InvertedIndex.load(saved)
    assert len(index) == 59 and index.token_filter.deny == frozenset({7})
    assert _doc(saved)["n"] == 60 and _doc(saved)["version"] == storage.VERSION


def _drop_hub_prior(doc) -> None:
    """Make a manifest look written before the hub prior (format < 5): no such fields."""
    doc.pop("hub_prior")
    for seg in doc["segments"]:
        seg.pop("prior")


def _saved_as_version(root, docs, version: int) -> InvertedIndex:
    """Build and save ``docs``, then make the folder look written by format ``version`` (2-9: whole main
    lists, nested heads from 4, no heads before); returns the fresh index."""
    fresh = InvertedIndex.build(docs, ids_for(len(docs)))
    fresh.save(root)
    doc = as_older_format(root, _doc(root), version)
    if version < 3:
        del doc["n"]
    if version < 5:
        _drop_hub_prior(doc)
    _write(root, doc)
    return fresh


def test_version_4_manifest_still_reads(tmp_path):
    """Indexes written before the hub prior (format 4) load and search as before, and saved again
    they gain the format's new fields."""
    root = tmp_path / "idx"
    docs = random_batch(40, 30, 0.2, seed=5)
    fresh = _saved_as_version(root, docs, 4)
    old = InvertedIndex.load(root)
    assert old.hub_prior is None and old.search(docs[:3], 5) == fresh.search(docs[:3], 5)
    old.set_hub_prior(docs[:8], k=2)
    old.save(root)
    assert _doc(root)["version"] == storage.VERSION and _doc(root)["hub_prior"]["k"] == 2


def test_hub_prior_without_ordered_reads_as_unordered(tmp_path):
    """The first version-5 indexes wrote no hub_prior.ordered (their documents kept their own order):
    they load, say so, and search as written."""
    root = tmp_path / "idx"
    docs = random_batch(40, 30, 0.2, seed=5)
    index = InvertedIndex.build(docs, ids_for(40))
    index.set_hub_prior(docs[:8], k=2, order=False)
    index.save(root)
    doc = as_older_format(root, _doc(root), 5)
    del doc["hub_prior"]["ordered"]
    _write(root, doc)
    old = InvertedIndex.load(root)
    assert old.hub_prior["ordered"] is False and old.search(docs[:3], 5) == index.search(docs[:3], 5)


def test_prior_files_must_match_the_hub_prior(tmp_path):
    """A segment's prior without the index's hub prior (or the reverse) is a damaged manifest."""
    root = tmp_path / "idx"
    docs = random_batch(40, 30, 0.2, seed=5)
    index = InvertedIndex.build(docs, ids_for(40))
    index.set_hub_prior(docs[:8], k=2)
    index.save(root)
    doc = _doc(root)
    doc["hub_prior"] = None
    _write(root, doc)
    with pytest.raises(IndexCorruptError, match="has a prior file but the index has no hub_prior"):
        InvertedIndex.load(root)
    doc = _doc(root)
    doc["hub_prior"] = {"k": 2, "weight": 0.5, "bank": {}, "ordered": True}
    _write(root, doc)
    with pytest.raises(IndexCorruptError, match="hub_prior.bank"):
        InvertedIndex.load(root)


def test_version_2_manifest_still_reads(saved, tmp_path):
    """Indexes written before the document count (format 2) load as before."""
    root = tmp_path / "idx"
    _saved_as_version(root, random_batch(20, 30, 0.2, seed=6), 2)
    assert len(InvertedIndex.load(root)) == 20


@pytest.mark.parametrize("version", [3, 9])
def test_older_index_gets_its_bands_at_load_and_keeps_its_files_when_saved(tmp_path, version):
    """A format-3 index (no impact heads) or one of versions 4 to 9 (whole main lists, nested heads) loads
    with the main lists and bands a fresh build has and searches the same, exact and with an impact
    floor; saved again in place it keeps its files (and loads so again), saved elsewhere it is written as
    bands."""
    root = tmp_path / "idx"
    docs = random_batch(300, 40, 0.2, seed=8, zipf=True)  # zipf: dense columns, whose bands are copies
    fresh = _saved_as_version(root, docs, version)
    assert all(f"seg-000001/{a}.npy" in _doc(root)["segments"][0]["files"] for a in (HEADS if version >= 4 else ()))
    old = InvertedIndex.load(root)
    for name in ("main_ptr", "main_docs", "main_codes", *BANDS):
        np.testing.assert_array_equal(old._segments[0].arrays[name], fresh._segments[0].arrays[name])
    assert not set(HEADS) & old._segments[0].arrays.keys()
    q = random_batch(5, 40, 0.3, seed=9)
    kw = dict(mode="approx", impact_floor=0.3, rerank=20)
    assert old.search(q, 5, **kw) == fresh.search(q, 5, **kw) and old.search(q, 5) == fresh.search(q, 5)
    files = dict(_doc(root)["segments"][0]["files"])
    old.delete(ids_for(300)[:3])
    old.save(root)  # in place: only the tombstones are written
    assert _doc(root)["version"] == storage.VERSION and _doc(root)["segments"][0]["files"] == files
    again = InvertedIndex.load(root)
    assert len(again) == 297
    assert again.search(q, 5, **kw) == old.search(q, 5, **kw)
    again.save(tmp_path / "new")
    seg = _doc(tmp_path / "new")["segments"][0]
    assert {f"{seg['name']}/{a}.npy" for a in BANDS} <= seg["files"].keys()
    assert not {f"{seg['name']}/{a}.npy" for a in HEADS} & seg["files"].keys()
    assert InvertedIndex.load(tmp_path / "new").search(q, 5, **kw) == old.search(q, 5, **kw)


# ------------------------------------------------------------------ generated damage (property-based)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 40), 1 << 40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


def _paths(value, prefix=()):
    """Every key path inside a JSON value (the places a generated edit may hit)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), verify=st.booleans())
def test_any_checksum_valid_edit_loads_or_is_index_corrupt(saved, tmp_path_factory, data, verify):
    """Replace or delete any one value of the manifest (checksum recomputed): the load raises
    IndexCorruptError, or gives an index that answers ids / len / search / metadata consistently."""
    root = tmp_path_factory.mktemp("edit") / "idx"
    shutil.copytree(saved, root)
    doc = _doc(root)
    doc.pop("manifest_crc32")
    paths = [p for p in _paths(doc) if p]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(st.just(KeyError) | JSON)
    _set(list(path), value)(doc)
    _write(root, doc)
    try:
        index = InvertedIndex.load(root, verify=verify)
        ids = index.ids()
        assert len(ids) == len(index) == len(set(ids))
        queries = random_batch(3, 30, 0.3, seed=1)
        for mode in ("exact", "approx"):
            for hits in index.search(queries, k=5, mode=mode):
                assert {h.id for h in hits} <= set(ids)
        index.metadata(ids)
    except IndexCorruptError:
        pass
    finally:
        shutil.rmtree(root.parent)
