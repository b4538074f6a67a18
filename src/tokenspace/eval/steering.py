"""The feature-steering protocol of Sparse CLIP (Sec. 4, Fig. 8b) read out on zero-shot classification.

Steering itself (``top_features``, ``steer_features``) is explain/steer.py's; this is its measurement:
the paper feeds the steered vector to a VLM, and with no VLM here ``steering_sweep`` counts how often the
zero-shot prediction becomes the alternative label (docs/fidelity.md names the deviation). It lives in
eval, not beside steering, so that a search session, which steers queries, does not import the
evaluation package (scipy.sparse and every evaluator: ~0.2 s of a one-query command's start-up).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.eval.zeroshot import true_class_ranks
from tokenspace.explain.steer import steer_features, top_features


def alternative_labels(labels, n_classes: int, seed: int = 0) -> np.ndarray:
    """One alternative label per image, uniform over the other classes (fixed by ``seed``)."""
    labels = np.asarray(labels, np.int64)
    if n_classes < 2:
        raise ValueError("steering needs at least two classes")
    shift = np.random.default_rng(seed).integers(1, n_classes, len(labels))
    return (labels + shift) % n_classes


def steering_sweep(image_acts: np.ndarray, labels, concept_acts: np.ndarray, classifier,
                   ks: Sequence[int] = (1, 2, 4, 8), strengths: Sequence[float | None] = (None, 1.0, 2.0),
                   seed: int = 0) -> list[dict]:
    """The steering protocol on zero-shot classification, one row per (K, SS).

    ``image_acts`` [N, F] raw image activations, ``labels`` [N] true classes, ``concept_acts`` [C, F]
    raw text activations of each class name (which features to steer), ``classifier`` [C, F] class
    vectors (the prompt ensemble). Steered images are scored by cosine, as the model scores; ties count
    against a class. SS ``None`` = suppress only. Per row: ``flip_rate`` (top-1 is now the alternative),
    ``true_rate`` (top-1 is still the true label), and the same two rates before steering."""
    labels = np.asarray(labels, np.int64)
    alt = alternative_labels(labels, len(concept_acts), seed)

    def rate(x, target):
        return float(np.mean(true_class_ranks(x, classifier, target, metric="cosine") == 0))

    before = {"true_before": rate(image_acts, labels), "flip_before": rate(image_acts, alt)}
    rows = []
    for k in ks:
        ids = top_features(concept_acts, k)
        for ss in strengths:
            steered = steer_features(image_acts, ids[labels], None if ss is None else ids[alt],
                                     0.0 if ss is None else ss)
            rows.append({"k": int(k), "strength": ss, "flip_rate": rate(steered, alt),
                         "true_rate": rate(steered, labels), **before})
    return rows
