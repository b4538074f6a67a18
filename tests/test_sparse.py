"""SparseBatch's own checks: every malformed CSR is refused with a message saying what is wrong."""
import numpy as np
import pytest

from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary


def test_well_formed_batch_keeps_its_rows_in_canonical_dtypes():
    b = SparseBatch([0, 2, 2, 3], [1, 4, 0], [0.5, 1.0, 2.0], 5)
    assert len(b) == 3 and b.dim == 5
    assert (b.indptr.dtype, b.indices.dtype, b.values.dtype) == (np.int64, np.int32, np.float32)
    assert b.indices[b.indptr[2]:b.indptr[3]].tolist() == [0]


@pytest.mark.parametrize("indptr, indices, values, dim, message", [
    ([1, 2], [0], [1.0], 5, "start at 0"),
    ([[0, 1]], [0], [1.0], 5, "1-D"),
    ([0, 2], [0], [1.0], 5, "disagree"),
    ([0, 1], [0, 1], [1.0], 5, "disagree"),
    ([0, 2, 1, 2], [0, 1], [1.0, 1.0], 5, "non-decreasing"),
    ([0, 1], [5], [1.0], 5, r"out of range \[0, 5\)"),
    ([0, 1], [-1], [1.0], 5, "out of range"),
])
def test_malformed_csr_is_refused(indptr, indices, values, dim, message):
    with pytest.raises(ValueError, match=message):
        SparseBatch(np.array(indptr), np.array(indices), np.array(values), dim)


def test_vocabulary_must_name_every_dim():
    with pytest.raises(ValueError, match="vocabulary has 2 entries but dim is 3"):
        SparseBatch([0, 0], [], [], 3, Vocabulary(["a", "b"]))


def test_from_torch_keeps_the_non_zeros_above_the_threshold_row_major():
    torch = pytest.importorskip("torch")
    t = torch.tensor([[0.0, 2.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.25, 0.0]])
    b = SparseBatch.from_torch(t, threshold=0.3)
    assert b.indptr.tolist() == [0, 2, 2, 3] and b.indices.tolist() == [1, 3, 0]
    assert b.values.tolist() == [2.0, 0.5, 3.0] and b.dim == 4
    one = SparseBatch.from_torch(t[2])  # a 1-d tensor is one row
    assert one.indptr.tolist() == [0, 2] and one.indices.tolist() == [0, 2]
