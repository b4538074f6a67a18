"""Hits, one query's answer: a read-only sequence of Hit that behaves as the list of Hit it replaced, and
keeps no Hit object alive (the garbage collector's work for a caller that keeps many answers)."""
from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest

from tokenspace.index import ExactIndex, Hit, Hits, InvertedIndex
from tokenspace.index.hybrid import fuse
from tokenspace.sparse import SparseBatch

H = [Hit(3.0, "a"), Hit(2.5, "b"), Hit(1.0, "c")]


def test_hits_read_as_the_list_of_hit():
    hits = Hits.of(H)
    assert hits == H and H == hits and hits == Hits([3.0, 2.5, 1.0], ["a", "b", "c"])
    assert hits != H[:2] and hits != [*H[:2], Hit(1.0, "d")] and hits != Hits.of(H[::-1])
    assert hits != tuple(H)  # as a list never equals a tuple
    assert list(hits) == H and all(type(h) is Hit for h in hits)
    assert len(hits) == 3 and bool(hits) and not Hits() and Hits() == []
    assert hits[0] == H[0] and hits[-1] == H[-1] and hits[np.int64(1)] == H[1]
    with pytest.raises(IndexError):
        hits[3]
    assert type(hits[1:]) is Hits and hits[1:] == H[1:] and hits[::-1] == H[::-1]
    assert hits.ids == ("a", "b", "c") and hits.scores == (3.0, 2.5, 1.0)
    assert H[1] in hits and Hit(2.5, "z") not in hits and hits.index(H[2]) == 2 and hits.count(H[0]) == 1
    assert list(reversed(hits)) == H[::-1] and sorted(hits) == sorted(H)
    assert [h.to_dict() for h in hits][0] == {"id": "a", "score": 3.0}
    assert eval(repr(hits), {"Hits": Hits}) == hits and "scores=(3.0, 2.5, 1.0)" in repr(hits)


def test_hits_are_read_only_and_pickle():
    hits = Hits.of(H)
    with pytest.raises(AttributeError):
        hits.ids = ("x",)
    with pytest.raises(TypeError):
        hits[0] = Hit(9.0, "z")
    with pytest.raises(TypeError):
        hash(hits)  # equal to a list, which has no hash
    back = pickle.loads(pickle.dumps(hits))
    assert type(back) is Hits and back == hits
    with pytest.raises(ValueError, match="2 scores and 1 ids"):
        Hits([1.0, 2.0], ["a"])


def test_a_kept_answer_holds_two_tuples_and_no_hit():
    rng = np.random.default_rng(0)
    dense = rng.random((40, 16)).astype(np.float32) * (rng.random((40, 16)) < 0.3)
    docs = SparseBatch.from_dense(dense)
    index = InvertedIndex.build(docs, [f"d{i}" for i in range(40)])
    hits = index.search(SparseBatch.from_dense(dense[:1]), 5)[0]
    assert type(hits) is Hits and len(hits) == 5
    held = [x for x in gc.get_referents(hits) if x is not Hits]  # a heap type's instance refers to its type
    assert sorted(map(type, held), key=str) == [tuple, tuple] and not any(isinstance(x, Hit) for x in held)
    assert all(type(s) is float for s in hits.scores) and all(type(i) is str for i in hits.ids)


def test_every_engine_answers_with_hits():
    rng = np.random.default_rng(1)
    dense = rng.random((30, 12)).astype(np.float32) * (rng.random((30, 12)) < 0.4)
    docs, queries = SparseBatch.from_dense(dense), SparseBatch.from_dense(dense[:3])
    ids = [f"d{i}" for i in range(30)]
    inverted = InvertedIndex.build(docs, ids).search(queries, 4)
    exact = ExactIndex.build(docs, ids).search(queries, 4)
    assert all(type(h) is Hits for h in inverted + exact)
    assert [list(h.ids) for h in inverted] == [list(h.ids) for h in exact]
    fused = fuse(inverted[0], exact[1], 3)
    assert type(fused) is Hits and len(fused) == 3
