"""tokenspace's embedded InvertedIndex: the exact setting and approximate settings (VisualSparta-style
index-time top-n terms per document and query-time cuts; see tokenspace.index.inverted)."""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer


class TokenspacePeer(Peer):
    name = "tokenspace"
    notes = "InvertedIndex (numba); exact = MaxScore/block-max pruning, same answers as scipy"

    def settings(self):
        return [("exact", {})]

    def build(self, corpus, workdir):
        from tokenspace.index import InvertedIndex
        from tokenspace.sparse import SparseBatch

        batch = SparseBatch(corpus.d_indptr, corpus.d_indices, corpus.d_data, corpus.dim)
        self.index = InvertedIndex.build(batch, [str(i) for i in range(corpus.n_docs)])
        self.index.save(workdir / "inverted")
        self.dim = corpus.dim

    def _ids(self, hits):
        return np.array([int(h.id) for h in hits], np.int64)

    def search_one(self, q_idx, q_val, k, **setting):
        from tokenspace.sparse import SparseBatch

        q = SparseBatch(np.array([0, len(q_idx)]), q_idx, q_val, self.dim)
        return self._ids(self.index.search(q, k, **setting)[0])

    def search_batch(self, corpus, rows, k, threads, **setting):
        from tokenspace.sparse import SparseBatch

        qs = SparseBatch.from_scipy(corpus.queries_scipy()[rows])
        return [self._ids(h) for h in self.index.search(qs, k, **setting)]
