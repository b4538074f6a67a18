"""approx_mass: SINDI-style document pruning of the approximate lists (each document's heaviest terms
until they hold a share of its weight). Exact search is unchanged (scipy oracle), approximate search
reads only the kept postings, and the choice is saved (format version 7) while older indexes load."""
from __future__ import annotations

import json

import numpy as np
import pytest
from _inverted_data import as_older_format, ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex, kernels, storage
from tokenspace.index.storage import IndexCorruptError


@pytest.fixture(scope="module")
def setup():
    docs = random_batch(3000, 400, 0.06, seed=51, zipf=True)
    qs = random_batch(60, 400, 0.03, seed=52, zipf=True)
    ids = ids_for(3000)
    return docs, qs, ids, ExactIndex.build(docs, ids).search(qs, k=10)


def recall(got, want):
    return np.mean([len({h.id for h in g} & {h.id for h in w}) / max(1, len(w)) for g, w in zip(got, want)])


def test_mass_cut_keeps_the_heaviest_terms_up_to_the_share():
    # one doc, weights 5, 3, 1, 1 (total 10): 0.5 keeps 5; 0.6 keeps 5 and the 3 that crosses the mark
    indptr, indices = np.array([0, 4]), np.array([0, 1, 2, 3], np.int32)
    values = np.array([1.0, 5.0, 3.0, 1.0], np.float32)
    for share, main in ((0.5, [False, True, False, False]), (0.6, [False, True, True, False]),
                        (0.99, [True, True, True, True])):
        *_, is_main = kernels.term_stats(indptr, indices, values, 4, 0, share)
        assert is_main.tolist() == main, share
    *_, is_main = kernels.term_stats(indptr, indices, values, 4, 0, 0.0)  # off
    assert is_main.all()


def test_exact_search_is_unchanged_and_approx_reads_the_kept_postings(setup):
    docs, qs, ids, want = setup
    full = InvertedIndex.build(docs, ids, impact_heads=False)  # whole main lists: postings counted there
    index = InvertedIndex.build(docs, ids, approx_mass=0.6, impact_heads=False)
    seg, seg_full = index._segments[0], full._segments[0]
    # the cut postings moved to the residual lists (exact mode reads them): nothing is lost
    assert seg.res_docs.size > 0
    kept = seg.main_docs.size + int((np.asarray(seg.dense) > 0).sum())
    assert kept + seg.res_docs.size == seg_full.main_docs.size + int((np.asarray(seg_full.dense) > 0).sum())
    assert InvertedIndex.build(docs, ids, approx_mass=0.6).search(qs, k=10) == index.search(qs, k=10)  # with bands
    exact = index.search(qs, k=10)
    assert [[h.id for h in r] for r in exact] == [[h.id for h in r] for r in want]  # the oracle's top-10 ids
    assert all(abs(a.score - b.score) < 1e-5 for r, w in zip(exact, want) for a, b in zip(r, w))
    approx = index.search(qs, k=10, mode="approx", alpha=1.0, query_mass=1.0, rerank=100)
    r = recall(approx, want)
    assert 0.7 <= r < 1.0, r  # the cut is felt, and rescoring with every term keeps most of the top-10
    wide = InvertedIndex.build(docs, ids, approx_mass=0.95).search(qs, k=10, mode="approx", alpha=1.0,
                                                                   query_mass=1.0, rerank=100)
    assert recall(wide, want) >= r


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.2, True, "0.5"])
def test_approx_mass_must_be_a_share(bad):
    with pytest.raises(ValueError, match="approx_mass"):
        InvertedIndex.build(random_batch(10, 20, 0.3, seed=1), ids_for(10), approx_mass=bad)


def _doc(root):
    return json.loads((root / storage.MANIFEST).read_text())


def _write(root, doc):
    """An edited manifest with a valid checksum."""
    doc = {k: v for k, v in doc.items() if k != "manifest_crc32"}
    doc["manifest_crc32"] = storage._manifest_crc(doc)
    (root / storage.MANIFEST).write_text(json.dumps(doc))


def test_saved_with_the_index_and_kept_by_later_adds(tmp_path, setup):
    docs, qs, ids, _ = setup
    index = InvertedIndex.build(docs[:1500], ids[:1500], approx_mass=0.6)
    index.save(tmp_path / "idx")
    assert _doc(tmp_path / "idx")["approx_mass"] == 0.6 and _doc(tmp_path / "idx")["version"] == storage.VERSION >= 7
    loaded = InvertedIndex.load(tmp_path / "idx")
    assert loaded.approx_mass == 0.6 and loaded.stats()["approx_mass"] == 0.6
    loaded.add(docs[1500:], ids[1500:])
    assert loaded._segments[1].res_docs.size > 0  # the new segment is cut the same way
    assert loaded.search(qs, k=10) == InvertedIndex.build(docs, ids).search(qs, k=10)
    plain = InvertedIndex.build(docs[:50], ids[:50])
    plain.save(tmp_path / "plain")
    assert "approx_mass" not in _doc(tmp_path / "plain")  # written only when set
    assert InvertedIndex.load(tmp_path / "plain").approx_mass is None


def test_older_and_newer_formats(tmp_path):
    """A version 6 manifest (before the mass cut) loads with none; one naming approx_mass is damaged;
    a value out of range is refused naming the field; a newer version is refused naming the versions."""
    root = tmp_path / "idx"
    docs = random_batch(40, 30, 0.2, seed=5)
    InvertedIndex.build(docs, ids_for(40), approx_mass=0.5).save(root)
    doc = _doc(root)
    as_older_format(root, doc, 6)  # the files as version 6 wrote them (whole lists, nested heads)
    _write(root, {**{k: v for k, v in doc.items() if k != "approx_mass"}, "version": 6})
    old = InvertedIndex.load(root)
    assert old.approx_mass is None and len(old) == 40
    _write(root, {**doc, "version": 6})
    with pytest.raises(IndexCorruptError, match="approx_mass: unknown field"):
        InvertedIndex.load(root)
    _write(root, {**doc, "approx_mass": 1.5, "version": storage.VERSION})  # (a version 10 index may hold them)
    with pytest.raises(IndexCorruptError, match="approx_mass: expected a number in"):
        InvertedIndex.load(root)
    _write(root, {**doc, "version": storage.VERSION + 1})
    with pytest.raises(IndexCorruptError, match="format version"):
        InvertedIndex.load(root)
