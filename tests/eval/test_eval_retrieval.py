"""Recall@K on a 3-image / 4-caption example worked out by hand."""
import numpy as np
import pytest

import tokenspace.eval.scoring as scoring_mod
from tokenspace.eval.retrieval import RetrievalEvaluator, image_to_text_ranks, text_to_image_ranks
from tokenspace.sparse import SparseBatch

# Images are the unit vectors, so score(text t, image i) = T[t, i]: the text rows ARE the score matrix.
IMAGES = np.eye(3)
TEXTS = np.array([
    [0.9, 0.1, 0.0],  # caption of image 0: its image scores highest           -> rank 0
    [0.2, 0.5, 0.1],  # caption of image 0: image 1 (0.5) beats it (0.2)       -> rank 1
    [0.3, 0.3, 0.0],  # caption of image 1: ties with image 0, tie counts against -> rank 1
    [0.0, 0.0, 0.0],  # caption of image 2: score 0 ties with both others       -> rank 2
])
T2I = [0, 0, 1, 2]
# image -> text, by columns of TEXTS:
#  image 0: captions {0,1} best 0.9; no other text >= 0.9                     -> rank 0
#  image 1: caption {2} = 0.3; text 1 (0.5) is ahead, text 0 (0.1) is not     -> rank 1
#  image 2: caption {3} = 0.0; texts 0, 1, 2 all score >= 0                   -> rank 3
EXPECTED = {
    "image_retrieval_recall@1": 1 / 4, "image_retrieval_recall@2": 3 / 4, "image_retrieval_recall@3": 4 / 4,
    "text_retrieval_recall@1": 1 / 3, "text_retrieval_recall@2": 2 / 3, "text_retrieval_recall@3": 2 / 3,
}


def test_ranks_by_hand():
    np.testing.assert_array_equal(text_to_image_ranks(IMAGES, TEXTS, T2I), [0, 1, 1, 2])
    np.testing.assert_array_equal(image_to_text_ranks(IMAGES, TEXTS, T2I), [0, 1, 3])


@pytest.mark.parametrize("sparse", [False, True])
def test_recall_by_hand(sparse, monkeypatch):
    monkeypatch.setattr(scoring_mod, "DEFAULT_BLOCK_BYTES", 1)  # one-row blocks: the chunked path
    img, txt = (SparseBatch.from_dense(IMAGES), SparseBatch.from_dense(TEXTS)) if sparse else (IMAGES, TEXTS)
    ev = RetrievalEvaluator(T2I, ks=(1, 2, 3))
    out = ev(img, txt)
    for name, want in EXPECTED.items():
        assert out[name] == pytest.approx(want), name
    assert out["mean_recall"] == pytest.approx(11 / 18)  # (1/4+3/4+1 + 1/3+2/3+2/3) / 6
    assert ev.primary_metric in out


def test_cosine_changes_the_ranking():
    # dot: image 1 (norm 10) wins for the caption of image 0; cosine: image 0 (same direction) wins
    images = np.array([[1.0, 0.0], [6.0, 8.0]])
    texts = np.array([[1.0, 0.1]])
    assert RetrievalEvaluator([0], ks=(1,))(images, texts)["image_retrieval_recall@1"] == 0.0
    assert RetrievalEvaluator([0], ks=(1,), metric="cosine")(images, texts)["image_retrieval_recall@1"] == 1.0


def test_images_without_captions_are_skipped_and_bad_mapping_rejected():
    out = RetrievalEvaluator([0], ks=(1,))(np.eye(2), np.array([[1.0, 0.0]]))
    assert out["text_retrieval_recall@1"] == 1.0  # image 1 has no caption: not counted as a miss
    with pytest.raises(ValueError, match="one image index per text"):
        RetrievalEvaluator([0, 1])(np.eye(2), np.eye(2)[:1])
    with pytest.raises(ValueError, match="outside"):
        RetrievalEvaluator([5])(np.eye(2), np.eye(2)[:1])
