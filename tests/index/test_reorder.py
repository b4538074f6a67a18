"""Document reordering (index/reorder.py, InvertedIndex.build(reorder=True)): a permutation that groups
similar documents, and an index built in that order that still returns the exact top-k."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex
from tokenspace.index.reorder import cluster_order
from tokenspace.sparse import SparseBatch


def planted(n_clusters=6, per=60, dim=300, seed=0):
    """Rows drawn from disjoint term sets (one per cluster), interleaved: row i is in cluster i % n."""
    rng = np.random.default_rng(seed)
    span = dim // n_clusters
    rows = []
    for i in range(n_clusters * per):
        c = i % n_clusters
        terms = np.unique(rng.choice(np.arange(c * span, (c + 1) * span), 12))
        rows.append({int(t): float(rng.uniform(0.5, 2.0)) for t in terms})
    return SparseBatch.from_dicts(rows, dim=dim), np.arange(len(rows)) % n_clusters


def runs(labels) -> int:
    return 1 + int(np.count_nonzero(np.diff(labels)))


def test_order_is_a_deterministic_permutation_that_groups_planted_clusters():
    batch, label = planted()
    order = cluster_order(batch, 6)
    assert sorted(order.tolist()) == list(range(len(batch)))
    assert np.array_equal(order, cluster_order(batch, 6))
    assert runs(label) == len(batch)  # interleaved: every row starts a new run
    assert runs(label[order]) <= 12  # clustered: a few runs (k-means may split a planted cluster)
    assert runs(label[cluster_order(batch, 6, seed=1)]) <= 12  # another seed, another start: still grouped


def test_small_or_unclustered_orders_sort_by_heaviest_term_and_keep_empty_rows():
    batch = SparseBatch.from_dicts([{5: 1.0, 2: 3.0}, {}, {1: 2.0}, {2: 0.5, 9: 0.7}, {1: 1.0}], dim=10)
    order = cluster_order(batch)  # 5 rows: fewer than a cluster, so no k-means
    # heaviest terms: 2, none (-1), 1, 9, 1 -> the empty row first, then by term, ties by arrival
    assert order.tolist() == [1, 2, 4, 0, 3]
    assert cluster_order(batch, 0).tolist() == order.tolist()
    assert cluster_order(SparseBatch.from_dicts([], dim=4)).tolist() == []
    with pytest.raises(ValueError, match="n_clusters"):
        cluster_order(batch, -2)


@pytest.mark.parametrize("zipf", [False, True])
def test_reordered_index_returns_the_exact_top_k(zipf):
    docs = random_batch(1500, 120, 0.08, seed=5, zipf=zipf)
    qs = random_batch(40, 120, 0.1, seed=6, zipf=zipf)
    ids = ids_for(len(docs))
    index = InvertedIndex.build(docs, ids, reorder=True)
    assert index.ids() != ids and sorted(index.ids()) == sorted(ids)  # really reordered (default: 5 clusters)
    want = ExactIndex.build(docs, ids).search(qs, k=10)
    assert_same_hits(index.search(qs, k=10), want)
    # vectors and metadata follow their ids through the permutation
    assert np.allclose(index.get(["d7"]).to_dense(), docs[np.array([7])].to_dense())


def test_reorder_keeps_metadata_with_its_document(tmp_path):
    docs = random_batch(600, 60, 0.1, seed=7, zipf=True)
    ids = ids_for(len(docs))
    meta = [{"row": i} for i in range(len(docs))]
    index = InvertedIndex.build(docs, ids, metadata=meta, reorder=True)
    index.save(tmp_path / "idx")
    again = InvertedIndex.load(tmp_path / "idx")
    assert again.metadata(["d0", "d321", "d599"]) == [{"row": 0}, {"row": 321}, {"row": 599}]
    qs = random_batch(5, 60, 0.2, seed=8, zipf=True)
    for hits in again.search(qs, k=5, meta={"row": {"in": [3, 30, 300]}}):
        assert {h.id for h in hits} <= {"d3", "d30", "d300"}


def test_reorder_checks_its_input_like_build():
    docs = random_batch(300, 40, 0.1, seed=9)
    with pytest.raises(ValueError, match="metadata"):
        InvertedIndex.build(docs, ids_for(300), metadata=[{}] * 299, reorder=True)
    with pytest.raises(TypeError, match="SparseBatch"):
        InvertedIndex.build(np.zeros((3, 4)), ids_for(3), reorder=True)


def _clustered_with_head(n=40_000, n_clusters=40, dim=2000, seed=3):
    """Docs of planted topics (disjoint term sets) that all share a few light head terms (stored as
    dense columns), in arrival order; queries each name one topic, with a head term."""
    rng = np.random.default_rng(seed)
    span = (dim - 4) // n_clusters
    topic = rng.integers(0, n_clusters, n)
    indptr, indices, values = [0], [], []
    for c in topic:
        own = np.unique(rng.choice(np.arange(4 + c * span, 4 + (c + 1) * span), 8))
        head = np.flatnonzero(rng.random(4) < 0.7)
        terms = np.concatenate([head, own])
        indices.append(terms)
        values.append(np.concatenate([rng.uniform(0.05, 0.3, len(head)), rng.uniform(0.5, 3.0, len(own))]))
        indptr.append(indptr[-1] + len(terms))
    docs = SparseBatch(np.array(indptr), np.concatenate(indices).astype(np.int32),
                       np.concatenate(values).astype(np.float32), dim)
    q_rows = []
    for c in rng.integers(0, n_clusters, 30):
        own = rng.choice(np.arange(4 + c * span, 4 + (c + 1) * span), 3, replace=False)
        q_rows.append({0: 1.0, **{int(t): float(rng.uniform(0.5, 2.0)) for t in own}})
    return docs, SparseBatch.from_dicts(q_rows, dim=dim)


def test_reordered_index_over_several_chunks_is_exact_where_most_blocks_are_skipped():
    # > 2 accumulator chunks (16,384 docs): once the threshold is set, a topic's query skips the
    # other topics' blocks (block runs, zeroed skipped blocks), in both modes
    docs, qs = _clustered_with_head()
    ids = ids_for(len(docs))
    index = InvertedIndex.build(docs, ids, reorder=True)
    want = ExactIndex.build(docs, ids).search(qs, k=10)
    assert_same_hits(index.search(qs, k=10), want)
    assert_same_hits(index.search(qs, k=10, mode="approx", query_mass=1.0, alpha=1.0, rerank=10_000), want)
    plain = InvertedIndex.build(docs, ids)  # the same answers in arrival order (the wide path)
    assert_same_hits(plain.search(qs, k=10), want)
