"""search_arrays: one query from its arrays gives search's answer (ids, scores), exact mode the scipy
oracle's, over deletions and several segments; bad input is refused like search refuses it."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex


@pytest.fixture(scope="module")
def setup():
    docs = random_batch(2000, 300, 0.06, seed=61, zipf=True)
    qs = random_batch(30, 300, 0.04, seed=62, zipf=True)
    return docs, qs, ids_for(2000)


def same(index, qs, **opts):
    for r in range(len(qs)):
        idx, val = qs.row(r)
        ids, scores = index.search_arrays(idx, val, 10, **opts)
        hits = index.search(qs[r:r + 1], 10, **opts)[0]
        assert ids == [h.id for h in hits]
        np.testing.assert_array_equal(scores, np.array([h.score for h in hits], np.float32))


@pytest.mark.parametrize("opts", [{}, {"mode": "approx", "query_mass": 0.8, "alpha": 0.9, "rerank": 20}])
def test_one_segment_with_deletions_and_two_segments(setup, opts):
    docs, qs, ids = setup
    index = InvertedIndex.build(docs[:1200], ids[:1200], approx_mass=0.8)
    same(index, qs, **opts)
    index.delete(ids[:300:3])
    same(index, qs, **opts)
    index.add(docs[1200:], ids[1200:])
    same(index, qs, **opts)
    if not opts:  # exact: the oracle's top-10
        live = [i for i in ids if i not in set(ids[:300:3])]
        pos = {s: j for j, s in enumerate(ids)}
        oracle = ExactIndex.build(docs[[pos[i] for i in live]], live).search(qs, k=10)
        for r in range(len(qs)):
            assert index.search_arrays(*qs.row(r), 10)[0] == [h.id for h in oracle[r]]


def test_bad_queries_are_refused(setup):
    docs, _, ids = setup
    index = InvertedIndex.build(docs[:100], ids[:100])
    with pytest.raises(ValueError, match="out of range"):
        index.search_arrays([5, 300], [1.0, 1.0])
    with pytest.raises(ValueError, match="out of range"):
        index.search_arrays([-1], [1.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        index.search_arrays([5, 3], [1.0, 1.0])
    with pytest.raises(ValueError, match="alike"):
        index.search_arrays([5, 6], [1.0])
    with pytest.raises(ValueError, match="k must be"):
        index.search_arrays([5], [1.0], 0)
    with pytest.raises(ValueError, match="only apply to mode='approx'"):
        index.search_arrays([5], [1.0], rerank=20)
    assert index.search_arrays([], [], 5) == ([], pytest.approx(np.zeros(0, np.float32)))


def test_a_sweep_of_settings_and_a_hub_prior_give_search_s_answers(setup):
    """search_arrays keeps each segment's options per setting: alternating settings on one index (as a
    sweep does), an impact floor and a hub prior's penalty must each still give search's answer."""
    docs, qs, ids = setup
    index = InvertedIndex.build(docs[:1500], ids[:1500])
    settings = [{}, {"mode": "approx", "query_mass": 0.8, "alpha": 1.0, "rerank": 20},
                {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": 20, "impact_floor": 0.1}]
    for _ in range(2):
        for opts in settings:
            same(index, qs, **opts)
    index.set_hub_prior(qs, k=3)
    for opts in settings:
        same(index, qs, **opts)
        same(index, qs, prior_weight=0.0, **opts)


def test_bad_queries_are_refused_with_nothing_to_search(setup):
    """The query is checked even when no segment is searched: an empty index, every doc deleted."""
    docs, _, ids = setup
    for index in (InvertedIndex(300), InvertedIndex.build(docs[:50], ids[:50])):
        index.delete(ids[:50])
        with pytest.raises(ValueError, match="out of range"):
            index.search_arrays([5, 300], [1.0, 1.0])
        with pytest.raises(ValueError, match="strictly increasing"):
            index.search_arrays([5, 6], [1.0, float("nan")])
        assert index.search_arrays([5], [1.0], 5) == ([], pytest.approx(np.zeros(0, np.float32)))
    index = InvertedIndex.build(docs[:100], ids[:100])
    with pytest.raises(ValueError, match="strictly increasing"):
        index.search_arrays([5, 6], [1.0, -1.0], mode="approx")


def test_kept_plans_follow_every_change_of_the_index(setup, tmp_path):
    """search_arrays keeps its checked arguments per setting: a delete, an add, a hub prior set (in place
    or reordered) or cleared, and a save that remaps the arrays must each be seen by the next search."""
    docs, qs, ids = setup
    index = InvertedIndex.build(docs[:800], ids[:800])
    approx = {"mode": "approx", "query_mass": 0.8, "alpha": 1.0, "rerank": 20}
    changes = [lambda: index.delete(ids[:200:2]), lambda: index.add(docs[800:1000], ids[800:1000]),
               lambda: index.set_hub_prior(qs, k=3, order=False), lambda: index.set_hub_prior(qs, k=2, weight=1.0),
               lambda: index.clear_hub_prior(), lambda: index.save(tmp_path / "idx", remap=True),
               lambda: index.add(docs[1000:1100], ids[1000:1100]), lambda: index.compact()]
    for change in [lambda: None] + changes:
        change()
        for opts in ({}, approx):
            same(index, qs, **opts)
