"""Boolean query trees and filters: parsing, errors with positions, and equality with brute force."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for, random_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenspace.index import And, ExactIndex, InvertedIndex, Not, Or, Term, parse_query
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary(["[PAD]", "[UNK]", "dog", "cat", "beach", "sand", "sun", "skate", "##board", "##ing",
                    "and", "AND", "red", "car", "sea", "tree"], name="q")
V = {t: i for i, t in enumerate(VOCAB.tokens)}


def test_parse_shapes():
    tree = parse_query("dog AND (beach OR sand) NOT cat", VOCAB)
    assert tree == And((Term(V["dog"], "dog"), Or((Term(V["beach"], "beach"), Term(V["sand"], "sand"))),
                        Not(Term(V["cat"], "cat"))))
    assert parse_query("dog cat", VOCAB) == And((Term(V["dog"], "dog"), Term(V["cat"], "cat")))  # implicit AND
    assert parse_query("NOT NOT dog", VOCAB) == Not(Not(Term(V["dog"], "dog")))
    assert parse_query("dog OR cat AND sun", VOCAB) == Or((Term(V["dog"], "dog"),
                                                            And((Term(V["cat"], "cat"), Term(V["sun"], "sun")))))
    assert parse_query("and", VOCAB) == Term(V["and"], "and")  # lower case is a token
    assert parse_query('"AND"', VOCAB) == Term(V["and"], "and")  # quoted keyword: the word, tokenized
    assert parse_query("DOG", VOCAB) == Term(V["dog"], "dog")  # falls back to lower case


def test_multi_wordpiece_word_requires_all_pieces():
    tree = parse_query("skateboarding", VOCAB)
    assert tree == And((Term(V["skate"], "skate"), Term(V["##board"], "##board"), Term(V["##ing"], "##ing")))
    assert tree.matches({V["skate"], V["##board"], V["##ing"]})
    assert not tree.matches({V["skate"], V["##ing"]})


@pytest.mark.parametrize("text,pos", [
    ("dog AND", 7), ("(dog", 4), ("dog )", 4), ("dog AND OR cat", 8), ("", None), ('"dog', 0),
    ("dog zebra", 4), ("()", 1),
])
def test_errors_point_at_position(text, pos):
    with pytest.raises(ValueError) as e:
        parse_query(text, VOCAB)
    if pos is not None:
        assert f"position {pos}" in str(e.value)
    if "zebra" in text:
        assert "unknown token 'zebra'" in str(e.value)


def _tree_strategy():
    leaf = st.sampled_from(["dog", "cat", "beach", "sand", "sun", "red", "car", "sea", "tree"])
    return st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR", "NOT", ""]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda s: f"NOT {s}")), max_leaves=6)


@pytest.fixture(scope="module")
def collection():
    docs = random_batch(300, len(VOCAB), 0.3, seed=21, zipf=True).with_vocab(VOCAB)
    ids = ids_for(300)
    return docs, ids, InvertedIndex.build(docs, ids), ExactIndex.build(docs, ids)


@settings(max_examples=40, deadline=None)
@given(text=_tree_strategy())
def test_where_equals_brute_force(collection, text):
    docs, ids, index, ref = collection
    qs = random_batch(4, len(VOCAB), 0.4, seed=22)
    got = index.search(qs, k=300, where=text)
    want = ref.search(qs, k=300, where=text)
    assert_same_hits(got, want)
    # and the oracle itself agrees with a per-document evaluation of the tree
    tree = parse_query(text, VOCAB)
    for hits in want:
        for h in hits:
            i = ids.index(h.id)
            assert tree.matches(set(docs.row(i)[0].tolist()))


def test_must_must_not_subset_combined(collection):
    docs, ids, index, ref = collection
    qs = random_batch(6, len(VOCAB), 0.4, seed=23)
    subset = ids[::3]
    opts = dict(must=["dog", V["beach"]], must_not=["cat"], subset=subset)
    got = index.search(qs, k=50, **opts)
    assert_same_hits(got, ref.search(qs, k=50, **opts))
    for hits in got:
        for h in hits:
            idx = set(docs.row(ids.index(h.id))[0].tolist())
            assert V["dog"] in idx and V["beach"] in idx and V["cat"] not in idx and h.id in subset
    # filters combine with approx mode too
    approx = index.search(qs, k=50, mode="approx", alpha=1.0, query_mass=1.0, **opts)
    assert_same_hits(approx, got)


def test_filter_errors(collection):
    docs, ids, index, _ = collection
    q = docs[:1]
    with pytest.raises(ValueError, match="unknown token 'zebra'"):
        index.search(q, must=["zebra"])
    with pytest.raises(ValueError, match="not a dim"):
        index.search(q, must_not=[999])
    with pytest.raises(ValueError, match="subset: 1 unknown id"):
        index.search(q, subset=["d1", "nope"])
    with pytest.raises(ValueError, match="position"):
        index.search(q, where="dog AND")
    plain = InvertedIndex.build(SparseBatch(docs.indptr, docs.indices, docs.values, docs.dim), ids)
    with pytest.raises(ValueError, match="vocabulary"):
        plain.search(q, where="dog")
    assert plain.search(q, where=parse_query("dog", VOCAB)) is not None  # a tree works without a vocab


def test_filters_with_deletes_and_segments(collection):
    docs, ids, _, _ = collection
    index = InvertedIndex.build(docs[:150], ids[:150])
    index.add(docs[150:], ids[150:])
    ref = ExactIndex.build(docs, ids)
    for idx in (index, ref):
        idx.delete(ids[::4])
    qs = random_batch(5, len(VOCAB), 0.4, seed=24)
    for opts in ({"where": "dog OR sun"}, {"must_not": ["dog"]}, {"subset": ids[1:200:2]}):
        assert_same_hits(index.search(qs, k=40, **opts), ref.search(qs, k=40, **opts))
    assert all(h.id not in set(ids[::4]) for hs in index.search(qs, k=300) for h in hs)


def test_empty_filter_result(collection):
    docs, ids, index, _ = collection
    hits = index.search(docs[:3], k=5, must=["dog"], must_not=["dog"])
    assert hits == [[], [], []]
    assert np.all([len(h) == 0 for h in index.search(docs[:2], k=5, subset=[])])


def test_a_word_no_tokenizer_takes_is_an_unknown_token():
    # a lone surrogate (JSON can carry one): the tokenizer's TypeError would escape as a traceback
    with pytest.raises(ValueError, match="unknown token '\\\\ud800' at position 7"):
        parse_query("dog OR \ud800", VOCAB)
