"""Linear probe: scikit-learn logistic regression on frozen features, sparse or dense.

Following CLIP / clip_benchmark, the regularisation C is chosen on a validation split carved from
the training features, then the model is refit on all training features and scored on the test set.
Sparse features go to scikit-learn as CSR (never densified): STAIR's 30k-dim vectors stay cheap.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.eval.scoring import Embeddings, as_matrix, l2_normalize, n_rows

DEFAULT_CS = (0.01, 0.1, 1.0, 10.0)


def _fit(x, y, c: float, max_iter: int, seed: int):
    from sklearn.linear_model import LogisticRegression  # start-up: scikit-learn is slow to import

    # lbfgs handles CSR input and multinomial loss; a fixed seed keeps reruns identical
    clf = LogisticRegression(C=c, max_iter=max_iter, random_state=seed)
    clf.fit(x, y)
    return clf


def _split(y: np.ndarray, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified-ish split: every class keeps at least one training example."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        n_val = round(len(idx) * val_fraction) if len(idx) > 1 else 0
        n_val = min(n_val, len(idx) - 1)
        val.extend(idx[:n_val])
        train.extend(idx[n_val:])
    return np.sort(np.array(train, np.int64)), np.sort(np.array(val, np.int64))


def linear_probe(train_x: Embeddings, train_y, test_x: Embeddings, test_y, cs: Sequence[float] = DEFAULT_CS,
                 val_fraction: float = 0.2, normalize: bool = True, max_iter: int = 1000,
                 seed: int = 0) -> dict[str, float]:
    """``lp_acc1`` on the test set, plus the chosen ``lp_C`` and its ``lp_val_acc1``."""
    train_y, test_y = np.asarray(train_y), np.asarray(test_y)
    if n_rows(train_x) != len(train_y) or n_rows(test_x) != len(test_y):
        raise ValueError("features and labels disagree in length")
    if normalize:  # unit rows make one C grid fit models with very different activation scales
        train_x, test_x = l2_normalize(train_x), l2_normalize(test_x)
    xtr, xte = as_matrix(train_x), as_matrix(test_x)
    tr, va = _split(train_y, val_fraction, seed)
    best_c, best_val = cs[0], -1.0
    if len(va) and len(cs) > 1:
        for c in cs:
            acc = float(np.mean(_fit(xtr[tr], train_y[tr], c, max_iter, seed).predict(xtr[va]) == train_y[va]))
            if acc > best_val:  # strict: on ties keep the smaller C (stronger regularisation)
                best_c, best_val = c, acc
    clf = _fit(xtr, train_y, best_c, max_iter, seed)
    pred = clf.predict(xte)
    return {"lp_acc1": float(np.mean(pred == test_y)), "lp_C": float(best_c), "lp_val_acc1": float(best_val)}


class LinearProbeEvaluator:
    """Binds train/test labels; call with the model's train and test features."""

    def __init__(self, train_labels, test_labels, cs: Sequence[float] = DEFAULT_CS, val_fraction: float = 0.2,
                 normalize: bool = True, seed: int = 0, primary_metric: str = "lp_acc1"):
        self.train_labels = np.asarray(train_labels)
        self.test_labels = np.asarray(test_labels)
        self.cs = tuple(cs)
        self.val_fraction = val_fraction
        self.normalize = normalize
        self.seed = seed
        self.primary_metric = primary_metric

    def __call__(self, train_features: Embeddings, test_features: Embeddings) -> dict[str, float]:
        return linear_probe(train_features, self.train_labels, test_features, self.test_labels, self.cs,
                            self.val_fraction, self.normalize, seed=self.seed)
