"""Linear probe on separable sparse and dense features."""
import numpy as np
import pytest

from tokenspace.eval.probe import LinearProbeEvaluator, _split
from tokenspace.sparse import SparseBatch


def _data(rng, n):
    # class c lights up dims 2c and 2c+1 (plus noise): linearly separable by construction
    y = rng.integers(0, 3, n)
    x = rng.random((n, 6)) * 0.1
    x[np.arange(n), 2 * y] += 1.0
    x[np.arange(n), 2 * y + 1] += rng.random(n)
    return x, y


@pytest.mark.parametrize("sparse", [False, True])
def test_separable_features_are_learned(sparse):
    rng = np.random.default_rng(0)
    (xtr, ytr), (xte, yte) = _data(rng, 60), _data(rng, 30)
    if sparse:
        xtr, xte = SparseBatch.from_dense(xtr), SparseBatch.from_dense(xte)
    ev = LinearProbeEvaluator(ytr, yte, cs=(0.1, 10.0))
    out = ev(xtr, xte)
    assert out["lp_acc1"] == 1.0
    assert out["lp_C"] in (0.1, 10.0)
    assert ev.primary_metric == "lp_acc1"


def test_split_keeps_every_class_in_training():
    y = np.array([0, 0, 0, 0, 0, 1])  # class 1 has a single example: it must stay in training
    tr, va = _split(y, 0.4, seed=0)
    assert 5 in tr and len(va) == 2 and set(tr) | set(va) == set(range(6))
