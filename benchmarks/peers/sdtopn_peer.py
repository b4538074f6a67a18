"""sparse_dot_topn: exact sparse x sparse product with a fused top-n (C++, multi-threaded)."""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer


class SparseDotTopnPeer(Peer):
    name = "sparse_dot_topn"
    requires = ("sparse_dot_topn",)
    notes = "exact"

    def build(self, corpus, workdir):
        from sparse_dot_topn import sp_matmul_topn  # noqa: F401  (import error = not installed)

        self.dt = corpus.docs_scipy().T.tocsr()
        self.dim = corpus.dim

    def _run(self, q, k, threads):
        from sparse_dot_topn import sp_matmul_topn

        c = sp_matmul_topn(q, self.dt, top_n=k, sort=True, n_threads=threads)
        return [c.indices[c.indptr[i]:c.indptr[i + 1]].astype(np.int64) for i in range(c.shape[0])]

    def search_one(self, q_idx, q_val, k, **_):
        import scipy.sparse as sp

        q = sp.csr_matrix((q_val.astype(np.float32), q_idx, [0, len(q_idx)]), shape=(1, self.dim))
        return self._run(q, k, 1)[0]

    def search_batch(self, corpus, rows, k, threads, **_):
        return self._run(corpus.queries_scipy()[rows], k, threads)

    def index_bytes(self, workdir):
        return int(self.dt.data.nbytes + self.dt.indices.nbytes + self.dt.indptr.nbytes)
