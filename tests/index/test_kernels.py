"""The kernels' calling convention: the segment goes in as one SegmentArrays built by field name, the
knobs as one SearchOptions with fixed field types (numba compiles once per type combination)."""
from __future__ import annotations

import numpy as np
from _inverted_data import ids_for, random_batch

from tokenspace.index import InvertedIndex, kernels


def test_kernel_arrays_are_the_segment_arrays_of_the_same_name():
    index = InvertedIndex.build(random_batch(300, 40, 0.2, seed=5), ids_for(300), approx_top_n=4)
    seg = index._segments[0]
    arrays = seg.kernel_arrays()
    assert isinstance(arrays, kernels.SegmentArrays)
    for name in kernels.SegmentArrays._fields:
        assert getattr(arrays, name) is seg.arrays[name], name
    assert seg.kernel_arrays() is arrays  # built once per segment


def test_search_options_have_fixed_types():
    mask = np.ones(5, np.uint8)
    a = kernels.search_options(np.int64(3), np.int32(15), np.bool_(False), 1, np.float32(0.9), mask)
    b = kernels.search_options(3, 15, False, 1.0, 0.9)
    for x, y in zip(a, b):
        assert type(x) is type(y)
    assert a.has_mask and not b.has_mask and b.mask.dtype == np.uint8
    assert (a.k, a.rerank, a.exact, a.alpha) == (3, 15, False, 1.0)
