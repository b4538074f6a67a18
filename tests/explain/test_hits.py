"""Per-token contributions (explain/hits.py): all of a page's hits in one pass, equal to the plain
definition (each row's shared tokens, query weight x doc weight, largest first, ties by token id)."""
from __future__ import annotations

import numpy as np
import pytest

from tokenspace.explain.hits import Contribution, contributions
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary


def _by_definition(query: SparseBatch, docs: SparseBatch, vocab, top_k=None) -> list[list[Contribution]]:
    """The slow exact road, a row at a time: what contributions must equal, object for object."""
    qi, qv = query.row(0)
    weight = dict(zip(qi.tolist(), qv.tolist()))
    out = []
    for d in range(len(docs)):
        di, dv = docs.row(d)
        shared = sorted((t, weight[t], v) for t, v in zip(di.tolist(), dv.tolist()) if t in weight)
        parts = [Contribution(vocab.token(t) if vocab is not None else str(t), q, v) for t, q, v in shared]
        parts.sort(key=lambda c: -c.contribution)  # stable: equal contributions stay in token order
        out.append(parts[:top_k] if top_k is not None else parts)
    return out


def _rows(rng, n: int, dim: int) -> SparseBatch:
    rows = []
    for _ in range(n):
        dims = rng.choice(dim, int(rng.integers(0, dim + 1)), replace=False)
        # a few repeated weights, so that equal contributions (ties) occur
        weights = rng.choice([0.25, 0.5, 1.0, 2.0], len(dims)) if rng.random() < 0.5 else rng.random(len(dims))
        rows.append(dict(zip(dims.tolist(), weights.tolist())))
    return SparseBatch.from_dicts(rows, dim=dim)


def test_equal_to_the_definition_on_random_rows_ties_and_cuts_included():
    rng = np.random.default_rng(0)
    for _ in range(500):
        dim = int(rng.integers(1, 40))
        vocab = Vocabulary([f"t{i}" for i in range(dim)]) if rng.random() < 0.5 else None
        query, docs = _rows(rng, 1, dim), _rows(rng, int(rng.integers(0, 12)), dim)
        top_k = None if rng.random() < 0.7 else int(rng.integers(0, 5))
        assert contributions(query, docs, top_k, vocab=vocab) == _by_definition(query, docs, vocab, top_k)


def test_names_come_from_the_given_vocabulary_else_the_rows_and_sum_to_the_dot_product(tiny_vocab):
    docs = SparseBatch.from_dicts([{"dog": 0.5, "red": 0.5, "tree": 0.7}, {"cat": 1.0}, {"red": 2.0}], vocab=tiny_vocab)
    query = SparseBatch.from_dicts([{"red": 0.4, "dog": 1.0, "tree": 1.0}], vocab=tiny_vocab)
    parts = contributions(query, docs)
    assert [[c.token for c in p] for p in parts] == [["tree", "dog", "red"], [], ["red"]]
    assert [sum(c.contribution for c in p) for p in parts] == pytest.approx((docs.to_scipy() @ query.to_scipy().T).toarray()[:, 0])
    bare = SparseBatch(docs.indptr, docs.indices, docs.values, docs.dim)
    assert contributions(query, bare, vocab=tiny_vocab) == parts
    assert [c.token for c in contributions(query.with_vocab(None), bare)[0]] == [
        str(tiny_vocab.id(t)) for t in ("tree", "dog", "red")]
    with pytest.raises(ValueError, match="vocabulary has"):
        contributions(query, bare, vocab=Vocabulary(["a", "b"]))


def test_a_query_with_its_dims_out_of_order_is_read_as_the_same_vector(tiny_vocab):
    docs = SparseBatch.from_dicts([{"dog": 0.5, "red": 0.5, "tree": 0.7}], vocab=tiny_vocab)
    ordered = SparseBatch.from_dicts([{"red": 0.4, "dog": 1.0, "tree": 1.0}], vocab=tiny_vocab)
    shuffled = SparseBatch(ordered.indptr, ordered.indices[::-1], ordered.values[::-1], ordered.dim, tiny_vocab)
    assert contributions(shuffled, docs) == contributions(ordered, docs)
    assert contributions(SparseBatch.empty(1, docs.dim), docs) == [[]]
