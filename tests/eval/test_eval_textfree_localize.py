"""Text-encoder-free token masks (STAIR_IMAGE) and query heatmaps (localization)."""
import numpy as np
import pytest

from tokenspace.eval.localize import query_heatmap
from tokenspace.eval.textfree import TokenMaskEncoder, token_mask_embeddings
from tokenspace.eval.zeroshot import ZeroShotEvaluator
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog"])
IDS = {"a": 5, "cat": 6, "dog": 7}


def token_ids(text):
    return [IDS.get(w, 1) for w in text.split()]


def test_token_mask_is_a_set_of_ones_without_specials():
    m = token_mask_embeddings(["a cat a", "zebra"], token_ids, len(VOCAB), VOCAB)
    # "a cat a" -> {a, cat} once each; "zebra" -> [UNK] only, which is special -> empty row
    assert m.to_dicts(use_tokens=True) == [{"a": 1.0, "cat": 1.0}, {}]


def test_token_mask_encoder_plugs_into_zero_shot():
    images = SparseBatch.from_dicts([{"cat": 0.9, "a": 0.1}, {"dog": 0.5}], vocab=VOCAB)
    enc = TokenMaskEncoder(token_ids, len(VOCAB), VOCAB)
    # class vectors {a, cat} / {a, dog}: image 0 scores 1.0 vs 0.1, image 1 scores 0 vs 0.5
    out = ZeroShotEvaluator(["cat", "dog"], [0, 1], templates=["a {c}"], ks=(1,))(images, enc)
    assert out["acc1"] == 1.0


def test_query_heatmap_averages_query_tokens():
    cells = np.array([[1.0, 0, 3], [0, 2, 0], [4, 0, 0], [0, 0, 2]])  # 4 cells (2x2 grid), vocab of 3
    # query tokens {0, 2}: per cell mean = [2, 0, 2, 1]
    np.testing.assert_allclose(query_heatmap(cells, [0, 2]), [[2, 0], [2, 1]])
    np.testing.assert_allclose(query_heatmap(SparseBatch.from_dense(cells), [0, 2], grid=(2, 2)), [[2, 0], [2, 1]])
    np.testing.assert_allclose(query_heatmap(cells.reshape(2, 2, 3), [1]), [[0, 2], [0, 0]])
    with pytest.raises(ValueError):
        query_heatmap(cells, [])
