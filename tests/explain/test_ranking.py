"""The ranking levers on the query side (explain/ranking.py) and in explained search: shaping keeps a
query's own words, weighs and cuts its expansion; idf and the hub prior show in each explanation."""
from __future__ import annotations

import numpy as np
import pytest

from tokenspace.explain.ranking import Ranking, encode_queries, own_tokens, shape
from tokenspace.explain.search import explained_search
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch


def test_shape_keeps_own_words_weighs_and_cuts_the_expansion(tiny_vocab):
    q = SparseBatch.from_dicts([{"red": 0.8, "dog": 0.6, "cat": 0.3, "tree": 0.05}], vocab=tiny_vocab)
    own = [np.array([tiny_vocab.id("red"), tiny_vocab.id("dog")])]
    out = shape(q, own, expansion=0.5, floor=0.1, normalize=False)
    got = {tiny_vocab.token(int(i)): float(v) for i, v in zip(*out.row(0))}
    # cat: 0.3 x 0.5 = 0.15 >= 0.1 x 0.8 stays; tree: 0.025 < 0.08 goes; own words untouched
    assert got == pytest.approx({"red": 0.8, "dog": 0.6, "cat": 0.15})
    unit = shape(q, own, expansion=0.5, floor=0.1)
    np.testing.assert_allclose(unit.values, out.values / np.linalg.norm(out.values), rtol=1e-6)
    low = shape(q, [np.array([tiny_vocab.id("tree")])], expansion=1.0, floor=0.5, normalize=False)
    assert {tiny_vocab.token(int(i)) for i in low.row(0)[0]} == {"red", "dog", "tree"}  # an own word below the floor stays


def test_encode_queries_is_the_model_s_own_vectors_with_everything_off(make_model):
    model = make_model("stair")
    texts = ["a red dog", "blue cat"]
    plain = model.encode_text(texts)
    same = encode_queries(model, texts, Ranking())
    np.testing.assert_array_equal(same.indices, plain.indices)
    np.testing.assert_array_equal(same.values, plain.values)
    words = encode_queries(model, texts, Ranking(expansion=0.0))
    for r, own in enumerate(own_tokens(model, texts)):
        assert set(words.row(r)[0].tolist()) <= set(own.tolist())
        assert np.linalg.norm(words.row(r)[1]) == pytest.approx(1.0, rel=1e-5) or not len(words.row(r)[1])
    assert model.tokenizer.vocab.id("a") not in set(own_tokens(model, ["a red dog"])[0].tolist())  # a stop word


def test_ranking_fields_are_checked():
    assert Ranking.from_dict({"idf": 0.5}).idf == 0.5
    assert Ranking(idf=0.5).with_(idf=None, expansion=0.25) == Ranking(idf=0.5, expansion=0.25)
    with pytest.raises(ValueError, match="unknown ranking field 'idff'"):
        Ranking.from_dict({"idff": 1})
    for bad in ({"idf": -1}, {"expansion_floor": 2}, {"prior_weight": float("inf")}, {"expansion": True}):
        with pytest.raises(ValueError):
            Ranking.from_dict(bad)


def test_explanations_show_idf_weighted_contributions_and_the_hub_penalty(tiny_vocab):
    docs = SparseBatch.from_dicts([{"red": 0.9, "dog": 0.5}, {"red": 0.8, "cat": 0.6}, {"red": 0.3, "cat": 0.9},
                                   {"dog": 0.7, "tree": 0.7}], vocab=tiny_vocab)
    ids = ["a", "b", "c", "d"]
    index = InvertedIndex.build(docs, ids)
    bank = SparseBatch.from_dicts([{"red": 1.0}, {"red": 0.7, "dog": 0.7}], vocab=tiny_vocab)
    index.set_hub_prior(bank, k=1, weight=0.5)
    q = SparseBatch.from_dicts([{"red": 0.7, "cat": 0.7}], vocab=tiny_vocab)
    found = explained_search(index, index.weigh(q, 1.0), k=4, prior_weight=0.5)  # the Searcher's one idf
    idf = index.idf()
    qw = q.to_dense()[0] * idf
    r = np.max(docs.to_dense() @ bank.to_dense().T, axis=1)
    want = docs.to_dense() @ qw - 0.5 * r
    shares = (docs.to_dense() @ qw) > 0
    order = [ids[i] for i in np.argsort(-want, kind="stable") if shares[i]]
    assert [h.id for h in found] == order
    for h in found:
        i = ids.index(h.id)
        assert h.penalty == pytest.approx(0.5 * r[i], rel=1e-5)
        assert h.score == pytest.approx(sum(c.contribution for c in h.parts) - h.penalty, rel=1e-5, abs=1e-6)
        for c in h.parts:  # each contribution is the idf-weighted query weight x the image's
            assert c.query_weight == pytest.approx(qw[tiny_vocab.id(c.token)], rel=1e-5)
    plain = explained_search(index, q, k=4, prior_weight=0)  # 0 is off, not "the index's weight"
    assert all(h.penalty == 0 for h in plain)
    dots = docs.to_dense() @ q.to_dense()[0]
    assert [(h.id, h.score) for h in plain] == [(ids[i], pytest.approx(dots[i], rel=1e-5))
                                                for i in np.argsort(-dots, kind="stable") if dots[i] > 0]
