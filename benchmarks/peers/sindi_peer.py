"""SINDI (VSAG's sparse inverted index, pip ``pyvsag``, ``Index("sindi", ...)``): window-partitioned term
lists scored into a window-sized dense array, documents pruned at build time, an optional forward store
to rescore the best candidates exactly.

Knobs, as its authors describe them (VSAG's SINDI docs and the paper, arXiv 2509.08395):
build: ``doc_prune_ratio`` (each document keeps its heaviest terms up to 1 - ratio of its weight mass;
0 keeps all), ``window_size`` (documents per window, VSAG accepts 10,000-60,000), ``use_reorder`` (keep
the full vectors to rescore candidates; needed for ``n_candidate``), ``quantization_type`` (the posting
values: fp32 / fp16 / sq8, passed through to VSAG when given); search: ``query_prune_ratio`` (the same mass
cut on the query), ``term_prune_ratio`` (drops the tail of each term list), ``n_candidate`` (candidates
rescored with the forward store; 0 = none).

Notes from measuring it: pyvsag 0.18.5 has no batch call (its Index has build, knn_search, range_search,
save and load; knn_search takes one query), so a batch on T threads runs in T forked worker processes
that share the built index copy-on-write, each searching a contiguous share of the queries one at a
time: all cores whether or not knn_search holds the GIL (``batch="threads"``: a thread pool instead).
``knn_search`` returns (ids, distances) with distance = -inner product.
"""
from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.peers.common import Peer

# window 50,000 (VSAG's range is 10,000-60,000; the paper finds one window's score array in L2 best),
# no pruning, no forward store: the exhaustive setting
BUILD = {"doc_prune_ratio": 0.0, "window_size": 50_000, "use_reorder": False}


def search_params(query_prune_ratio: float = 0.0, n_candidate: int = 0, term_prune_ratio: float = 0.0) -> str:
    return json.dumps({"sindi": {"query_prune_ratio": float(query_prune_ratio), "n_candidate": int(n_candidate),
                                 "term_prune_ratio": float(term_prune_ratio)}})


def sweep_settings(reorder: bool) -> list[tuple[str, dict]]:
    """The search grid: query mass cuts, and with a forward store the rescoring depth."""
    out = []
    for qp in (0.0, 0.1, 0.2, 0.3):
        for nc in ((0, 50, 100, 200, 500) if reorder else (0,)):
            out.append((f"qp={qp} nc={nc}", {"query_prune_ratio": qp, "n_candidate": nc}))
    return out


class SindiPeer(Peer):
    name = "sindi"
    requires = ("pyvsag",)
    build_defaults = BUILD
    notes = "SINDI (pyvsag); exact only with doc_prune_ratio 0, query_prune_ratio 0, fp32; batches: worker processes"

    def __init__(self, build: dict | None = None, settings: list | None = None, batch: str = "processes"):
        # batch: how search_batch uses several cores, "processes" (forked workers sharing the index) or
        # "threads" (a thread pool calling knn_search)
        if batch not in ("processes", "threads"):
            raise ValueError(f"batch must be 'processes' or 'threads', got {batch!r}")
        super().__init__(build, settings)
        self.batch = batch
        self._params: dict[tuple, str] = {}
        self._queries: list | None = None  # each query as knn_search takes it (prepare_queries)
        self._pool = None  # the worker processes of search_batch, started on its first call

    def settings(self):
        if self._settings:
            return self._settings
        if not self.build_options["use_reorder"] and not self.build_options["doc_prune_ratio"]:
            return [("exhaustive", {})] + sweep_settings(False)[1:]
        return sweep_settings(bool(self.build_options["use_reorder"]))

    def build(self, corpus, workdir):
        import pyvsag

        pyvsag.set_logger_off()
        opts = dict(self.build_options)
        params = {"dim": corpus.dim, "dtype": "sparse", "metric_type": "ip",
                  "index_param": {"term_id_limit": int(corpus.dim), **opts}}
        self.index = pyvsag.Index("sindi", json.dumps(params))
        self.index.build(np.asarray(corpus.d_indptr, np.uint32), np.asarray(corpus.d_indices, np.uint32),
                         np.asarray(corpus.d_data, np.float32), np.arange(corpus.n_docs, dtype=np.int64))
        self.index.save(str(workdir / "sindi.index"))
        self.notes += "; " + ", ".join(f"{k}={v}" for k, v in opts.items())

    def _param(self, setting: dict) -> str:
        key = tuple(sorted(setting.items()))
        if key not in self._params:
            self._params[key] = search_params(**setting)
        return self._params[key]

    def prepare_queries(self, corpus):
        """Each query as the uint32 / float32 arrays knn_search takes, made before the timer."""
        self._queries = [(np.array([0, b - a], np.uint32), np.asarray(corpus.q_indices[a:b], np.uint32),
                          np.asarray(corpus.q_data[a:b], np.float32))
                         for a, b in zip(corpus.q_indptr[:-1].tolist(), corpus.q_indptr[1:].tolist())]

    def _search(self, q_idx, q_val, k, params):
        ids, _ = self.index.knn_search(np.array([0, len(q_idx)], np.uint32), np.asarray(q_idx, np.uint32),
                                       np.asarray(q_val, np.float32), k, params)
        ids = np.asarray(ids, np.int64).ravel()
        return ids[ids >= 0]

    def search_one(self, q_idx, q_val, k, qrow=None, **setting):
        if qrow is not None and self._queries is not None:
            ids, _ = self.index.knn_search(*self._queries[qrow], k, self._param(setting))
            ids = np.asarray(ids, np.int64).ravel()
            return ids[ids >= 0]
        return self._search(q_idx, q_val, k, self._param(setting))

    def search_batch(self, corpus, rows, k, threads, **setting):
        params = self._param(setting)
        if self.batch == "threads" or threads == 1:
            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(lambda r: self._search(*corpus.query(int(r)), k, params), rows))
        if self._pool is None or self._pool[0] != threads:
            self.close()
            global _WORKER
            _WORKER = self  # what the forked workers search with (the built index, the prepared queries)
            if self._queries is None:
                self.prepare_queries(corpus)
            self._pool = (threads, multiprocessing.get_context("fork").Pool(threads))
        shares = [s for s in np.array_split(np.asarray(rows, np.int64), threads) if len(s)]
        parts = self._pool[1].map(_search_share, [(s.tolist(), k, params) for s in shares])
        return [ids for part in parts for ids in part]

    def close(self):
        if self._pool is not None:
            self._pool[1].terminate()
            self._pool = None


_WORKER: SindiPeer | None = None  # set before the workers fork: each child searches its copy


def _search_share(job) -> list[np.ndarray]:
    rows, k, params = job
    out = []
    for r in rows:
        ids, _ = _WORKER.index.knn_search(*_WORKER._queries[r], k, params)
        ids = np.asarray(ids, np.int64).ravel()
        out.append(ids[ids >= 0])
    return out
