"""Sparse CLIP metrics by hand: Clarity, L0, active-feature fraction, modality score."""
import math

import numpy as np
import pytest

from tokenspace.eval.features import (
    active_feature_fraction,
    clarity,
    clarity_per_feature,
    l0,
    modality_scores,
    modality_summary,
)
from tokenspace.sparse import SparseBatch

# 4 images x 4 features
ACT = np.array([
    [1, 1, 0, 1],
    [1, 0, 0, 0],
    [0, 1, 0.0005, 1],  # feature 2 is below tau = 0.001 here
    [0, 0, 1, 1],
], dtype=float)
# reference embeddings e(x) (the paper uses a separate CLIP encoder)
REF = np.array([[1.0, 0], [0, 1], [1, 0], [1, 1]])
# F0: I = {x0, x1}: cos(e0, e1) = 0                                        -> 0
# F1: I = {x0, x2}: cos(e0, e2) = 1                                        -> 1
# F2: I = {x3} only (x2 below tau): fewer than n_min = 2 images            -> not in F_active
# F3: I = {x0, x2, x3}: pairs (0,2)=1, (0,3)=(2,3)=1/sqrt2; ordered sum 2(1+sqrt2) over 3*2 -> (1+sqrt2)/3
F3 = (1 + math.sqrt(2)) / 3


@pytest.mark.parametrize("sparse", [False, True])
def test_clarity_by_hand(sparse):
    act = SparseBatch.from_dense(ACT) if sparse else ACT
    feats, vals = clarity_per_feature(act, REF, tau=0.001, n_min=2)
    np.testing.assert_array_equal(feats, [0, 1, 3])
    np.testing.assert_allclose(vals, [0.0, 1.0, F3])
    out = clarity(act, REF)
    assert out["clarity"] == pytest.approx((0 + 1 + F3) / 3)
    assert out["clarity_features"] == 3


def test_clarity_defaults_to_the_activations_as_reference():
    act = np.array([[1.0, 0], [1.0, 0], [1.0, 1.0]])
    # F0: {x0, x1, x2}: cos(x0,x1)=1, cos(x0,x2)=cos(x1,x2)=1/sqrt2 -> (1 + 2/sqrt2) * 2 / 6
    # F1: {x2} alone -> excluded
    assert clarity(act)["clarity"] == pytest.approx((1 + math.sqrt(2)) / 3)


@pytest.mark.parametrize("sparse", [False, True])
def test_l0_and_active_features_by_hand(sparse):
    act = SparseBatch.from_dense(ACT) if sparse else ACT
    assert l0(act) == pytest.approx((3 + 1 + 3 + 2) / 4)            # every positive entry counts
    assert l0(act, tau=0.001) == pytest.approx((3 + 1 + 2 + 2) / 4)  # x2's 0.0005 no longer does
    assert active_feature_fraction(act) == 1.0
    # per-feature counts 2, 2, 2, 3: only F3 reaches 3
    assert active_feature_fraction(act, min_count=3) == pytest.approx(1 / 4)


IMG = np.array([[2.0, 0, 1, 0], [0, 0, 1, 0]])                          # means [1, 0, 1, 0]
TXT = np.array([[0.0, 4, 1, 0], [0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]])  # means [0, 1, 0.75, 0]


@pytest.mark.parametrize("sparse", [False, True])
def test_modality_score_by_hand(sparse):
    img, txt = (SparseBatch.from_dense(IMG), SparseBatch.from_dense(TXT)) if sparse else (IMG, TXT)
    score, density = modality_scores(img, txt)
    # image-only, text-only, mixed 1/(1+0.75) = 4/7, dead
    np.testing.assert_allclose(score[:3], [1.0, 0.0, 4 / 7])
    assert np.isnan(score[3])
    np.testing.assert_allclose(density, [0.5, 0.5, 0.875, 0.0])
    summary = modality_summary(img, txt)
    assert summary["modality_image_frac"] == pytest.approx(1 / 3)
    assert summary["modality_text_frac"] == pytest.approx(1 / 3)
    assert summary["modality_bimodal_frac"] == pytest.approx(1 / 3)
    assert summary["modality_mean"] == pytest.approx((1 + 0 + 4 / 7) / 3)


def test_modality_score_does_not_depend_on_modality_counts():
    # the same texts repeated twice: per-modality means are unchanged, so is the score
    a, _ = modality_scores(IMG, TXT)
    b, _ = modality_scores(IMG, np.vstack([TXT, TXT]))
    np.testing.assert_allclose(a, b)
