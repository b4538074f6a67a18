"""Milvus Lite 2.5.1 (the real C++ Milvus server, in-process) through tokenspace's MilvusIndex.

The server is a separate process whose thread pool this harness cannot pin, so its "1 thread" rows
mean one client thread issuing one query at a time.
"""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer, int_ids

CHUNK = 50_000  # rows converted to SparseBatch per add(): bounds the Python dicts alive at once


class MilvusPeer(Peer):
    name = "milvus-lite"
    requires = ("pymilvus", "milvus_lite")
    notes = "exact (drop_ratio 0); server threads not pinned"

    def build(self, corpus, workdir):
        from tokenspace.index.milvus import MilvusIndex
        from tokenspace.sparse import SparseBatch

        def part(s, e):
            a, b = int(corpus.d_indptr[s]), int(corpus.d_indptr[e])
            return SparseBatch(corpus.d_indptr[s:e + 1] - a, corpus.d_indices[a:b], corpus.d_data[a:b], corpus.dim)

        n = corpus.n_docs
        first = min(CHUNK, n)
        self.index = MilvusIndex.build(part(0, first), [str(i) for i in range(first)],
                                       uri=str(workdir / "milvus.db"), collection="bench", overwrite=True)
        for s in range(first, n, CHUNK):
            e = min(s + CHUNK, n)
            self.index.add(part(s, e), [str(i) for i in range(s, e)], check_existing=False)
        self.index.save(workdir / "bench.milvus.json")  # flush: the index is built and on disk
        self.dim = corpus.dim
        # warm: Milvus loads segments lazily on the first search
        self.search_one(np.array([0], np.int32), np.array([1.0], np.float32), 10)

    def _q(self, idx, val):
        from tokenspace.sparse import SparseBatch

        return SparseBatch(np.array([0, len(idx)]), idx, val, self.dim)

    def search_one(self, q_idx, q_val, k, **_):
        hits = self.index.search(self._q(q_idx, q_val), k)[0]
        return int_ids(hits.ids)

    def search_batch(self, corpus, rows, k, threads, **_):
        from tokenspace.sparse import SparseBatch

        qs = SparseBatch.from_scipy(corpus.queries_scipy()[rows])
        return [int_ids(hits.ids) for hits in self.index.search(qs, k)]

    def close(self):
        self.index.close()
