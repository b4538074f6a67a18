"""Zero-shot: prompt-ensemble averaging and acc@K / mean per-class recall, by hand."""
import numpy as np
import pytest

from tokenspace.eval.zeroshot import ZeroShotEvaluator, build_classifier
from tokenspace.sparse import SparseBatch

# toy "text encoder" over 4 dims: 0 cat, 1 dog, 2 a, 3 the ("the" weighs 0.5)
WORDS = {"cat": 0, "dog": 1, "a": 2, "the": 3}
WEIGHT = {"the": 0.5}


def encode_sparse(texts):
    return SparseBatch.from_dicts([{WORDS[w]: WEIGHT.get(w, 1.0) for w in t.split()} for t in texts], dim=4)


def encode_dense(texts):
    return encode_sparse(texts).to_dense()


TEMPLATES = ["a {c}", lambda c: f"the {c}"]  # format strings and callables both work


def test_ensemble_is_the_mean_of_template_vectors_and_stays_sparse():
    clf = build_classifier(["cat", "dog"], TEMPLATES, encode_sparse)
    assert isinstance(clf, SparseBatch)
    # cat: mean({cat:1, a:1}, {cat:1, the:0.5}) = {cat:1, a:0.5, the:0.25}
    np.testing.assert_allclose(clf.to_dense(), [[1, 0, 0.5, 0.25], [0, 1, 0.5, 0.25]])
    dense = build_classifier(["cat", "dog"], TEMPLATES, encode_dense)
    assert isinstance(dense, np.ndarray)
    np.testing.assert_allclose(dense, clf.to_dense())


def test_cosine_ensemble_normalises_each_prompt_first():
    def enc(texts):
        return np.array([[2.0, 0.0] if t.startswith("a ") else [0.0, 1.0] for t in texts])

    clf = build_classifier(["x"], ["a {c}", "the {c}"], enc, metric="cosine")
    np.testing.assert_allclose(clf, [[0.5, 0.5]])  # mean of [1,0] and [0,1], not of [2,0] and [0,1]


IMAGES = SparseBatch.from_dicts([
    {0: 1.0},            # cat image: cat 1.0 vs dog 0             -> right
    {1: 0.2, 0: 0.1},    # dog image: dog 0.2 vs cat 0.1           -> right
    {2: 1.0},            # cat image: both classes 0.5, a tie       -> wrong at 1 (ties count against), right at 2
    {0: 0.4, 1: 0.3},    # dog image: cat 0.4 beats dog 0.3        -> wrong at 1, right at 2
    {1: 1.0},            # dog image                               -> right
], dim=4)
LABELS = [0, 1, 0, 1, 1]


@pytest.mark.parametrize("encode", [encode_sparse, encode_dense])
def test_accuracy_by_hand(encode):
    ev = ZeroShotEvaluator(["cat", "dog"], LABELS, templates=TEMPLATES, ks=(1, 2))
    out = ev(IMAGES, encode)
    assert out["acc1"] == pytest.approx(3 / 5)
    assert out["acc2"] == pytest.approx(1.0)
    # per class: cat 1 of 2 right, dog 2 of 3 right -> (1/2 + 2/3) / 2
    assert out["mean_per_class_recall"] == pytest.approx(7 / 12)
    assert ev.primary_metric == "acc1"


def test_labels_out_of_range_rejected():
    with pytest.raises(ValueError, match="labels"):
        ZeroShotEvaluator(["cat"], [0, 1])
