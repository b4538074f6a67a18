"""tokenspace's embedded InvertedIndex: the exact setting and approximate settings (VisualSparta-style
index-time top-n terms per document and query-time cuts; see tokenspace.index.inverted)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from benchmarks.peers.common import Peer, int_ids


class TokenspacePeer(Peer):
    name = "tokenspace"
    notes = ("InvertedIndex (numba): exact = uint8 codes scored in float32 with a proven error window, "
             "then exact rescoring; approx = 16-bit integer first pass, the rerank best rescored exactly; "
             "approx knobs alpha (block skipping) and query_mass (query term cut)")

    def __init__(self, build: dict | None = None, settings: list | None = None, api: str = "search"):
        # build: InvertedIndex.build keywords (approx_top_n, dense_fraction); settings: [(label, search
        # keywords)] to measure instead of the four below (real_engines.py's sweeps); api: how one query
        # is searched, "search" (the call a user makes: a one-row SparseBatch in, Hits out) or
        # "arrays" (search_arrays: dims and weights in, ids and scores out), reported beside it
        if api not in ("arrays", "search"):
            raise ValueError(f"api must be 'arrays' or 'search', got {api!r}")
        super().__init__(build, settings)
        self.api = api
        self._ones: list | None = None  # each query's one-row SparseBatch (prepare_queries)
        self._queries = None  # every query as one SparseBatch

    def settings(self):
        if self._settings:
            return self._settings
        # approx: APPROX_DEFAULTS (query_mass 0.9, alpha 0.9, rerank 5k), one step safer and one more
        # aggressive on the query cut (docs/benchmarks.md). On bench-100K alpha 0.5 + query_mass 0.9
        # fell to recall 0.41 without being faster, so it is not measured.
        return [("exact", {"mode": "exact"}),
                ("approx (defaults)", {"mode": "approx"}),
                ("approx query_mass=0.95", {"mode": "approx", "query_mass": 0.95}),
                ("approx query_mass=0.85", {"mode": "approx", "query_mass": 0.85})]

    def load(self):
        """numba loads each compiled kernel on its first call (0.35-0.45 s in a fresh process, importing
        numba included; SINDI's import takes 0.03 s): a build of 16 documents does that before the timer,
        as a compiled library is loaded at import."""
        from tokenspace.index import InvertedIndex
        from tokenspace.sparse import SparseBatch

        rows = SparseBatch.from_dicts([{t: 1.0 + (t * d) % 7 for t in range(d % 5, 40, 3)} for d in range(16)], dim=64)
        with tempfile.TemporaryDirectory() as tmp:
            InvertedIndex.build(rows, [str(i) for i in range(16)], **self.build_options).save(Path(tmp) / "warm")

    def build(self, corpus, workdir):
        from tokenspace.index import InvertedIndex
        from tokenspace.sparse import SparseBatch

        batch = SparseBatch(corpus.d_indptr, corpus.d_indices, corpus.d_data, corpus.dim)
        self.index = InvertedIndex.build(batch, list(map(str, range(corpus.n_docs))), **self.build_options)
        self.index.save(workdir / "inverted")
        self.dim = corpus.dim

    def prepare_queries(self, corpus):
        """Each query as the one-row SparseBatch a model's encoder returns, made before the timer (a
        SparseBatch checks its arrays as it is made: ~5 us a query, a cost of where the query comes
        from, not of the search)."""
        from tokenspace.sparse import SparseBatch

        self._queries = SparseBatch(np.asarray(corpus.q_indptr), np.asarray(corpus.q_indices),
                                    np.asarray(corpus.q_data), corpus.dim)
        self._ones = [SparseBatch(np.array([0, b - a]), self._queries.indices[a:b], self._queries.values[a:b],
                                  corpus.dim) for a, b in zip(corpus.q_indptr[:-1].tolist(), corpus.q_indptr[1:].tolist())]

    def search_one(self, q_idx, q_val, k, qrow=None, **setting):
        if self.api == "search":
            from tokenspace.sparse import SparseBatch

            q = self._ones[qrow] if qrow is not None and self._ones is not None else \
                SparseBatch(np.array([0, len(q_idx)]), q_idx, q_val, self.dim)
            return int_ids(self.index.search(q, k, **setting)[0].ids)
        ids, _ = self.index.search_arrays(q_idx, q_val, k, **setting)
        return int_ids(ids)

    def search_batch(self, corpus, rows, k, threads, **setting):
        """search() over these query rows on ``threads`` threads (its own batch call: the kernels release
        the GIL)."""
        from tokenspace.sparse import SparseBatch

        rows = np.asarray(rows)
        if self._queries is None:
            qs = SparseBatch.from_scipy(corpus.queries_scipy()[rows])
        elif len(rows) and np.array_equal(rows, np.arange(rows[0], rows[0] + len(rows))):
            qs = self._queries[int(rows[0]):int(rows[0]) + len(rows)]  # a run of rows: a slice of the batch
        else:
            qs = self._queries[rows]
        return [int_ids(h.ids) for h in self.index.search(qs, k, threads=threads, **setting)]
