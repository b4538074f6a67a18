"""similarity() agrees across sparse/dense inputs; chunked_topk equals a brute-force stable argsort."""
import numpy as np
import pytest

from tokenspace.eval.scoring import chunked_topk, l2_normalize, similarity
from tokenspace.sparse import SparseBatch


def test_dot_and_cosine_by_hand():
    a = np.array([[3.0, 4.0, 0.0]])  # norm 5
    b = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    # dot: [3*1, 0]; cosine: [3/5 / 1, 0]
    np.testing.assert_allclose(similarity(a, b), [[3.0, 0.0]])
    np.testing.assert_allclose(similarity(a, b, "cosine"), [[0.6, 0.0]], rtol=1e-6)


def test_sparse_and_dense_inputs_agree():
    rng = np.random.default_rng(0)
    a = rng.random((7, 12)) * (rng.random((7, 12)) > 0.6)
    b = rng.random((5, 12)) * (rng.random((5, 12)) > 0.6)
    for metric in ("dot", "cosine"):
        want = similarity(a, b, metric)
        for x in (a, SparseBatch.from_dense(a)):
            for y in (b, SparseBatch.from_dense(b)):
                np.testing.assert_allclose(similarity(x, y, metric), want, rtol=1e-5, atol=1e-6)


def test_l2_normalize_keeps_sparse_and_zero_rows():
    x = SparseBatch.from_dense([[3.0, 0.0, 4.0], [0.0, 0.0, 0.0]])
    n = l2_normalize(x)
    assert isinstance(n, SparseBatch)
    np.testing.assert_allclose(n.to_dense(), [[0.6, 0.0, 0.8], [0.0, 0.0, 0.0]], rtol=1e-6)


def test_dimension_mismatch_is_an_error():
    with pytest.raises(ValueError, match="dimension"):
        similarity(np.ones((1, 3)), np.ones((1, 4)))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_chunked_topk_matches_brute_force(sparse, k):
    rng = np.random.default_rng(1)
    # small integer weights: many exact ties, which is where a careless top-k differs from argsort
    q = rng.integers(0, 3, (23, 6)).astype(float)
    d = rng.integers(0, 3, (31, 6)).astype(float)
    full = q @ d.T
    want_i = np.argsort(-full, axis=1, kind="stable")[:, :k]
    qq, dd = (SparseBatch.from_dense(q), SparseBatch.from_dense(d)) if sparse else (q, d)
    s, i = chunked_topk(qq, dd, k, block_rows=4)  # 4-row blocks: exercises the chunking
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_allclose(s, np.take_along_axis(full, want_i, axis=1))
