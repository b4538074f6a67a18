"""FAISS flat inner product on the 512-d dense twin (dense_docs.npy / dense_q.npy), via DenseIndex.

Its recall@10 is against FAISS's own exact answer on the dense twin (a different task than the
sparse one), so it is always 1.0 for an exact flat index; the row is there for speed.
"""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer, int_ids


class FaissPeer(Peer):
    name = "faiss-flat-dense"
    requires = ("faiss",)
    notes = "dense 512-d twin, exact; recall is vs its own exact answer"
    dense = True

    def prepare(self, corpus):
        self.docs = np.ascontiguousarray(corpus.dense_docs())  # in RAM before the RSS baseline
        self.queries = corpus.dense_queries()

    def exact_gt(self, corpus, k):
        """numpy's exact top-k on the dense twin (cached next to the corpus)."""
        path = corpus.data_dir / f"gt_dense_{corpus.n_docs}_top{k}.npy"
        if path.exists():
            return np.load(path)
        gt = np.zeros((len(self.queries), k), np.int64)
        for s in range(0, len(self.queries), 100):
            scores = self.queries[s:s + 100] @ self.docs.T
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(scores, top, 1), axis=1, kind="stable")
            gt[s:s + 100] = np.take_along_axis(top, order, 1)
        np.save(path, gt)
        return gt

    def build(self, corpus, workdir):
        from tokenspace.index.dense import DenseIndex

        self.index = DenseIndex.build(self.docs, [str(i) for i in range(len(self.docs))])
        self.index.save(workdir / "dense")

    def _ids(self, hits):
        return int_ids(hits.ids)

    def search_one(self, q_idx, q_val, k, qrow=None, **_):
        return self._ids(self.index.search(self.queries[qrow][None], k, threads=1)[0])

    def search_batch(self, corpus, rows, k, threads, **_):
        return [self._ids(h) for h in self.index.search(self.queries[rows], k, threads=threads)]
