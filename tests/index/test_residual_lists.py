"""residual_lists=False: an index that keeps and saves no residual lists (the postings approx_mass /
approx_top_n leave out of the approximate lists). Approximate search never reads them; exact search and
the dim filters derive them from the forward store on first use, the same arrays a build stores, so every
answer is the same as with them (and exact search the scipy oracle's). Saved as format version 9."""
from __future__ import annotations

import json

import numpy as np
import pytest
from _inverted_data import as_older_format, ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex, kernels, storage
from tokenspace.index.segment import RESIDUAL
from tokenspace.index.storage import IndexCorruptError

BUILDS = [{"approx_mass": 0.6}, {"approx_top_n": 4}, {"approx_mass": 0.8, "approx_top_n": 6}, {}]


@pytest.fixture(scope="module")
def data():
    docs = random_batch(3000, 400, 0.06, seed=61, zipf=True)
    qs = random_batch(40, 400, 0.03, seed=62, zipf=True)
    return docs, qs, ids_for(3000)


def _hits(results):
    return [[(h.id, h.score) for h in r] for r in results]


@pytest.mark.parametrize("build", BUILDS)
def test_derived_lists_are_the_stored_ones(data, build):
    docs, _, ids = data
    stored = InvertedIndex.build(docs, ids, **build)._segments[0]
    lean = InvertedIndex.build(docs, ids, residual_lists=False, **build)._segments[0]
    assert stored.stores_residual and not lean.stores_residual
    assert not any(name in lean.arrays for name in RESIDUAL)
    assert lean._residual is None
    for got, want in zip(lean.residual(), (stored.arrays[name] for name in RESIDUAL)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    # heads and dense columns take no part in the choice
    heads = InvertedIndex.build(docs, ids, residual_lists=False, dense_fraction=0.02, **build)._segments[0]
    with_lists = InvertedIndex.build(docs, ids, dense_fraction=0.02, **build)._segments[0]
    assert heads.dense.shape[0] > 0
    for got, want in zip(heads.residual(), (with_lists.arrays[name] for name in RESIDUAL)):
        assert np.array_equal(got, want)


def test_lists_across_posting_chunks():
    """More documents than one posting chunk: each chunk's cells are derived on their own."""
    n = kernels.POSTING_CHUNK + 3000
    docs = random_batch(n, 60, 0.05, seed=63)
    stored = InvertedIndex.build(docs, ids_for(n), approx_top_n=1, dense_fraction=2.0)._segments[0]
    lean = InvertedIndex.build(docs, ids_for(n), approx_top_n=1, dense_fraction=2.0, residual_lists=False)._segments[0]
    assert len(stored.res_ptr) == 60 * 2 + 1 and stored.res_docs.size > 0
    for got, want in zip(lean.residual(), (stored.arrays[name] for name in RESIDUAL)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("build", BUILDS[:2])
def test_every_answer_is_the_same(data, build):
    docs, qs, ids = data
    stored = InvertedIndex.build(docs, ids, **build)
    lean = InvertedIndex.build(docs, ids, residual_lists=False, **build)
    approx = {"mode": "approx", "query_mass": 0.9, "alpha": 1.0, "rerank": 30}
    assert _hits(lean.search(qs, k=10, **approx)) == _hits(stored.search(qs, k=10, **approx))
    assert lean._segments[0]._residual is None  # approximate search derived nothing
    exact = lean.search(qs, k=10)
    assert _hits(exact) == _hits(stored.search(qs, k=10))
    want = ExactIndex.build(docs, ids).search(qs, k=10)
    assert [[h.id for h in r] for r in exact] == [[h.id for h in r] for r in want]
    assert all(abs(a.score - b.score) < 1e-5 for r, w in zip(exact, want) for a, b in zip(r, w))
    ids_q, vals_q = qs.indices[qs.indptr[0]:qs.indptr[1]], qs.values[qs.indptr[0]:qs.indptr[1]]
    got, want_arr = lean.search_arrays(ids_q, vals_q, 10), stored.search_arrays(ids_q, vals_q, 10)
    assert list(got[0]) == list(want_arr[0]) and np.array_equal(got[1], want_arr[1])


def test_dim_filters_derive_the_lists(data):
    docs, qs, ids = data
    stored = InvertedIndex.build(docs, ids, approx_mass=0.5)
    lean = InvertedIndex.build(docs, ids, approx_mass=0.5, residual_lists=False)
    seg = stored._segments[0]
    # a dim some documents hold only in their residual lists
    dim = int(np.argmax(np.diff(seg.res_ptr)))
    assert lean._segments[0]._residual is None
    for kw in ({"must": [dim]}, {"must_not": [dim]}):
        for mode in ("approx", "exact"):
            assert _hits(lean.search(qs, k=10, mode=mode, **kw)) == _hits(stored.search(qs, k=10, mode=mode, **kw))
    assert np.array_equal(lean._segments[0].has_dim(dim), seg.has_dim(dim)) and seg.has_dim(dim).any()


def test_saved_without_the_files_and_loaded(data, tmp_path):
    docs, qs, ids = data
    stored = InvertedIndex.build(docs, ids, approx_mass=0.6)
    lean = InvertedIndex.build(docs, ids, approx_mass=0.6, residual_lists=False)
    lean.save(tmp_path / "lean")
    stored.save(tmp_path / "stored")
    doc = json.loads((tmp_path / "lean" / "MANIFEST.json").read_text())
    assert doc["version"] == storage.VERSION >= 9
    seg_dir = next((tmp_path / "lean").glob("seg-*"))
    assert not any((seg_dir / f"{name}.npy").exists() for name in RESIDUAL)
    size = lambda root: sum(p.stat().st_size for p in root.rglob("*") if p.is_file())  # noqa: E731
    assert size(tmp_path / "lean") < size(tmp_path / "stored") - seg_dir.joinpath("main_docs.npy").stat().st_size // 2
    loaded = InvertedIndex.load(tmp_path / "lean")
    assert loaded.residual_lists is False and loaded.stats()["residual_lists"] is False
    approx = {"mode": "approx", "query_mass": 0.8, "alpha": 1.0, "rerank": 20}
    assert _hits(loaded.search(qs, k=10, **approx)) == _hits(stored.search(qs, k=10, **approx))
    assert loaded._segments[0]._residual is None
    assert _hits(loaded.search(qs, k=10, threads=2)) == _hits(stored.search(qs, k=10))
    # an approximate search after the exact one is handed the derived lists; still the same answers
    assert _hits(loaded.search(qs, k=10, **approx)) == _hits(stored.search(qs, k=10, **approx))
    # later adds and a compaction follow the choice; saving in place writes no residual file either
    loaded.add(random_batch(50, 400, 0.06, seed=64, zipf=True), ids_for(50, "e"))
    assert not loaded._segments[-1].stores_residual
    loaded.save(tmp_path / "lean", remap=True)
    assert not list((tmp_path / "lean").glob("seg-*/res_*.npy"))
    loaded.delete(["d3", "e4"])
    loaded.compact()
    assert len(loaded._segments) == 1 and not loaded._segments[0].stores_residual
    again = InvertedIndex.load(tmp_path / "lean")
    assert _hits(again.search(qs, k=10)) == _hits(InvertedIndex.load(tmp_path / "lean").search(qs, k=10))


def _manifest(root):
    return json.loads((root / storage.MANIFEST).read_text())


def _write(root, doc):
    """The manifest ``doc`` with a right checksum (its version as given)."""
    doc = {k: v for k, v in doc.items() if k != "manifest_crc32"}
    doc["manifest_crc32"] = storage._manifest_crc(doc)
    (root / storage.MANIFEST).write_text(json.dumps(doc, indent=1, sort_keys=True))


def test_manifest_needs_all_three_or_none(data, tmp_path):
    docs, _, ids = data
    InvertedIndex.build(docs[:200], ids[:200], approx_mass=0.6).save(tmp_path / "idx")
    root = tmp_path / "idx"
    doc = _manifest(root)
    files = doc["segments"][0]["files"]
    name = doc["segments"][0]["name"]
    one = dict(doc, segments=[dict(doc["segments"][0], files={k: v for k, v in files.items()
                                                              if k != f"{name}/res_docs.npy"})])
    _write(root, one)
    with pytest.raises(IndexCorruptError, match="res_docs.npy"):
        InvertedIndex.load(root)
    # a version 8 manifest (every segment with its lists) without them is refused
    none = dict(doc, segments=[dict(doc["segments"][0], files={k: v for k, v in files.items()
                                                               if not k.split("/")[1].startswith("res_")})])
    _write(root, none)
    assert InvertedIndex.load(root).residual_lists is False  # version 9: fine
    _write(root, as_older_format(root, dict(none), 8))  # (the files of version 8: whole lists, nested heads)
    with pytest.raises(IndexCorruptError, match="res_codes.npy"):
        InvertedIndex.load(root)


@pytest.mark.parametrize("bad", [0, 1, "no", None])
def test_residual_lists_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="residual_lists"):
        InvertedIndex(10, residual_lists=bad)
