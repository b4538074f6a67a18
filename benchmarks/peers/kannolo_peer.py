"""kANNolo (Delfino, Ermakova, Nardini, Rulli, Tonellotto, Venturini; pip ``kannolo``): an HNSW graph over
the sparse vectors, scored by dot product.

Knobs, as its authors describe them: build ``m`` (graph degree; their sparse runs use 32) and
``ef_construction`` (200 in their runs); search ``ef_search`` (candidate list, the recall knob).
``variant`` picks the storage: "plain" (SparsePlainHNSW, the float values) or "u16" / "u8" (fixed-point
values). Its ``batch_search`` takes ``num_threads``; ``search`` runs on the calling thread.
"""
from __future__ import annotations

import numpy as np

from benchmarks.peers.common import Peer

BUILD = {"m": 32, "ef_construction": 200, "variant": "plain"}
VARIANTS = {"plain": "SparsePlainHNSW", "u16": "SparseFixedU16HNSW", "u8": "SparseFixedU8HNSW"}


def sweep_settings() -> list[tuple[str, dict]]:
    return [(f"ef={ef}", {"ef_search": ef}) for ef in (10, 20, 40, 80, 160, 320, 640, 1000)]


class KannoloPeer(Peer):
    name = "kannolo"
    requires = ("kannolo",)
    build_defaults = BUILD
    notes = "kANNolo HNSW (pip kannolo); approximate; batch_search(num_threads)"

    def settings(self):
        return self._settings or sweep_settings()

    def build(self, corpus, workdir):
        import kannolo

        opts = self.build_options
        cls = getattr(kannolo, VARIANTS[opts["variant"]])
        self.index = cls.build_from_arrays(np.asarray(corpus.d_indices, np.int32), np.asarray(corpus.d_data, np.float32),
                                           np.asarray(corpus.d_indptr, np.int64), m=int(opts["m"]),
                                           ef_construction=int(opts["ef_construction"]))
        self.index.save(str(workdir / "kannolo.index"))
        self.notes += "; " + ", ".join(f"{k}={v}" for k, v in opts.items())

    def search_one(self, q_idx, q_val, k, qrow=None, ef_search=100):
        _, ids = self.index.search(np.asarray(q_idx, np.int32), np.asarray(q_val, np.float32), k,
                                   ef_search=max(int(ef_search), k))
        ids = np.asarray(ids, np.int64)
        return ids[ids >= 0]

    def search_batch(self, corpus, rows, k, threads, ef_search=100):
        idx, val, offs = [], [], [0]
        for r in rows:
            i, v = corpus.query(int(r))
            idx.append(np.asarray(i, np.int32))
            val.append(np.asarray(v, np.float32))
            offs.append(offs[-1] + len(i))
        _, ids = self.index.batch_search(np.concatenate(idx), np.concatenate(val), np.array(offs, np.int64), k,
                                         ef_search=max(int(ef_search), k), num_threads=int(threads))
        ids = np.asarray(ids, np.int64).reshape(len(rows), k)
        return [row[row >= 0] for row in ids]
