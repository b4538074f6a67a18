"""Hybrid search (index/hybrid.py): fusion against hand-computed references on tiny indexes."""
from __future__ import annotations

import numpy as np
import pytest

from tokenspace.index import Hit, InvertedIndex
from tokenspace.index.hybrid import fuse, hybrid_search
from tokenspace.sparse import SparseBatch

pytest.importorskip("faiss", reason="faiss-cpu is not installed (the 'dense' extra)")
from tokenspace.index.dense import DenseIndex  # noqa: E402

IDS = ["a", "b", "c", "d"]


@pytest.fixture
def tiny():
    """Four documents over three sparse dims and two dense ones, and one query in each space.
    Sparse scores of the query (1, 0, 1): a 3, b 2, c 0 (no shared dim: not a hit), d 1.
    Dense scores of the query (1, 0): a 0.1, b 0.2, c 0.9, d 0.5."""
    sparse_docs = SparseBatch.from_dense(np.array([[2, 0, 1], [1, 1, 1], [0, 5, 0], [0, 0, 1]], np.float32))
    dense_docs = np.array([[0.1, 0], [0.2, 0], [0.9, 0], [0.5, 0]], np.float32)
    sparse_q = SparseBatch.from_dense(np.array([[1, 0, 1]], np.float32))
    dense_q = np.array([[1, 0]], np.float32)
    return InvertedIndex.build(sparse_docs, IDS), sparse_q, DenseIndex.build(dense_docs, IDS), dense_q


def test_rrf_against_a_hand_computed_reference(tiny):
    # sparse ranks: a 1, b 2, d 3; dense ranks: c 1, d 2, b 3, a 4; rrf_k 60, equal weights 0.5
    expect = {"a": 0.5 / 61 + 0.5 / 64, "b": 0.5 / 62 + 0.5 / 63, "c": 0.5 / 61, "d": 0.5 / 63 + 0.5 / 62}
    hits = hybrid_search(*tiny, k=4, fusion="rrf")[0]
    # b and d tie exactly (ranks 2+3 and 3+2): broken by id
    assert [h.id for h in hits] == ["a", "b", "d", "c"]  # 1/61 + 1/64 > 1/62 + 1/63
    assert [h.score for h in hits] == pytest.approx([expect[h.id] for h in hits], abs=1e-12)


def test_weighted_against_a_hand_computed_reference(tiny):
    # min-max: sparse (3, 2, 1) -> a 1, b 0.5, d 0; dense (0.9 .. 0.1) -> c 1, d 0.5, b 0.125, a 0
    w = 0.7
    expect = {"a": w * 1 + 0.3 * 0, "b": w * 0.5 + 0.3 * 0.125, "c": 0.3 * 1, "d": w * 0 + 0.3 * 0.5}
    hits = hybrid_search(*tiny, k=3, fusion="weighted", weight=w)[0]
    assert [h.id for h in hits] == ["a", "b", "c"]
    assert [h.score for h in hits] == pytest.approx([expect[h.id] for h in hits], abs=1e-6)


def test_weight_one_or_zero_gives_one_index_alone(tiny):
    sparse_index, sparse_q, dense_index, dense_q = tiny
    alone = [h.id for h in sparse_index.search(sparse_q, k=3)[0]]
    assert [h.id for h in hybrid_search(*tiny, k=3, fusion="weighted", weight=1.0)[0]] == alone
    assert [h.id for h in hybrid_search(*tiny, k=3, fusion="rrf", weight=1.0)[0]] == alone
    assert [h.id for h in hybrid_search(*tiny, k=2, fusion="rrf", weight=0.0)[0]] == ["c", "d"]


def test_depth_limits_what_each_index_contributes(tiny):
    # each index gives its top max(depth, k): with k 2, sparse a, b and dense c, d, so b no longer
    # collects its dense rank 3 and c (1/61) passes it (1/62)
    assert [h.id for h in hybrid_search(*tiny, k=2, fusion="rrf", depth=1)[0]] == ["a", "c"]
    assert [h.id for h in hybrid_search(*tiny, k=2, fusion="rrf")[0]] == ["a", "b"]


def test_fuse_edge_cases():
    assert fuse([], [], k=3) == []
    # equal scores normalise to 1 each
    same = [Hit(2.0, "x"), Hit(2.0, "y")]
    assert [(h.id, h.score) for h in fuse(same, [], k=5, fusion="weighted", weight=0.5)] == [("x", 0.5), ("y", 0.5)]


@pytest.mark.parametrize("kwargs,match", [
    ({"fusion": "max"}, "fusion must be one of rrf, weighted"),
    ({"weight": 1.5}, r"weight .* \[0, 1\]"),
    ({"k": 0}, "k must be a positive int"),
    ({"depth": 0}, "depth must be a positive int"),
])
def test_bad_arguments_are_refused(tiny, kwargs, match):
    with pytest.raises(ValueError, match=match):
        hybrid_search(*tiny, **{"k": 2, **kwargs})


def test_query_counts_must_agree(tiny):
    sparse_index, sparse_q, dense_index, dense_q = tiny
    with pytest.raises(ValueError, match="1 sparse and 2 dense"):
        hybrid_search(sparse_index, sparse_q, dense_index, np.vstack([dense_q, dense_q]), k=2)
