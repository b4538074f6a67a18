"""nnz per image/text and FLOPs = sum_d p_img(d) * p_txt(d), by hand."""
import numpy as np
import pytest

from tokenspace.eval.sparsity import SparsityEvaluator, flops
from tokenspace.sparse import SparseBatch

IMAGES = np.array([[1.0, 0, 2], [0, 0, 3]])                  # nnz 2, 1 -> 1.5; p_img = [1/2, 0, 1]
TEXTS = np.array([[1.0, 1, 0], [0, 1, 0], [0, 0, 5], [0, 0, 0]])  # nnz 2,1,1,0 -> 1; p_txt = [1/4, 1/2, 1/4]


@pytest.mark.parametrize("sparse", [False, True])
def test_sparsity_by_hand(sparse):
    img, txt = (SparseBatch.from_dense(IMAGES), SparseBatch.from_dense(TEXTS)) if sparse else (IMAGES, TEXTS)
    out = SparsityEvaluator()(img, txt)
    assert out["nnz_image"] == pytest.approx(1.5)
    assert out["nnz_text"] == pytest.approx(1.0)
    assert out["flops"] == pytest.approx(0.5 * 0.25 + 0 * 0.5 + 1 * 0.25)  # 0.375


def test_flops_of_a_batch_with_itself_matches_sparsebatch_stats():
    b = SparseBatch.from_dense(TEXTS)
    assert flops(b, b) == pytest.approx(b.stats()["flops"])
