"""scipy exact: CSR query x CSR D^T, then argpartition for the top k (the textbook baseline)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.peers.common import Peer


def topk_rows(scores, k: int) -> list[np.ndarray]:
    """Top-k column numbers of each row of a dense [m, n] score array, best first."""
    out = []
    for row in scores:
        kk = min(k, len(row))
        top = np.argpartition(-row, kk - 1)[:kk]
        top = top[np.argsort(-row[top], kind="stable")]
        out.append(top[row[top] > 0])
    return out


class ScipyPeer(Peer):
    name = "scipy"
    notes = "exact; batches split over a 2-thread pool (scipy's sparse product holds the GIL only in parts)"

    def build(self, corpus, workdir):
        # D^T as CSR so that q @ DT walks only the posting lists of q's terms
        self.dt = corpus.docs_scipy().T.tocsr()
        self.dim = corpus.dim

    def _scores(self, q):
        return (q @ self.dt).toarray()

    def search_one(self, q_idx, q_val, k, **_):
        import scipy.sparse as sp

        q = sp.csr_matrix((q_val, q_idx, [0, len(q_idx)]), shape=(1, self.dim))
        return topk_rows(self._scores(q), k)[0]

    def search_batch(self, corpus, rows, k, threads, **_):
        qs = corpus.queries_scipy()[rows]
        # small chunks: a dense [chunk, N] score block for 1M docs is chunk * 4 MB
        chunks = [qs[s:s + 16] for s in range(0, qs.shape[0], 16)]
        with ThreadPoolExecutor(threads) as pool:
            parts = pool.map(lambda c: topk_rows(self._scores(c), k), chunks)
        return [r for part in parts for r in part]

    def index_bytes(self, workdir):
        return int(self.dt.data.nbytes + self.dt.indices.nbytes + self.dt.indptr.nbytes)
