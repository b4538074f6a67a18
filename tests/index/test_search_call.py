"""search(), the call a user makes, against a slow exact reference (scipy's sparse dot product) on many
random tiny indexes: one query at a time and in batches, on one thread and two, over several segments,
deletions, idf weights and a hub prior; its one-query road agrees with search_arrays, and the hits it
builds from C are Hit objects like any other."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _inverted_data import cut_reference, ids_for, random_batch

from tokenspace.index import InvertedIndex
from tokenspace.index import inverted as inv
from tokenspace.index.base import Hit, Hits, hits_of
from tokenspace.sparse import SparseBatch


def csr(b: SparseBatch) -> sp.csr_matrix:
    return sp.csr_matrix((b.values.astype(np.float64), b.indices, b.indptr), shape=(len(b), b.dim))


def reference(docs: SparseBatch, ids: list[str], qs: SparseBatch, k: int, live=None, penalty=None):
    """Per query: [(score, id)] of the exact top-k by float64 dot product (minus penalty), positive dot
    products only, ties by insertion order."""
    scores = (csr(qs) @ csr(docs).T).toarray()
    out = []
    for r in range(len(qs)):
        dot = scores[r]
        s = dot - (0.0 if penalty is None else penalty)
        ok = dot > 0 if live is None else (dot > 0) & live
        cand = np.nonzero(ok)[0]
        order = cand[np.lexsort((cand, -s[cand]))][:k]
        out.append([(float(s[j]), ids[j]) for j in order])
    return out


def check(got: list[list[Hit]], want, tol=1e-4):
    """Same ids in order, scores within float32 rounding; ids may swap only where scores nearly tie."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w), (g, w)
        for h, (s, i) in zip(g, w):
            assert type(h) is Hit
            assert abs(h.score - s) <= tol * max(1.0, abs(s)), (g, w)
            if h.id != i:
                assert any(abs(s2 - s) <= tol * max(1.0, abs(s)) for s2, i2 in w if i2 == h.id), (g, w)


def rows(qs: SparseBatch) -> list[SparseBatch]:
    return [qs[r:r + 1] for r in range(len(qs))]


@pytest.mark.parametrize("seed", range(8))
def test_search_equals_scipy_on_random_tiny_indexes(seed):
    rng = np.random.default_rng(seed)
    n, dim = int(rng.integers(1, 400)), int(rng.integers(5, 120))
    docs = random_batch(n, dim, float(rng.uniform(0.03, 0.3)), seed=seed, zipf=bool(seed % 2),
                        grid=0.25 if seed % 3 == 0 else None)
    qs = random_batch(12, dim, float(rng.uniform(0.05, 0.3)), seed=100 + seed, zipf=bool(seed % 2))
    ids = ids_for(n)
    k = int(rng.integers(1, 15))
    index = InvertedIndex.build(docs, ids, impact_heads=bool(seed % 2), dense_fraction=(0.05, 0.125, 2.0)[seed % 3])
    want = reference(docs, ids, qs, k)
    check(index.search(qs, k), want)  # a batch
    check(index.search(qs, k, threads=2), want)
    check([index.search(q, k)[0] for q in rows(qs)], want)  # one query at a time
    # approx with no cut, no skipping and a rerank past every doc is exact
    full = {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": max(k, n)}
    check([index.search(q, k, **full)[0] for q in rows(qs)], want)
    check(index.search(qs, k, **full), want)


def test_segments_deletions_idf_and_a_hub_prior_against_scipy():
    docs = random_batch(600, 80, 0.12, seed=7, zipf=True)
    qs = random_batch(15, 80, 0.1, seed=8, zipf=True)
    ids = ids_for(600)
    index = InvertedIndex.build(docs[:250], ids[:250])
    index.add(docs[250:], ids[250:])
    gone = set(ids[:600:7])
    index.delete(sorted(gone))
    live = np.array([i not in gone for i in ids])
    want = reference(docs, ids, qs, 10, live)
    check([index.search(q, 10)[0] for q in rows(qs)], want)
    check(index.search(qs, 10), want)
    # idf: the same as scoring the weighted queries (weigh), one at a time and in a batch
    weighted = index.weigh(qs, 0.5)
    want = reference(docs, ids, weighted, 10, live)
    check([index.search(q, 10, idf=0.5)[0] for q in rows(qs)], want)
    check(index.search(qs, 10, idf=0.5), want)
    # a hub prior: dot product - weight x r_D, with the stored weight and with another one
    index.set_hub_prior(qs, k=3, weight=0.5, order=False)
    r_d = index.hubness([i for i in ids if i not in gone])
    penalty = np.zeros(600)
    penalty[live] = r_d
    for w in (0.5, 0.2):
        want = reference(docs, ids, qs, 10, live, w * penalty)
        check([index.search(q, 10, prior_weight=w)[0] for q in rows(qs)], want, tol=1e-3)
        check(index.search(qs, 10, prior_weight=w), want, tol=1e-3)


def test_one_query_road_is_search_arrays_answer_and_filters_still_apply():
    docs = random_batch(800, 100, 0.08, seed=3, zipf=True)
    qs = random_batch(20, 100, 0.08, seed=4, zipf=True)
    ids = ids_for(800)
    index = InvertedIndex.build(docs, ids, approx_mass=0.8)
    for opts in ({}, {"mode": "approx", "query_mass": 0.8, "alpha": 0.9, "rerank": 20}):
        for _ in range(2):  # the second time from the kept plan
            for q in rows(qs):
                got = index.search(q, 10, **opts)[0]
                a_ids, a_scores = index.search_arrays(q.indices, q.values, 10, **opts)
                assert [h.id for h in got] == a_ids
                assert [h.score for h in got] == a_scores.tolist()
    # a filter is this search's own: a later unfiltered search is not restricted by it
    q = qs[0:1]
    plain = index.search(q, 10)[0]
    some = [h.id for h in plain[:3]]
    assert [h.id for h in index.search(q, 10, subset=some)[0]] == some
    assert index.search(q, 10)[0] == plain
    top = index.search(q, 1)[0][0].id
    assert top not in [h.id for h in index.search(q, 10, subset=[i for i in ids if i != top])[0]]


def test_one_query_road_reuses_its_buffers_without_sharing_results():
    """The one-query road writes into this thread's kept result buffers (kernels.query_scratch): what a
    search returned stays as it was through later searches (other k, other segments count), and threads
    searching at once each get their own query's answer."""
    from concurrent.futures import ThreadPoolExecutor

    docs = random_batch(600, 80, 0.1, seed=7, zipf=True)
    qs = random_batch(24, 80, 0.1, seed=8, zipf=True)
    ids = ids_for(600)
    one = InvertedIndex.build(docs, ids)
    split = InvertedIndex.build(docs[:250], ids[:250])
    split.add(docs[250:], ids[250:])
    assert len(split._segments) == 2
    want = reference(docs, ids, qs, 10)
    got, arrays = [], []
    for r, q in enumerate(rows(qs)):
        index = (one, split)[r % 2]
        got.append(index.search(q, 10)[0])
        arrays.append(index.search_arrays(q.indices, q.values, 10))
        index.search(q, 3)  # another k, then the other index: the buffers change hands
        (split, one)[r % 2].search_arrays(q.indices, q.values, 7)
    check(got, want)
    for (a_ids, a_scores), hits in zip(arrays, got):
        assert a_ids == [h.id for h in hits] and a_scores.tolist() == [h.score for h in hits]
    # a batch search of another dim replaces the thread's scratch: the kept one-query buffers stay valid
    other = InvertedIndex.build(random_batch(50, 300, 0.1, seed=9), ids_for(50))
    other.search(random_batch(3, 300, 0.1, seed=10), 5)
    check([one.search(q, 10)[0] for q in rows(qs)], want)
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            check(list(pool.map(lambda q: one.search(q, 10)[0], rows(qs))), want)
            check(list(pool.map(lambda q: split.search(q, 10, mode="approx", query_mass=1.0, alpha=1.0, rerank=600)[0], rows(qs))), want)


def test_queries_beyond_the_kept_query_arrays_equal_scipy_with_ties_in_doc_order():
    """The kernels keep each thread's query arrays for kernels.TERM_CAP query terms and kernels.CAND_CAP
    heap slots and candidates; a longer query, a deeper rerank and more exact-mode candidates take new
    arrays for that query. Each answer must be scipy's top k exactly (grid weights: exact float sums and
    real ties, which go to the smaller doc number), and small queries after them, on the kept arrays
    again, too."""
    from tokenspace.index import kernels

    n, dim = 6000, 3000
    docs = random_batch(n, dim, 0.01, seed=3, grid=0.25)
    ids = ids_for(n)
    index = InvertedIndex.build(docs, ids)
    big = random_batch(2, dim, 0.5, seed=4, grid=0.25)
    small = random_batch(6, dim, 0.005, seed=5, grid=0.25)
    assert min(np.diff(big.indptr)) > kernels.TERM_CAP and n > kernels.CAND_CAP

    def exact(got, want):
        assert [[(h.score, h.id) for h in hits] for hits in got] == want

    for k in (10, 1500):
        want = reference(docs, ids, big, k)
        assert any(len({s for s, _ in w}) < len(w) for w in want)  # ties among the hits
        exact([index.search(q, k)[0] for q in rows(big)], want)
        # a heap of every doc: approximate search returns the exact top k
        exact([index.search(q, k, mode="approx", query_mass=1.0, alpha=1.0, rerank=2 * n)[0] for q in rows(big)],
              want)
        exact([index.search(q, k)[0] for q in rows(small)], reference(docs, ids, small, k))
        # cut queries (query_mass < 1), long then short: with a heap of every doc, the candidates are the
        # docs that share a dim with the cut query, ranked by their exact score with the full query
        for qs in (big, small):
            got = [index.search(q, k, mode="approx", query_mass=0.6, alpha=1.0, rerank=2 * n)[0] for q in rows(qs)]
            want = [reference(docs, ids, q, k, live=touches(docs, cut_reference(*q.row(0), 0.6)[0]))[0]
                    for q in rows(qs)]
            assert all(w for w in want)
            exact(got, want)


def touches(docs: SparseBatch, dims) -> np.ndarray:
    """Which docs have at least one of these dims."""
    return np.asarray(csr(docs)[:, np.asarray(dims)].getnnz(axis=1) > 0)


def test_the_last_plan_is_given_back_only_for_the_same_argument_objects(monkeypatch):
    """_cached_plan gives its last plan back when every argument (and APPROX_DEFAULTS' every value) is the
    same object as then: an equal argument of another type is still checked as itself, a changed default or
    index gets a new plan."""
    docs = random_batch(300, 40, 0.15, seed=21)
    index = InvertedIndex.build(docs, ids_for(300))
    q = docs[0:1]
    qm, rr = 0.8, 20

    def plan(**kw):
        args = dict(mode="approx", k=10, query_mass=qm, alpha=None, rerank=rr, impact_floor=None, prior_weight=None,
                    idf=0.0, one=True)
        return index._cached_plan(**{**args, **kw})

    first = plan()
    assert plan() is first  # the same objects: the kept plan
    assert index.search(q, 5, mode="approx", impact_floor=0.0)[0]
    with pytest.raises(ValueError, match="impact_floor"):  # False == 0.0, but is not the same object
        index.search(q, 5, mode="approx", impact_floor=False)
    monkeypatch.setitem(inv.APPROX_DEFAULTS, "alpha", 0.5)
    changed = plan()
    assert changed is not first and changed[0][3][3] == 0.5 and first[0][3][3] == 0.9  # SearchOptions.alpha
    monkeypatch.undo()
    assert plan()[0][3][3] == 0.9
    kept = plan()
    index.add(random_batch(5, 40, 0.15, seed=22), [f"n{i}" for i in range(5)])  # the index changed
    assert plan() is not kept and sum(seg.n for _, seg, *_ in plan()) == 305


def test_bad_queries_and_arguments_are_refused_on_the_one_query_road():
    docs = random_batch(50, 30, 0.2, seed=5)
    index = InvertedIndex.build(docs, ids_for(50))
    unsorted = SparseBatch(np.array([0, 2]), np.array([5, 3]), np.array([1.0, 1.0], np.float32), 30)
    with pytest.raises(ValueError, match="query row 0 must have strictly increasing dims"):
        index.search(unsorted, 5)
    nan = SparseBatch(np.array([0, 1]), np.array([5]), np.array([np.nan], np.float32), 30)
    with pytest.raises(ValueError, match="query row 0"):
        index.search(nan, 5)
    with pytest.raises(ValueError, match="query row 0"):  # no segment to search: still checked
        InvertedIndex(30).search(unsorted, 5)
    q = docs[0:1]
    with pytest.raises(ValueError, match="k must be"):
        index.search(q, 0)
    with pytest.raises(ValueError, match="threads must be"):
        index.search(q, 5, threads=True)
    with pytest.raises(ValueError, match="threads must be"):
        index.search(q, 5, threads=0)
    with pytest.raises(ValueError, match="only apply to mode='approx'"):
        index.search(q, 5, rerank=20)
    with pytest.raises(ValueError, match="idf must be"):
        index.search(q, 5, idf=-1)
    assert index.search(SparseBatch.empty(1, 30), 5) == [[]]
    assert index.search(SparseBatch.empty(0, 30), 5) == []
    # 1, 1.0 and True are equal dict keys: each is checked as itself, never answered from another's plan
    assert index.search(q, 5, mode="approx", alpha=1)[0] == index.search(q, 5, mode="approx", alpha=1.0)[0]
    with pytest.raises(ValueError, match="impact_floor"):
        index.search(q, 5, mode="approx", impact_floor=True)


def test_hits_built_without_init_are_hits():
    assert Hit._fields == ("score", "id")  # the order hits_of fills
    made = hits_of([0.5, 2.0], ["a", "b"])
    assert made == [Hit(0.5, "a"), Hit(2.0, "b")] and all(type(h) is Hit for h in made)
    assert type(made[0]) is Hit and type(made[-1]) is Hit and type(made[:1]) is Hits
    assert [hash(h) for h in made] == [hash(Hit(0.5, "a")), hash(Hit(2.0, "b"))]
    assert made[0] < made[1] and made[0].to_dict() == {"id": "a", "score": 0.5}
    assert (made[1].score, made[1].id) == (2.0, "b")
    with pytest.raises(AttributeError):
        made[0].score = 1.0
    assert hits_of([], []) == [] and not hits_of([], [])
