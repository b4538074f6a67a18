"""Index-side token blacklist / whitelist (STAIR App. D): filtered dims are never indexed, the filter is
saved with the index and applies to later adds; searches equal the exact reference on filtered docs."""
from __future__ import annotations

import numpy as np
import pytest
from _inverted_data import assert_same_hits, ids_for, random_batch

from tokenspace.index import ExactIndex, InvertedIndex
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary


def _drop(batch: SparseBatch, keep_dims) -> SparseBatch:
    """Slow reference: zero the columns outside keep_dims in the dense matrix."""
    dense = batch.to_dense()
    mask = np.zeros(batch.dim, bool)
    mask[list(keep_dims)] = True
    dense[:, ~mask] = 0
    return SparseBatch.from_dense(dense, vocab=batch.vocab)


@pytest.mark.parametrize("deny, allow", [([3, 7, 11], None), (None, list(range(0, 40, 2))), ([4], [4, 5, 6, 30])])
def test_search_equals_the_exact_reference_on_filtered_docs(deny, allow):
    docs = random_batch(300, 40, 0.2, seed=1, zipf=True)
    qs = random_batch(25, 40, 0.15, seed=2)
    ids = ids_for(len(docs))
    keep = set(range(40)) if allow is None else set(allow)
    keep -= set(deny or ())
    got = InvertedIndex.build(docs, ids, deny=deny, allow=allow).search(qs, k=8)
    assert_same_hits(got, ExactIndex.build(_drop(docs, keep), ids).search(qs, k=8))
    unfiltered = InvertedIndex.build(docs, ids).search(qs, k=8)
    assert any([h.score for h in a] != [h.score for h in b] for a, b in zip(got, unfiltered))  # it did filter


def test_filter_by_token_name_is_saved_and_applies_to_later_adds(tmp_path):
    vocab = Vocabulary(["[PAD]", "dog", "cat", "https", "beach"])
    docs = SparseBatch.from_dicts([{"dog": 0.5, "https": 0.9}, {"cat": 0.4, "https": 0.2}], vocab=vocab)
    index = InvertedIndex.build(docs, ["a", "b"], deny=["https"])
    assert index.get(["a"]).to_dicts(use_tokens=True) == [{"dog": 0.5}]
    index.save(tmp_path / "idx")
    index = InvertedIndex.load(tmp_path / "idx")
    assert index.stats()["token_filter"] == {"deny": [3], "allow": None}
    index.add(SparseBatch.from_dicts([{"https": 1.0, "beach": 0.25}], vocab=vocab), ["c"])
    assert index.get(["c"]).to_dicts(use_tokens=True) == [{"beach": 0.25}]
    q = SparseBatch.from_dicts([{"https": 1.0}], vocab=vocab)
    assert index.search(q, k=3) == [[]]  # the denied token neither scores nor matches
    assert index.search(SparseBatch.from_dicts([{"beach": 1.0}], vocab=vocab), k=3, where="https") == [[]]
    index.compact()
    assert index.token_filter is not None and index.get(["a"]).to_dicts(use_tokens=True) == [{"dog": 0.5}]


def test_unfiltered_index_has_no_filter_and_bad_entries_are_clear_errors(tmp_path):
    docs = random_batch(10, 8, 0.5, seed=0)
    index = InvertedIndex.build(docs, ids_for(10))
    assert index.token_filter is None and index.stats()["token_filter"] is None
    index.save(tmp_path / "idx")
    assert InvertedIndex.load(tmp_path / "idx").token_filter is None
    with pytest.raises(ValueError, match="needs an index with a vocabulary"):
        InvertedIndex.build(docs, ids_for(10), deny=["dog"])
    with pytest.raises(ValueError, match="not a dim"):
        InvertedIndex.build(docs, ids_for(10), allow=[8])
    with pytest.raises(TypeError, match="not one string"):
        InvertedIndex(8, deny="dog")
