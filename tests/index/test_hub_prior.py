"""Collection-aware ranking in the index: BM25 idf from the live postings, and the CSLS hub prior
applied inside the kernels, each checked against a brute-force reference (dense numpy)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import InvertedIndex, hubness
from tokenspace.index.storage import IndexCorruptError


def _dense(batch):
    return batch.to_dense().astype(np.float64)


def _brute_df(docs, live):
    return (_dense(docs)[live] > 0).sum(axis=0)


def _brute_top(docs, ids, q, live, penalty, k):
    """Exact top-k of q . d - penalty(d) over live docs that share a dim with q (ties: earlier doc)."""
    dot = _dense(docs) @ q
    out = []
    for i in np.lexsort((np.arange(len(dot)), -(dot - penalty))):
        if live[i] and dot[i] > 0:
            out.append((ids[i], dot[i] - penalty[i]))
    return out[:k]


def _built(docs, n_segments=3, **kw):
    """docs split over several segments, so the per-segment paths all run."""
    ids = ids_for(len(docs))
    cuts = np.linspace(0, len(docs), n_segments + 1).astype(int)
    index = InvertedIndex.build(docs[cuts[0]:cuts[1]], ids[cuts[0]:cuts[1]], **kw)
    for a, b in zip(cuts[1:-1], cuts[2:]):
        index.add(docs[a:b], ids[a:b])
    return index, ids


def test_csls_hubness_equals_the_formula():
    docs = random_batch(50, 30, 0.2, seed=1)
    bank = random_batch(23, 30, 0.3, seed=2)
    sims = _dense(docs) @ _dense(bank).T
    for k in (1, 5, 23, 40):  # 40 > the bank: every bank row counts
        want = np.sort(sims, axis=1)[:, ::-1][:, :min(k, 23)].mean(axis=1)
        np.testing.assert_allclose(hubness.csls_hubness(docs, bank, k, chunk=7), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="empty"):
        hubness.csls_hubness(docs, bank[:0])


def test_idf_equals_a_brute_force_count_after_deletes_and_compaction():
    docs = random_batch(400, 60, 0.1, seed=3, zipf=True)
    index, ids = _built(docs, dense_fraction=0.1)
    live = np.ones(len(docs), bool)
    np.testing.assert_array_equal(index.doc_freq(), _brute_df(docs, live))
    gone = ids[::7] + ids[250:260]
    index.delete(gone)
    live[[ids.index(g) for g in gone]] = False
    df = _brute_df(docs, live)
    np.testing.assert_array_equal(index.doc_freq(), df)
    n = live.sum()
    np.testing.assert_allclose(index.idf(), np.log(1 + (n - df + 0.5) / (df + 0.5)), rtol=1e-6)
    index.compact()
    np.testing.assert_array_equal(index.doc_freq(), df)
    more = random_batch(30, 60, 0.2, seed=4)
    index.add(more, ids_for(30, "m"))
    np.testing.assert_array_equal(index.doc_freq(), df + (more.to_dense() > 0).sum(axis=0))


def test_idf_weighted_search_equals_weighted_brute_force():
    docs = random_batch(300, 40, 0.15, seed=5, zipf=True)
    index, ids = _built(docs, dense_fraction=0.1)
    queries = random_batch(12, 40, 0.2, seed=6)
    idf = index.idf()
    for power in (0.5, 1.0):
        got = index.search(queries, k=8, idf=power)
        for r in range(len(queries)):
            q = _dense(queries[r:r + 1])[0] * idf.astype(np.float64) ** power
            want = _brute_top(docs, ids, q, np.ones(len(docs), bool), np.zeros(len(docs)), 8)
            assert [h.id for h in got[r]] == [i for i, _ in want]
            np.testing.assert_allclose([h.score for h in got[r]], [s for _, s in want], rtol=1e-5)
    weighted = index.weigh(queries, idf=1.0)
    assert index.search(weighted, k=8) == index.search(queries, k=8, idf=1.0)
    with pytest.raises(ValueError, match="idf"):
        index.search(queries, idf=-1)


@pytest.mark.parametrize("mode", ["exact", "approx-full"])
def test_prior_aware_top_k_equals_brute_force_with_deletes(mode):
    """Random data with dense columns, several segments and deletes: the top-k of dot - w x r_D equals
    a brute-force re-rank with the prior, in exact mode and in approximate mode with every knob off."""
    dim = 50
    docs = random_batch(900, dim, 0.08, seed=7, zipf=True)
    bank = random_batch(40, dim, 0.15, seed=8)
    index, ids = _built(docs, dense_fraction=0.05)
    index.set_hub_prior(bank, k=5, weight=0.5)
    gone = ids[3::11]
    index.delete(gone)
    live = np.ones(len(docs), bool)
    live[[ids.index(g) for g in gone]] = False
    r = hubness.csls_hubness(docs, bank, 5).astype(np.float64)
    queries = random_batch(25, dim, 0.12, seed=9)
    knobs = {} if mode == "exact" else {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": len(docs)}
    for w in (0.5, 2.0, 0.0):
        got = index.search(queries, k=10, prior_weight=w, **knobs)
        for qi in range(len(queries)):
            want = _brute_top(docs, ids, _dense(queries[qi:qi + 1])[0], live, w * r, 10)
            assert [h.id for h in got[qi]] == [i for i, _ in want], (w, qi)
            np.testing.assert_allclose([h.score for h in got[qi]], [s for _, s in want], rtol=1e-4, atol=1e-5)
    assert index.search(queries, k=10) == index.search(queries, k=10, prior_weight=0.5)  # the stored weight


def test_approximate_search_with_a_prior_stays_close():
    """The 16-bit first pass converts the penalty to its unit: with the default knobs the hits are
    a subset of good candidates (recall against the exact answer stays high)."""
    docs = random_batch(2000, 60, 0.08, seed=10, zipf=True)
    index, ids = _built(docs, n_segments=1, dense_fraction=0.05)
    index.set_hub_prior(random_batch(50, 60, 0.15, seed=11), k=5, weight=1.0)
    queries = random_batch(30, 60, 0.1, seed=12)
    exact = index.search(queries, k=10)
    approx = index.search(queries, k=10, mode="approx", rerank=200)
    recall = np.mean([len({h.id for h in a} & {h.id for h in e}) / max(1, len(e)) for a, e in zip(approx, exact)])
    assert recall > 0.9


def test_prior_survives_add_compact_save_and_load(tmp_path):
    dim = 40
    docs = random_batch(300, dim, 0.12, seed=13, zipf=True)
    bank = random_batch(30, dim, 0.2, seed=14)
    index, ids = _built(docs, n_segments=2, dense_fraction=0.1)
    index.set_hub_prior(bank, k=4, weight=0.7)
    more = random_batch(20, dim, 0.2, seed=15)
    index.add(more, ids_for(20, "m"))  # r_D of new docs from the stored bank
    np.testing.assert_allclose(index.hubness(ids_for(20, "m")), hubness.csls_hubness(more, bank, 4), rtol=1e-6)
    index.delete(ids[:10])
    queries = random_batch(10, dim, 0.2, seed=16)
    before = index.search(queries, k=7)
    index.save(tmp_path / "idx")
    loaded = InvertedIndex.load(tmp_path / "idx")
    assert loaded.hub_prior == {"k": 4, "weight": 0.7, "bank_size": 30, "ordered": True}
    assert loaded.search(queries, k=7) == before
    live = loaded.ids()
    np.testing.assert_array_equal(loaded.hubness(live), index.hubness(live))  # bit for bit
    loaded.compact()
    assert loaded.search(queries, k=7) == before
    loaded.save(tmp_path / "idx")
    again = InvertedIndex.load(tmp_path / "idx")
    assert again.search(queries, k=7) == before
    again.add(more[:3], ["x0", "x1", "x2"])
    np.testing.assert_allclose(again.hubness(["x0", "x1", "x2"]), hubness.csls_hubness(more[:3], bank, 4), rtol=1e-6)
    again.clear_hub_prior()
    again.save(tmp_path / "idx")
    plain = InvertedIndex.load(tmp_path / "idx")
    assert plain.hub_prior is None and not list((tmp_path / "idx").glob("hub-*"))
    with pytest.raises(ValueError, match="no hub prior"):
        plain.search(queries, prior_weight=0.5)


def _prior_file(root):
    man = json.loads((root / "MANIFEST.json").read_text())
    return root / man["segments"][0]["prior"]["file"]


@pytest.mark.parametrize("damage", ["flip", "negative", "truncate"])
def test_a_damaged_prior_file_is_refused(tmp_path, damage):
    docs = random_batch(100, 30, 0.2, seed=17)
    index = InvertedIndex.build(docs, ids_for(100))
    index.set_hub_prior(random_batch(10, 30, 0.3, seed=18), k=3)
    index.save(tmp_path)
    path = _prior_file(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x10
        path.write_bytes(bytes(data))
        with pytest.raises(IndexCorruptError, match="prior"):
            InvertedIndex.load(tmp_path)
    elif damage == "negative":  # in range for verify=False's checks except the sign
        arr = np.load(path)
        arr[5] = -1.0
        np.save(path, arr)
        with pytest.raises(IndexCorruptError):
            InvertedIndex.load(tmp_path)
        with pytest.raises(IndexCorruptError, match="finite and >= 0"):
            InvertedIndex.load(tmp_path, verify=False)
    else:
        path.write_bytes(bytes(data[:-8]))
        with pytest.raises(IndexCorruptError):
            InvertedIndex.load(tmp_path, verify=False)


def test_bad_prior_arguments_are_refused():
    docs = random_batch(20, 10, 0.3, seed=19)
    index = InvertedIndex.build(docs, ids_for(20))
    with pytest.raises(ValueError, match="no hub prior"):
        index.search(docs[:1], prior_weight=1.0)
    with pytest.raises(ValueError, match="prior="):
        index.add(docs[:1], ["z"], prior=np.zeros(1))
    with pytest.raises(ValueError, match="weight"):
        index.set_hub_prior(docs, weight=-1)
    with pytest.raises(ValueError, match="dim"):
        index.set_hub_prior(random_batch(3, 11, 0.3, seed=1))
    index.set_hub_prior(docs[:5], k=2)
    with pytest.raises(ValueError, match="prior_weight"):
        index.search(docs[:1], prior_weight=float("nan"))


def test_generic_tokens_are_down_weighted_at_build_and_for_every_later_add(tmp_path):
    dim = 30
    docs = random_batch(200, dim, 0.1, seed=20, zipf=True)  # zipf: a few dims in most docs
    index = InvertedIndex.build(docs, ids_for(200), generic_share=0.3)
    factors = hubness.generic_factors(docs, 0.3)
    held = (docs.to_dense() > 0).mean(axis=0)
    assert (factors < 1).any() and np.allclose(factors[held > 0.3], 0.3 / held[held > 0.3], rtol=1e-6)
    want = hubness.down_weight_generic(docs, 0.3)
    np.testing.assert_allclose(index.get(ids_for(200)).to_dense(), want.to_dense(), rtol=1e-6, atol=1e-7)
    rows = np.linalg.norm(want.to_dense(), axis=1)
    assert np.allclose(rows[rows > 0], 1.0, rtol=1e-5)
    more = random_batch(10, dim, 0.3, seed=21)
    index.add(more, ids_for(10, "m"))  # the stored factors, not ones of the new batch
    np.testing.assert_allclose(index.get(ids_for(10, "m")).to_dense(),
                               hubness.down_weight_generic(more, 1.0, factors).to_dense(), rtol=1e-6, atol=1e-7)
    index.delete(ids_for(200)[:5])
    before = index.get(index.ids()).to_dense()
    index.compact()  # stored rows are not scaled twice
    np.testing.assert_allclose(index.get(index.ids()).to_dense(), before, rtol=1e-6)
    index.save(tmp_path / "g")
    loaded = InvertedIndex.load(tmp_path / "g")
    assert loaded.token_filter == index.token_filter
    loaded.add(more[:2], ["x", "y"])
    np.testing.assert_allclose(loaded.get(["x", "y"]).to_dense(), index.get(ids_for(2, "m")).to_dense(), rtol=1e-6)


def test_prior_aware_top_k_over_several_accumulator_chunks():
    """More docs than one accumulator chunk, dense columns with block skipping and penalties that vary
    from run to run (the kernels bound each piece, sub-chunk and block by its smallest penalty)."""
    dim, n = 60, 20_000
    docs = random_batch(n, dim, 0.06, seed=22, zipf=True)
    index = InvertedIndex.build(docs, ids_for(n), dense_fraction=0.05)
    bank = random_batch(60, dim, 0.15, seed=23)
    index.set_hub_prior(bank, k=5, weight=1.0)
    r = hubness.csls_hubness(docs, bank, 5).astype(np.float64)
    queries = random_batch(12, dim, 0.1, seed=24)
    ids, live = ids_for(n), np.ones(n, bool)
    for kw in ({}, {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": n}):
        got = index.search(queries, k=10, **kw)
        for qi in range(len(queries)):
            want = _brute_top(docs, ids, _dense(queries[qi:qi + 1])[0], live, r, 10)
            assert [h.id for h in got[qi]] == [i for i, _ in want], (kw, qi)


def test_an_empty_index_takes_a_hub_prior_for_its_later_adds(tmp_path):
    bank = random_batch(8, 20, 0.3, seed=25)
    index = InvertedIndex(20)
    with pytest.raises(ValueError, match="empty"):
        index.set_hub_prior(bank[:0])
    with pytest.raises(ValueError, match="k must"):
        index.set_hub_prior(bank, k=0)
    index.set_hub_prior(bank, k=3)
    docs = random_batch(30, 20, 0.2, seed=26)
    index.add(docs, ids_for(30))
    np.testing.assert_allclose(index.hubness(ids_for(30)), hubness.csls_hubness(docs, bank, 3), rtol=1e-6)
    index.save(tmp_path)
    assert InvertedIndex.load(tmp_path).hub_prior["bank_size"] == 8


def test_hubness_order_keeps_each_segment_sorted_and_the_same_hits(tmp_path):
    """set_hub_prior(order=True) rebuilds the index in hubness order and every later add writes its
    segment in that order; the hits are those of an index left in insertion order."""
    dim = 40
    docs = random_batch(600, dim, 0.1, seed=27, zipf=True)
    bank = random_batch(30, dim, 0.2, seed=28)
    ordered, ids = _built(docs, dense_fraction=0.1)
    plain, _ = _built(docs, dense_fraction=0.1)
    ordered.delete(ids[:7])
    plain.delete(ids[:7])
    ordered.set_hub_prior(bank, k=4)
    plain.set_hub_prior(bank, k=4, order=False)
    assert len(ordered._segments) == 1 and len(plain._segments) == 3  # rebuilt as compact does
    assert plain.ids() == [i for i in ids if i not in ids[:7]]
    more = random_batch(50, dim, 0.2, seed=29)
    for index in (ordered, plain):
        index.add(more, ids_for(50, "m"))
    for si in range(len(ordered._segments)):
        assert np.all(np.diff(ordered._priors[si]) >= 0)
    np.testing.assert_allclose(ordered.hubness(plain.ids()), plain.hubness(plain.ids()), rtol=1e-6)
    queries = random_batch(20, dim, 0.15, seed=30)
    for got, want in zip(ordered.search(queries, k=10), plain.search(queries, k=10)):
        assert [h.id for h in got] == [h.id for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=1e-5)
    ordered.save(tmp_path)
    again = InvertedIndex.load(tmp_path)
    assert again.hub_prior["ordered"] and again.search(queries, k=10) == ordered.search(queries, k=10)
