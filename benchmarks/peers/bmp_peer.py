"""BMP (block-max pruning, Mallia, Suel and Tonellotto, SIGIR 2024; pip ``bmp``): documents in blocks of
``bsize`` consecutive ids, each block's per-term maximum kept in a forward block index; blocks visited
by their upper bound and skipped once it falls under the top-k threshold.

Knobs, as its authors describe them: build ``bsize`` (32 / 64 / 128; the paper's best is 32 on MS MARCO
with learned-sparse models); search ``alpha`` (a block is skipped when its bound is under alpha x the
threshold: 1.0 is safe) and ``beta`` (keeps the heaviest beta of the query's weight: 1.0 keeps all).

BMP indexes integer impacts: document weights are quantised here to 8 bits (round(w x 255 / max w), the
scale of its CIFF inputs and of its PyTerrier indexer's default), so even alpha = beta = 1 is exact only
on integer weights (it quantises the query too: its scores come back as integers), not on the float
vectors the recall is measured against. Its batch call reads
queries from a file, so batches run ``Searcher.search`` from a thread pool.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.peers.common import Peer

BUILD = {"bsize": 32, "compress_range": False, "bits": 8}


def sweep_settings() -> list[tuple[str, dict]]:
    return [(f"alpha={a} beta={b}", {"alpha": a, "beta": b})
            for a in (1.0, 0.9, 0.8, 0.7, 0.6) for b in (1.0, 0.9, 0.8)]


class BmpPeer(Peer):
    name = "bmp"
    requires = ("bmp",)
    build_defaults = BUILD
    notes = "BMP (pip bmp); document weights quantised to 8 bits; batches: thread pool over Searcher.search"

    def settings(self):
        return self._settings or sweep_settings()

    def build(self, corpus, workdir):
        import bmp

        opts = self.build_options
        self.terms = [str(t) for t in range(corpus.dim)]  # BMP keys terms by string
        data = np.asarray(corpus.d_data, np.float32)
        scale = (2 ** int(opts["bits"]) - 1) / float(data.max())
        codes = np.maximum(1, np.rint(data * scale)).astype(np.int64).tolist()  # a stored term keeps >= 1
        indices = np.asarray(corpus.d_indices).tolist()
        indptr = np.asarray(corpus.d_indptr).tolist()
        self.path = workdir / "index.bmp"
        indexer = bmp.Indexer(str(self.path), bsize=int(opts["bsize"]), compress_range=bool(opts["compress_range"]))
        terms = self.terms
        for i in range(corpus.n_docs):
            a, b = indptr[i], indptr[i + 1]
            indexer.add_document(str(i), {terms[t]: c for t, c in zip(indices[a:b], codes[a:b])})
        indexer.finish()
        self.searcher = bmp.Searcher(str(self.path))
        self.notes += "; " + ", ".join(f"{k}={v}" for k, v in opts.items())

    def _search(self, q_idx, q_val, k, alpha, beta):
        terms = self.terms
        q = {terms[t]: float(v) for t, v in zip(q_idx.tolist(), q_val.tolist())}
        docnos, _ = self.searcher.search(q, k=k, alpha=float(alpha), beta=float(beta))
        return np.array([int(d) for d in docnos], np.int64)

    def search_one(self, q_idx, q_val, k, qrow=None, alpha=1.0, beta=1.0):
        return self._search(np.asarray(q_idx), np.asarray(q_val), k, alpha, beta)

    def search_batch(self, corpus, rows, k, threads, alpha=1.0, beta=1.0):
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda r: self._search(*corpus.query(int(r)), k, alpha, beta), rows))
