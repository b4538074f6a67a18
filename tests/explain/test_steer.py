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


# ------------------------------------------------------------------ feature steering (Sparse CLIP Sec. 4)
import numpy as np  # noqa: E402

from tokenspace.eval.steering import alternative_labels, steering_sweep  # noqa: E402
from tokenspace.explain.steer import steer_features, top_features  # noqa: E402


def test_top_features_heaviest_first_ties_by_id_and_padded():
    acts = np.array([[0.0, 2.0, 1.0, 2.0], [0.0, 0.0, 0.5, 0.0]], np.float32)
    assert top_features(acts, 3).tolist() == [[1, 3, 2], [2, -1, -1]]
    assert top_features(acts, 6).tolist() == [[1, 3, 2, -1, -1, -1], [2, -1, -1, -1, -1, -1]]
    with pytest.raises(ValueError):
        top_features(acts, 0)


def test_steer_features_zeroes_then_sets():
    acts = np.array([[1.25, 0.25, 0.0], [0.5, 0.5, 0.5]], np.float32)
    out = steer_features(acts, np.array([[0], [1]]), np.array([[2], [-1]]), strength=2.0)
    assert out.tolist() == [[0.0, 0.25, 2.0], [0.5, 0.0, 0.5]]  # cf. the paper's "dog 1.21 -> 0, cat 0 -> 2"
    assert acts[0, 0] == 1.25  # the input is left as it was
    both = steer_features(acts, np.array([[0], [0]]), np.array([[0], [0]]), strength=3.0)
    assert both[:, 0].tolist() == [3.0, 3.0]


def test_alternative_labels_never_the_true_one():
    labels = np.arange(200) % 5
    alt = alternative_labels(labels, 5, seed=1)
    assert (alt != labels).all() and set(alt.tolist()) == set(range(5))
    assert (alternative_labels(labels, 5, seed=1) == alt).all()


def test_protocol_on_planted_features():
    """3 classes, class c's text fires feature c (and 3 + c, weaker); every image fires its class
    feature and a shared background feature 6. Suppressing alone leaves only the background (a tie:
    no class wins); boosting the alternative's top feature flips every image to it."""
    C = 3
    concept = np.zeros((C, 7), np.float32)
    concept[np.arange(C), np.arange(C)] = 2.0
    concept[np.arange(C), 3 + np.arange(C)] = 1.0
    classifier = concept + 0.5 * np.eye(7, dtype=np.float32)[6]
    labels = np.array([0, 1, 2, 0, 1, 2])
    images = np.zeros((6, 7), np.float32)
    images[np.arange(6), labels] = 1.0
    images[:, 6] = 1.0
    rows = steering_sweep(images, labels, concept, classifier, ks=(1,), strengths=(None, 0.5), seed=0)
    by = {r["strength"]: r for r in rows}
    assert by[None]["true_before"] == 1.0 and by[None]["flip_before"] == 0.0
    assert by[None]["flip_rate"] == 0.0 and by[None]["true_rate"] == 0.0
    assert by[0.5]["flip_rate"] == 1.0 and by[0.5]["true_rate"] == 0.0


def test_protocol_on_a_tiny_sparse_clip_model_matches_a_slow_reference(make_model):
    import torch

    from tokenspace.eval.zeroshot import build_classifier
    from tokenspace.explain.features import raw_image_blocks, raw_text_blocks

    m = make_model("sparse-clip", expansion=4).eval()
    classes = ["dog", "cat", "red car", "big house"]
    grids = torch.randn(12, 16, 2, 2).numpy()
    labels = np.arange(12) % 4
    img = np.concatenate(list(raw_image_blocks(m, grids, batch_size=5)))
    concept = np.concatenate(list(raw_text_blocks(m, classes)))
    clf = build_classifier(classes, ["a {c}", "{c}"], m.encode_text, metric="cosine").to_dense()
    rows = steering_sweep(img, labels, concept, clf, ks=(1, 3), strengths=(None, 2.0, 50.0), seed=3)
    alt = alternative_labels(labels, 4, seed=3)
    unit_clf = clf / np.linalg.norm(clf, axis=1, keepdims=True)
    for r in rows:  # slow reference: steer and classify one image at a time
        flips = trues = 0
        for i in range(12):
            x = img[i].copy()
            for f in [f for f in np.argsort(-concept[labels[i]], kind="stable")[: r["k"]] if concept[labels[i], f] > 0]:
                x[f] = 0.0
            if r["strength"] is not None:
                for f in [f for f in np.argsort(-concept[alt[i]], kind="stable")[: r["k"]] if concept[alt[i], f] > 0]:
                    x[f] = r["strength"]
            s = unit_clf @ (x / max(np.linalg.norm(x), 1e-12))
            flips += s[alt[i]] > np.delete(s, alt[i]).max()
            trues += s[labels[i]] > np.delete(s, labels[i]).max()
        assert r["flip_rate"] == pytest.approx(flips / 12) and r["true_rate"] == pytest.approx(trues / 12)
    strong = [r for r in rows if r["strength"] == 50.0]
    assert max(r["flip_rate"] for r in strong) > rows[0]["flip_before"]  # a strong boost does steer
