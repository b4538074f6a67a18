"""The kernels' calling convention: the segment goes in as one SegmentArrays built by field name, the
knobs as one SearchOptions with fixed field types (numba compiles once per type combination)."""
from __future__ import annotations

import numpy as np
import pytest
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


def test_scratch_is_reused_and_left_zero_by_every_search_path():
    """search_batch takes this thread's buffers (kernels.scratch) and must leave them all zeros: a
    dirty buffer would silently add one query's scores to the next one's. Exact and approximate
    searches, dense columns and lists, a mask and an impact floor run one query after another on the
    same buffers; each result must equal the query searched on fresh buffers."""
    n, dim = 3000, 80
    docs = random_batch(n, dim, 0.08, seed=11, zipf=True)  # zipf: dense columns beside lists
    index = InvertedIndex.build(docs, ids_for(n), dense_fraction=0.05)
    assert (index._segments[0].dense_slot >= 0).any()
    queries = random_batch(40, dim, 0.15, seed=12)
    knobs = [{"mode": "exact"}, {"mode": "approx", "query_mass": 0.8, "rerank": 30},
             {"mode": "approx", "impact_floor": 0.3, "rerank": 50}]
    keep = [f"d{i}" for i in range(0, n, 3)]
    for opts in knobs:
        for extra in ({}, {"subset": keep}):
            fresh = []
            for r in range(len(queries)):
                kernels.drop_scratch()
                fresh.append(index.search(queries[r:r + 1], 10, **opts, **extra)[0])
            work = kernels.scratch(dim)
            for r in range(len(queries)):
                assert index.search(queries[r:r + 1], 10, **opts, **extra)[0] == fresh[r], (opts, extra, r)
                assert kernels.scratch(dim) is work  # kept between searches
                assert all(not w.any() for w in work), (opts, extra, r)
    assert len(kernels.scratch(dim + 1)[0]) == dim + 1  # another dim: new buffers


def test_query_scratch_keeps_alive_the_buffers_its_table_points_at():
    """query_scratch hands out a table of addresses: the buffers behind it must live as long as it is kept,
    even when a search of another dim replaces the thread's scratch(dim) (else the next one-query search
    would write into freed memory)."""
    import gc
    import weakref

    kernels.drop_scratch()
    table, outs = kernels.query_scratch(50, 2, 10)
    work = kernels._scratch(50)[0]  # the whole Work: its first three are scratch(50)
    assert isinstance(work, kernels.Work) and all(a is b for a, b in zip(kernels.scratch(50), work[:3], strict=True))
    assert np.array_equal(table, kernels.array_table(work)) and len(outs) == 2
    assert all(len(d) == len(s) == 10 and d.dtype == np.int64 and s.dtype == np.float32 for d, s in outs)
    alive = [weakref.ref(w) for w in work]
    kernels.scratch(60)  # another dim: the thread's scratch is replaced
    del work
    gc.collect()
    assert all(r() is not None for r in alive)
    again, outs2 = kernels.query_scratch(50, 1, 10)
    assert again is table and outs2 is outs  # kept: same dim and k, rows enough
    assert kernels.query_scratch(50, 1, 5)[1][0][0].shape == (5,)  # another k: new result buffers
    assert len(kernels.query_scratch(50, 3, 5)[1]) == 3


def test_the_kernels_view_each_work_buffer_with_its_own_dtype_and_size():
    """The kernels see a thread's Work as a table of addresses (_work names each row's dtype again, beside
    _WORK_LAYOUT that allocates it): every view must be the kept array itself, same address, dtype and
    length, or a kernel would read one buffer as another's type."""
    from numba import njit

    @njit
    def views(table):
        return kernels._work(table)

    kernels.drop_scratch()
    work = kernels._scratch(70)[0]
    seen = views(kernels.scratch_table(70))
    assert len(seen) == len(work) == len(kernels.Work._fields)
    for name, a, b in zip(kernels.Work._fields, work, seen, strict=True):
        assert (b.dtype, b.shape) == (a.dtype, a.shape), name
        assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0], name


def test_kernel_segment_tables_the_arrays_the_kernels_view_and_refuses_others():
    """The one-query kernels see a segment as a table of addresses (kernel_segment) and view each row
    with a fixed dtype (TABLE_LAYOUT): the table must point at the segment's own arrays, the layout must
    be the dtypes a loaded segment is checked against, and an array of another dtype must be refused."""
    from tokenspace.index.inverted import _DTYPES

    index = InvertedIndex.build(random_batch(300, 40, 0.2, seed=5), ids_for(300), approx_top_n=4)
    arrays = index._segments[0].kernel_arrays()
    ks = kernels.kernel_segment(arrays)
    names = [f for f in kernels.SegmentArrays._fields if f != "fwd_indices"]
    assert [np.dtype(_DTYPES[n]) for n in names] == [np.dtype(d) for d, _ in kernels.TABLE_LAYOUT]
    for row, name in zip(ks.table, names):
        a = getattr(arrays, name)
        assert row[0] == a.__array_interface__["data"][0] and tuple(row[1:1 + a.ndim]) == a.shape, name
    assert ks.fwd_indices is arrays.fwd_indices and ks.arrays is arrays
    with pytest.raises(ValueError, match="df must be 1-D int32, got 1-D int64"):
        kernels.kernel_segment(arrays._replace(df=arrays.df.astype(np.int64)))
    with pytest.raises(ValueError, match="C-contiguous"):
        kernels.array_table([np.zeros((4, 4))[:, 1]])
