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


# ---------------------------------------------------------------------------------------------- tie rules
def _slow_recall_position(scores_q_by_d: np.ndarray, relevant: list[set], k: int) -> float:
    """clip_benchmark's rule by brute force: sort each query's scores (stable: equal scores keep their
    order), hit if any relevant item is among the first k. Queries without a relevant item are skipped."""
    hits = [bool(set(np.argsort(-row, kind="stable")[:k].tolist()) & rel)
            for row, rel in zip(scores_q_by_d, relevant) if rel]
    return float(np.mean(hits))


@pytest.mark.parametrize("sparse", [False, True])
def test_position_ties_equal_a_slow_clip_benchmark_reference(sparse, monkeypatch):
    monkeypatch.setattr(scoring_mod, "DEFAULT_BLOCK_BYTES", 4 * 7)  # small blocks: the chunked path
    rng = np.random.default_rng(0)
    n_img, n_txt = 9, 20
    images = np.eye(n_img)
    texts = rng.integers(0, 3, size=(n_txt, n_img)).astype(np.float64)  # scores in {0, 1, 2}: many ties
    t2i = rng.integers(0, n_img - 1, size=n_txt)  # the last image has no caption
    img, txt = (SparseBatch.from_dense(images), SparseBatch.from_dense(texts)) if sparse else (images, texts)
    ks = (1, 2, 5)
    got = RetrievalEvaluator(t2i, ks=ks, ties="position")(img, txt)
    strict = RetrievalEvaluator(t2i, ks=ks)(img, txt)
    for k in ks:
        want_t2i = _slow_recall_position(texts, [{int(i)} for i in t2i], k)
        want_i2t = _slow_recall_position(texts.T, [set(np.flatnonzero(t2i == i).tolist()) for i in range(n_img)], k)
        assert got[f"image_retrieval_recall@{k}"] == pytest.approx(want_t2i), k
        assert got[f"text_retrieval_recall@{k}"] == pytest.approx(want_i2t), k
        # the default rule is never more lenient
        assert strict[f"image_retrieval_recall@{k}"] <= got[f"image_retrieval_recall@{k}"]
        assert strict[f"text_retrieval_recall@{k}"] <= got[f"text_retrieval_recall@{k}"]
    assert strict["mean_recall"] < got["mean_recall"]  # with this many ties the rules differ


def test_position_ties_by_hand():
    # caption 2 ties with image 0 (0.3, 0.3): position rule -> image 0 comes first -> rank 1 still;
    # caption 3 (all 0) of image 2: images 0, 1 come first -> rank 2 under both rules
    np.testing.assert_array_equal(text_to_image_ranks(IMAGES, TEXTS, T2I, ties="position"), [0, 1, 1, 2])
    # image 2: its caption 3 (score 0) ties with texts 0, 1, 2 which all come first: rank 3
    np.testing.assert_array_equal(image_to_text_ranks(IMAGES, TEXTS, T2I, ties="position"), [0, 1, 3])
    # a tie the caption wins by position: image 0's caption (text 0) and text 1 both score 0.5 with it
    texts, t2i = np.array([[0.5, 0.0], [0.5, 0.5]]), [0, 1]
    np.testing.assert_array_equal(image_to_text_ranks(np.eye(2), texts, t2i, ties="position"), [0, 0])
    np.testing.assert_array_equal(image_to_text_ranks(np.eye(2), texts, t2i), [1, 0])  # strict: counts against
    with pytest.raises(ValueError, match="ties"):
        RetrievalEvaluator(T2I, ties="optimistic")


def test_coco_1k_folds_on_a_tiny_collection():
    """5 folds of 2 images (2 captions each): each fold is searched alone and the recalls averaged."""
    from tokenspace.eval.retrieval import fold_retrieval_metrics, retrieval_metrics

    rng = np.random.default_rng(1)
    images = rng.standard_normal((10, 4))
    t2i = np.repeat(np.arange(10), 2)
    texts = images[t2i] + 0.8 * rng.standard_normal((20, 4))
    got = fold_retrieval_metrics(images, texts, t2i, n_folds=5, ks=(1,))
    per_fold = [retrieval_metrics(images[2 * f:2 * f + 2], texts[4 * f:4 * f + 4], t2i[4 * f:4 * f + 4] - 2 * f,
                                  ks=(1,)) for f in range(5)]
    for key in ("image_retrieval_recall@1", "text_retrieval_recall@1", "mean_recall"):
        assert got[key] == pytest.approx(np.mean([m[key] for m in per_fold]))
    whole = retrieval_metrics(images, texts, t2i, ks=(1,))
    assert got["image_retrieval_recall@1"] >= whole["image_retrieval_recall@1"]  # 2 candidates, not 10
    out = RetrievalEvaluator(t2i, ks=(1,), folds=5)(images, texts)
    assert out["folds5/image_retrieval_recall@1"] == got["image_retrieval_recall@1"]
    assert out["image_retrieval_recall@1"] == whole["image_retrieval_recall@1"]
    with pytest.raises(ValueError, match="equal folds"):
        fold_retrieval_metrics(images, texts, t2i, n_folds=3)
