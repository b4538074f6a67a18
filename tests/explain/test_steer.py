"""steer(): scale present tokens, add absent ones relative to the row's top weight, remove with 0."""
from __future__ import annotations

import math

import pytest

from tokenspace.explain.steer import resolve_tokens, steer
from tokenspace.sparse import SparseBatch


@pytest.fixture
def query(tiny_vocab):
    return SparseBatch.from_dicts([{"dog": 0.8, "red": 0.4, "a": 0.2}, {"cat": 0.5}], vocab=tiny_vocab)


def test_scale_remove_and_add(query):
    out = steer(query, {"dog": 2.0, "a": 0, "tree": 0.5})
    rows = out.to_dicts(use_tokens=True)
    assert rows[0] == pytest.approx({"dog": 1.6, "red": 0.4, "tree": 0.4})  # tree: 0.5 x top weight 0.8
    assert rows[1] == pytest.approx({"cat": 0.5, "dog": 1.0, "tree": 0.25})  # dog absent: added at 2 x 0.5
    assert out.vocab is query.vocab and out.dim == query.dim


def test_no_weights_is_identity(query):
    assert steer(query, {}) is query


def test_unknown_tokens_are_all_named(query):
    with pytest.raises(ValueError, match=r"unknown tokens \['zebra', 'unicorn'\]"):
        steer(query, {"dog": 2, "zebra": 1, "unicorn": 0})


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "2"])
def test_bad_factors(query, bad):
    with pytest.raises(ValueError, match="finite numbers >= 0"):
        steer(query, {"dog": bad})


def test_empty_row_adds_at_raw_factor(tiny_vocab):
    q = SparseBatch.empty(1, len(tiny_vocab), tiny_vocab)
    assert steer(q, {"dog": 0.3}).to_dicts(use_tokens=True) == [pytest.approx({"dog": 0.3})]


def test_needs_a_vocabulary(tiny_vocab):
    q = SparseBatch.from_dicts([{1: 1.0}], dim=len(tiny_vocab))
    with pytest.raises(ValueError, match="vocabulary"):
        steer(q, {"dog": 2})
    assert steer(q, {"dog": 2}, vocab=tiny_vocab).to_dicts(use_tokens=True)[0]["dog"] == 2.0
    assert resolve_tokens(["dog", "cat"], tiny_vocab) == [tiny_vocab.id("dog"), tiny_vocab.id("cat")]


def test_steered_scores_are_the_dot_product(tiny_vocab):
    """Steering changes which tokens count and by how much; scores stay plain dot products."""
    from tokenspace.explain.hits import contributions

    doc = SparseBatch.from_dicts([{"dog": 0.5, "red": 0.5, "tree": 0.7}], vocab=tiny_vocab)
    q = steer(SparseBatch.from_dicts([{"dog": 1.0, "red": 0.5}], vocab=tiny_vocab), {"red": 0, "tree": 1})
    parts = contributions(q, doc)[0]
    assert {c.token for c in parts} == {"dog", "tree"}
    assert sum(c.contribution for c in parts) == pytest.approx(1.0 * 0.5 + 1.0 * 0.7)
