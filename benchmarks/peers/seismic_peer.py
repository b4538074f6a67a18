"""Seismic (pyseismic-lsr): approximate learned-sparse retrieval with clustered, summarised postings.

Notes from measuring it: ``batch_search`` ignores its ``num_threads`` argument, so the worker sets
RAYON_NUM_THREADS before the library is imported (the pool size is fixed at first use); results of a
batch come back out of query order, so they are put back in order by query id. A single ``search``
call runs on the calling thread.
"""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer

# Build: the library's defaults except n_postings, which scales with the collection (Seismic's papers
# use ~4,000 per token at 8.8M MS MARCO passages; our Zipf corpus has much longer head lists).
BUILD = {"centroid_fraction": 0.1, "min_cluster_size": 2, "summary_energy": 0.4, "max_fraction": 1.5, "doc_cut": 15}


class SeismicPeer(Peer):
    name = "seismic"
    requires = ("seismic",)
    notes = "approximate; RAYON_NUM_THREADS for batches (num_threads is ignored)"

    # build: build_from_dataset keywords over BUILD (n_postings, nknn, ...), merged at build time; settings:
    # [(label, {query_cut, heap_factor, n_knn, sorted})] to measure instead of the two below (real_engines.py)

    def settings(self):
        if self._settings:
            return self._settings
        return [("heap_factor=0.9", {"query_cut": 30, "heap_factor": 0.9}),
                ("heap_factor=0.7", {"query_cut": 30, "heap_factor": 0.7})]

    def build(self, corpus, workdir):
        import seismic

        self.seismic = seismic
        self.string = seismic.get_seismic_string()
        n = corpus.n_docs
        opts = dict(self.build_options)
        self.n_postings = int(opts.pop("n_postings", max(1000, min(6000, n // 200))))
        ds = seismic.SeismicDataset(dim=corpus.dim)
        step = 100_000
        for s in range(0, n, step):
            e = min(s + step, n)
            a, b = int(corpus.d_indptr[s]), int(corpus.d_indptr[e])
            ds.add_documents_by_id([str(i) for i in range(s, e)],
                                   np.asarray(corpus.d_indices[a:b], np.int64),
                                   np.asarray(corpus.d_data[a:b], np.float32),
                                   np.asarray(corpus.d_indptr[s:e + 1] - a, np.int64))
        self.index = seismic.SeismicIndex.build_from_dataset(ds, n_postings=self.n_postings, **{**BUILD, **opts})
        del ds
        self.index.save(str(workdir / "seismic"))
        self.notes += f"; n_postings={self.n_postings}" + "".join(f", {k}={v}" for k, v in opts.items())

    def _comps(self, idx):
        return np.array([str(int(i)) for i in idx], dtype=self.string)

    def search_one(self, q_idx, q_val, k, query_cut=30, heap_factor=0.9, qrow=None, **extra):
        # extra: n_knn / sorted, passed only when a setting names them (older pyseismic lacks them)
        res = self.index.search("q", self._comps(q_idx), np.asarray(q_val, np.float32), k=k,
                                query_cut=query_cut, heap_factor=heap_factor, **extra)
        return np.array([int(r[2]) for r in res], np.int64)

    def search_batch(self, corpus, rows, k, threads, query_cut=30, heap_factor=0.9, **extra):
        qids = np.array([str(int(r)) for r in rows], dtype=self.string)
        comps, vals = [], []
        for r in rows:
            idx, val = corpus.query(int(r))
            comps.append(self._comps(idx))
            vals.append(np.asarray(val, np.float32))
        res = self.index.batch_search(qids, comps, vals, k=k, query_cut=query_cut, heap_factor=heap_factor,
                                      num_threads=threads, **extra)
        by_query = {}
        for hits in res:  # batches come back out of query order: key them by the query id they carry
            if hits:
                by_query[hits[0][0]] = np.array([int(h[2]) for h in hits], np.int64)
        return [by_query.get(str(int(r)), np.zeros(0, np.int64)) for r in rows]
