"""The numpy road (index/road.py): a process that has not loaded numba opens, checks and searches a small
index in numpy, with the kernels' answers: the same ids in the same order and the same float32 scores
(bit for bit), the same ties, filters, prior, idf, deletions, segments and refusals, and the exact dot
product's top-k (scipy). The loader's numpy checks answer as their kernels do. A fresh process opens and
searches a tiny index without importing numba, and loads it where a job needs it."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import InvertedIndex, kernels, numpy_checks, road
from tokenspace.sparse import SparseBatch


def numpy_road(monkeypatch):
    monkeypatch.setattr(road, "use_kernels", lambda entries: False)


def kernel_road(monkeypatch):
    monkeypatch.setattr(road, "use_kernels", lambda entries: True)


def answers(index, queries, k, **opts):
    return [[(h.id, h.score) for h in index.search(queries[r:r + 1], k, **opts)[0]] for r in range(len(queries))]


def both(monkeypatch, index, queries, k, **opts):
    """(numpy road's, kernels') answers of each query, as lists of (id, float32 score)."""
    numpy_road(monkeypatch)
    got = answers(index, queries, k, **opts)
    kernel_road(monkeypatch)
    want = answers(index, queries, k, **opts)
    return got, want


def oracle(docs: SparseBatch, ids, queries: SparseBatch, k, live=None):
    """scipy's exact dot products: the top k positive ones, ties to the earlier document."""
    scores = (docs.to_scipy().astype(np.float64) @ queries.to_scipy().astype(np.float64).T).toarray()
    out = []
    for r in range(len(queries)):
        s = scores[:, r]
        order = [d for d in np.lexsort((np.arange(len(s)), -s)) if s[d] > 0 and (live is None or live[d])]
        out.append([(ids[d], s[d]) for d in order[:k]])
    return out


def same_as_oracle(got, want):
    for g, w in zip(got, want):
        assert [i for i, _ in g] == [i for i, _ in w]
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], rtol=2e-6, atol=1e-7)


@pytest.fixture(scope="module")
def world():
    # weights on a 1/4 grid: exact float sums, so real ties; zipf: dense columns too
    docs = random_batch(600, 120, 0.08, seed=5, grid=0.25, zipf=True)
    docs = SparseBatch.concat([docs, docs[:40]])  # 40 duplicated rows: equal scores, ties by insertion
    queries = random_batch(40, 120, 0.05, seed=6, grid=0.25, zipf=True)
    return docs, ids_for(len(docs)), queries


@pytest.mark.parametrize("k", [1, 10, 1000])  # 1000: more than the documents
def test_the_numpy_road_answers_as_the_kernels_and_the_exact_dot_product(monkeypatch, world, k):
    docs, ids, queries = world
    index = InvertedIndex.build(docs, ids)
    got, want = both(monkeypatch, index, queries, k)
    assert got == want
    same_as_oracle(got, oracle(docs, ids, queries, k))
    if k > 1:
        assert any(x[1] == y[1] for a in got for x, y in zip(a, a[1:])), "the collection must hold ties"


def test_random_weights_give_bit_equal_scores(monkeypatch):
    docs = random_batch(900, 300, 0.05, seed=11)
    queries = random_batch(50, 300, 0.04, seed=12)
    index = InvertedIndex.build(docs, ids_for(900), dense_fraction=0.05)
    got, want = both(monkeypatch, index, queries, 10)
    assert got == want
    same_as_oracle(got, oracle(docs, ids_for(900), queries, 10))


def test_empty_and_unknown_queries(monkeypatch, world):
    docs, ids, _ = world
    index = InvertedIndex.build(docs[:100], ids[:100])
    held = set(docs[:100].indices.tolist())
    unknown = [d for d in range(docs.dim) if d not in held][:3]
    queries = SparseBatch.concat([SparseBatch.empty(1, docs.dim),
                                  SparseBatch(np.array([0, len(unknown)]), np.array(unknown, np.int32),
                                              np.ones(len(unknown), np.float32), docs.dim),
                                  SparseBatch(np.array([0, 2]), np.array([unknown[0], 0], np.int32)[::-1].copy(),
                                              np.array([0.0, 0.0], np.float32), docs.dim)])
    got, want = both(monkeypatch, index, queries, 5)
    assert got == want == [[], [], []]
    for use in (numpy_road, kernel_road):
        use(monkeypatch)
        assert index.search_arrays(np.array(unknown, np.int32), np.ones(len(unknown), np.float32), 5)[0] == []


def test_filters_prior_idf_deletions_and_segments(monkeypatch, world):
    docs, ids, queries = world
    meta = [{"source": "a" if i % 3 else "b"} for i in range(len(ids))]
    index = InvertedIndex.build(docs[:400], ids[:400], metadata=meta[:400])
    index.add(docs[400:], ids[400:], metadata=meta[400:])
    index.set_hub_prior(queries, k=3, order=False)
    gone = set(ids[5:300:7])
    index.delete(list(gone))
    for opts in ({}, {"prior_weight": 0.0}, {"prior_weight": 0.7}, {"idf": 0.5}, {"must": [1]},
                 {"must_not": [0, 2]}, {"must": [3, 4]},
                 {"subset": [i for i in ids[::2] if i not in gone]}, {"meta": {"source": "b"}}, {"idf": 1.0, "must_not": [1], "prior_weight": 0.3}):
        got, want = both(monkeypatch, index, queries, 7, **opts)
        assert got == want, opts
    live = np.array([i not in gone for i in ids])
    got, _ = both(monkeypatch, index, queries, 7, prior_weight=0.0)
    same_as_oracle(got, oracle(docs, ids, queries, 7, live))


def test_search_arrays_and_refusals_take_the_same_road(monkeypatch, world):
    docs, ids, queries = world
    index = InvertedIndex.build(docs[:200], ids[:200])
    for use in (numpy_road, kernel_road):
        use(monkeypatch)
        for r in range(5):
            found, scores = index.search_arrays(*queries.row(r), 10)
            assert list(zip(found, scores.tolist())) == answers(index, queries[r:r + 1], 10)[0]
        with pytest.raises(ValueError, match="out of range"):
            index.search_arrays([5, 120], [1.0, 1.0])
        with pytest.raises(ValueError, match="out of range"):
            index.search_arrays([-1], [1.0])
        with pytest.raises(ValueError, match="strictly increasing"):
            index.search_arrays([5, 3], [1.0, 1.0])
        with pytest.raises(ValueError, match="strictly increasing"):
            index.search_arrays([3, 5], [1.0, float("nan")])


def test_approximate_search_and_batches_keep_the_kernels(monkeypatch, world):
    docs, ids, queries = world
    index = InvertedIndex.build(docs, ids)
    numpy_road(monkeypatch)
    plan = index._plan("approx", 5, None, None, None, None, None, one=True)
    assert all(kt is not None for _, _, kt, _, _ in plan)
    assert all(kt is not None for _, _, kt, _, _ in index._plan("exact", 5, None, None, None, None, None, one=False))
    assert all(kt is None for _, _, kt, _, _ in index._plan("exact", 5, None, None, None, None, None, one=True))
    batch = [[(h.id, h.score) for h in hits] for hits in index.search(queries, 5)]
    assert batch == answers(index, queries, 5)


def test_the_rule_is_the_kernels_once_loaded_above_the_size_or_past_the_budget(monkeypatch):
    assert road.use_kernels(0)  # this process has loaded them (the imports above)
    monkeypatch.delitem(sys.modules, "tokenspace.index.kernels")
    monkeypatch.setattr(road, "_spent", 0.0)
    assert not road.use_kernels(road.NUMPY_MAX_ENTRIES)
    assert road.use_kernels(road.NUMPY_MAX_ENTRIES + 1)
    road.spent(road.NUMPY_BUDGET_S / 2)
    assert not road.use_kernels(0)
    road.spent(road.NUMPY_BUDGET_S)  # numpy has cost about the kernels' load: they are worth loading now
    assert road.use_kernels(0)


def test_the_numpy_checks_answer_as_the_kernels():
    rng = np.random.default_rng(3)
    for trial in range(300):
        rows = int(rng.integers(0, 6))
        counts = rng.integers(0, 5, rows)
        ptr = np.zeros(rows + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        items = np.sort(rng.integers(0, 40, int(ptr[-1]))).astype(np.uint16)
        for r in range(rows):  # each row strictly increasing, then a fault or not
            items[ptr[r]:ptr[r + 1]] = np.sort(rng.choice(40, counts[r], replace=False))
        values = rng.random(len(items)).astype(np.float32)
        fault = trial % 5
        if fault == 1 and len(items) > 1:
            p = int(rng.integers(1, len(items)))
            items[p] = items[p - 1]
        elif fault == 2 and len(values):
            values[int(rng.integers(0, len(values)))] = rng.choice([np.nan, np.inf, -1.0])
        elif fault == 3 and rows:
            ptr[int(rng.integers(1, rows + 1))] += int(rng.choice([-1, 1]))
        hi, per = int(rng.choice([30, 40, 200])), int(rng.choice([0, 2, 3]))
        chunk = int(rng.choice([16, 64]))
        ptr_ok = ptr[0] == 0 and ptr[-1] == len(items) and bool(np.all(np.diff(ptr) >= 0))
        assert numpy_checks.check_lists(ptr, items, hi, per, chunk) == kernels.check_lists(ptr, items, hi, per, chunk)
        assert numpy_checks.check_lists(ptr, items.astype(np.int32) - (trial % 7 == 0), hi, per, chunk) == \
            kernels.check_lists(ptr, items.astype(np.int32) - (trial % 7 == 0), hi, per, chunk)
        if ptr_ok:
            idx = items.astype(np.int32)
            assert numpy_checks.check_rows(ptr, idx, values) == kernels.check_rows(ptr, idx, values), trial
        blob = rng.integers(0, 256, int(ptr[-1]) if ptr_ok else 0).astype(np.uint8)
        bptr = ptr if ptr_ok else np.zeros(1, np.int64)
        np.testing.assert_array_equal(numpy_checks.fnv1a(bptr, blob), kernels.fnv1a(bptr, blob))


FRESH = """
import json, sys
import numpy as np
from tokenspace.index import InvertedIndex
index = InvertedIndex.load(sys.argv[1])
q = np.array(json.loads(sys.argv[2]), np.int32)
w = np.ones(len(q), np.float32)
out = {"numpy": index.search_arrays(q, w, 5)[0], "numba_after_search": "numba" in sys.modules}
index.search_arrays(q, w, 5, mode="approx")  # approximate search: the kernels, loaded for it
out["numba_after_approx"] = "numba" in sys.modules
out["kernels"] = index.search_arrays(q, w, 5)[0]
print(json.dumps(out))
"""


def test_a_fresh_process_opens_and_searches_a_small_index_without_numba(tmp_path, world):
    docs, ids, queries = world
    index = InvertedIndex.build(docs[:300], ids[:300])
    index.set_hub_prior(queries, k=3)  # its bank's rows are checked at load too
    index.save(tmp_path / "idx")
    q = queries.row(0)[0].tolist()
    r = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "idx"), json.dumps(q)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["numba_after_search"] is False and out["numba_after_approx"] is True
    want = index.search_arrays(np.array(q, np.int32), np.ones(len(q), np.float32), 5)[0]
    assert out["numpy"] == out["kernels"] == want and want
