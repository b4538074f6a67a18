"""Search with explanations (explain/search.py): the one sequence the CLI, the service and the demo run."""
from __future__ import annotations

import pytest

from tokenspace.explain.search import explained_search, search_options
from tokenspace.index import ExactIndex, InvertedIndex
from tokenspace.sparse import SparseBatch

DOCS = [{"red": 0.9, "dog": 0.5}, {"blue": 0.8, "cat": 0.6}, {"red": 0.3, "cat": 0.7, "tree": 0.2},
        {"green": 1.0, "car": 0.4}, {"dog": 0.2, "tree": 0.9}]
IDS = ["red-dog", "blue-cat", "red-cat", "green-car", "dog-tree"]
META = [{"caption": "a red dog", "source": "a"}, {"caption": "a blue cat", "source": "b"},
        {"caption": "a red cat", "source": "a"}, {"caption": "a green car", "source": "b"},
        {"caption": "a dog by a tree", "source": "a"}]


@pytest.fixture(params=["inverted", "exact"])
def index(request, tiny_vocab):
    batch = SparseBatch.from_dicts(DOCS, vocab=tiny_vocab)
    engine = InvertedIndex if request.param == "inverted" else ExactIndex
    return engine.build(batch, IDS, metadata=META)


def _query(vocab, row):
    return SparseBatch.from_dicts([row], vocab=vocab)


def test_each_hits_contributions_sum_to_its_score_which_is_the_dot_product(index, tiny_vocab):
    q = _query(tiny_vocab, {"red": 1.0, "cat": 0.5, "tree": 0.1})
    found = explained_search(index, q, k=5)
    dense = SparseBatch.from_dicts(DOCS, vocab=tiny_vocab).to_scipy() @ q.to_scipy().T.toarray()[:, 0]
    want = sorted(((float(s), i) for i, s in zip(IDS, dense) if s > 0), reverse=True)
    assert [h.id for h in found] == [i for _, i in want]
    for h, (score, _) in zip(found, want):
        assert h.score == pytest.approx(score, rel=1e-5)
        assert sum(c.contribution for c in h.parts) == pytest.approx(h.score, rel=1e-5)
        assert [c.contribution for c in h.parts] == sorted((c.contribution for c in h.parts), reverse=True)
    red_cat = next(h for h in found if h.id == "red-cat")
    assert [c.token for c in red_cat.parts] == ["cat", "red", "tree"]  # all three shared, heaviest first


def test_options_from_user_input_filter_like_the_engine(index, tiny_vocab):
    q = _query(tiny_vocab, {"red": 1.0, "cat": 0.5, "dog": 0.5})
    opts = search_options(index, tiny_vocab, must=["cat"], must_not=["blue"])
    assert [h.id for h in explained_search(index, q, 5, **opts)] == ["red-cat"]
    opts = search_options(index, tiny_vocab, where="dog OR tree", meta={"source": "a"})
    got = [h.id for h in explained_search(index, q, 5, **opts)]
    ranked = [h.id for h in explained_search(index, q, 5)]
    assert got == [i for i in ranked if i in {"red-dog", "red-cat", "dog-tree"}]  # source a, and dog or tree
    assert search_options(index, tiny_vocab, where="  ") == {}  # blank: no filter, as the API reads it


@pytest.mark.parametrize("kw, why", [
    ({"must": ["zebra"]}, r"^must: unknown tokens \['zebra'\]"),
    ({"must_not": ["zebra"]}, r"^must_not: unknown tokens"),
    ({"where": "dog AND ("}, r"^where: "),
    ({"meta": {"source": {"near": 1}}}, r"^filter source: "),
    ({"meta": ["source"]}, r"^filter: give an object"),
])
def test_bad_options_are_one_line_value_errors_naming_the_option(index, tiny_vocab, kw, why):
    with pytest.raises(ValueError, match=why) as e:
        search_options(index, tiny_vocab, **kw)
    assert "\n" not in str(e.value)


def test_a_metadata_filter_on_an_index_without_metadata_is_refused(tiny_vocab):
    bare = InvertedIndex.build(SparseBatch.from_dicts(DOCS, vocab=tiny_vocab), IDS)
    with pytest.raises(ValueError, match="carries no row metadata"):
        search_options(bare, tiny_vocab, meta={"source": "a"})


def test_given_hits_are_explained_as_ranked_and_an_empty_query_finds_nothing(index, tiny_vocab):
    from tokenspace.index.base import Hit

    q = _query(tiny_vocab, {"red": 1.0, "dog": 1.0})
    fused = [Hit(0.9, "dog-tree"), Hit(0.1, "red-dog")]  # e.g. a hybrid search's fused ranking
    found = explained_search(index, q, 2, hits=fused)
    assert [(h.id, h.score) for h in found] == [("dog-tree", 0.9), ("red-dog", 0.1)]
    assert [c.token for c in found[1].parts] == ["red", "dog"]
    assert explained_search(index, SparseBatch.from_dicts([{}], dim=q.dim, vocab=tiny_vocab), 3) == []
    with pytest.raises(ValueError, match="single query row"):
        explained_search(index, SparseBatch.from_dicts([{"red": 1}, {"dog": 1}], vocab=tiny_vocab), 3)
