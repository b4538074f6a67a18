"""Text-encoder-free token masks (STAIR_IMAGE) and query heatmaps (localization)."""
import numpy as np
import pytest

from tokenspace.eval.localize import query_heatmap
from tokenspace.eval.retrieval import retrieval_metrics
from tokenspace.eval.textfree import TokenMaskEncoder, token_mask_embeddings
from tokenspace.eval.zeroshot import ZeroShotEvaluator
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

VOCAB = Vocabulary(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "the", "on", "mat"])
IDS = {"a": 5, "cat": 6, "dog": 7, "the": 8, "on": 9, "mat": 10}


def token_ids(text):
    return [IDS.get(w, 1) for w in text.split()]


def test_token_mask_is_a_set_without_specials():
    raw = token_mask_embeddings(["a cat a", "zebra"], token_ids, len(VOCAB), VOCAB, normalize=False)
    # "a cat a" -> {a, cat} once each; "zebra" -> [UNK] only, which is special -> empty row
    assert raw.to_dicts(use_tokens=True) == [{"a": 1.0, "cat": 1.0}, {}]
    m = token_mask_embeddings(["a cat a", "zebra"], token_ids, len(VOCAB), VOCAB)
    d = m.to_dicts(use_tokens=True)
    assert set(d[0]) == {"a", "cat"} and d[1] == {}
    np.testing.assert_allclose(list(d[0].values()), [2 ** -0.5] * 2, rtol=1e-6)  # unit norm


def test_long_and_short_caption_with_the_same_cosine_score_the_same():
    # image: unit vector on cat and dog. "cat" (1 token) and "cat dog a the" (4 tokens) both have
    # cosine 1/sqrt(2) with it; the raw 0/1 mask gave the long one twice the score (sqrt(4) x cosine)
    image = SparseBatch.from_dicts([{"cat": 2 ** -0.5, "dog": 2 ** -0.5}], vocab=VOCAB)
    masks = TokenMaskEncoder(token_ids, len(VOCAB), VOCAB)(["cat", "cat dog a the"])
    scores = (image.to_scipy() @ masks.to_scipy().T).toarray()[0]
    np.testing.assert_allclose(scores, [2 ** -0.5, 2 ** -0.5], rtol=1e-6)


def test_image_to_text_prefers_the_higher_cosine_not_the_longer_caption():
    # image 0's caption "cat" has cosine 0.71; image 1's "cat dog a the on mat" has cosine 0.58 with
    # image 0 but a larger 0/1-mask dot product (1.41 vs 0.71), which stole image 0's I->T rank 1
    images = SparseBatch.from_dicts([{"cat": 2 ** -0.5, "dog": 2 ** -0.5}, {"mat": 1.0}], vocab=VOCAB)
    texts = ["cat", "cat dog a the on mat"]
    normed = retrieval_metrics(images, TokenMaskEncoder(token_ids, len(VOCAB), VOCAB)(texts), [0, 1], ks=(1,))
    assert normed["text_retrieval_recall@1"] == 1.0
    raw = retrieval_metrics(images, TokenMaskEncoder(token_ids, len(VOCAB), VOCAB, normalize=False)(texts),
                            [0, 1], ks=(1,))
    assert raw["text_retrieval_recall@1"] == 0.5  # the old behaviour, kept reachable for comparison


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
