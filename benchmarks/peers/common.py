"""What every peer shares: the corpus on disk, the Peer interface, timing, RSS and disk-size helpers."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Corpus:
    """The bench corpus as numpy arrays (memory-mapped). Doc i's external id is ``str(i)``."""

    d_indptr: np.ndarray
    d_indices: np.ndarray
    d_data: np.ndarray
    q_indptr: np.ndarray
    q_indices: np.ndarray
    q_data: np.ndarray
    dim: int
    data_dir: Path
    n_docs: int

    def docs_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.d_data, self.d_indices, self.d_indptr), shape=(self.n_docs, self.dim))

    def queries_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.q_data, self.q_indices, self.q_indptr), shape=(len(self.q_indptr) - 1, self.dim))

    def query(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.q_indptr[i], self.q_indptr[i + 1]
        return np.asarray(self.q_indices[a:b]), np.asarray(self.q_data[a:b])

    def dense_docs(self) -> np.ndarray:
        return np.load(self.data_dir / "dense_docs.npy", mmap_mode="r")[: self.n_docs]

    def dense_queries(self) -> np.ndarray:
        return np.load(self.data_dir / "dense_q.npy")

    def raw_csr_bytes(self) -> int:
        return int(self.d_indptr.nbytes + self.d_indices.nbytes + self.d_data.nbytes)


VOCAB_SIZE = 30522  # gen_corpus.py's V


def corpus_size(data_dir: Path) -> int:
    """How many documents the corpus in ``data_dir`` holds."""
    return len(np.load(data_dir / "d_indptr.npy", mmap_mode="r")) - 1


def load_corpus(data_dir: Path, n_docs: int) -> Corpus:
    """The first ``n_docs`` rows of the corpus in ``data_dir`` (bench-100K is a prefix of bench-1M)."""
    def ld(name):
        return np.load(data_dir / f"{name}.npy", mmap_mode="r")

    d_indptr = np.asarray(ld("d_indptr")[: n_docs + 1])
    if len(d_indptr) != n_docs + 1:
        raise ValueError(f"{data_dir} holds {len(d_indptr) - 1} docs, fewer than {n_docs}")
    end = int(d_indptr[-1])
    return Corpus(d_indptr, ld("d_indices")[:end], ld("d_data")[:end], np.asarray(ld("q_indptr")),
                  np.asarray(ld("q_indices")), np.asarray(ld("q_data")), VOCAB_SIZE, data_dir, n_docs)


class Peer:
    """One engine. ``build`` once, then ``search_one``/``search_batch`` per setting in ``settings()``.

    Results are arrays of doc row numbers (int), best first. ``search_one`` must run on one thread;
    ``search_batch`` may use ``threads`` threads. ``notes`` ends up in the table.
    """

    name = "peer"
    notes = ""
    requires: tuple[str, ...] = ()  # modules the engine needs (the bench extra), checked before any build

    def settings(self) -> list[tuple[str, dict]]:
        return [("default", {})]

    def prepare(self, corpus: Corpus) -> None:
        """Before the RSS baseline: bring the input into RAM so RSS delta counts the index alone."""
        for name in ("d_indptr", "d_indices", "d_data"):
            setattr(corpus, name, np.array(getattr(corpus, name)))

    def build(self, corpus: Corpus, workdir: Path) -> None:
        raise NotImplementedError

    def exact_gt(self, corpus: Corpus, k: int) -> np.ndarray | None:
        """Exact top-k of this peer's own task, when it is not the sparse one (the dense twin)."""
        return None

    def search_one(self, q_idx: np.ndarray, q_val: np.ndarray, k: int, **setting) -> np.ndarray:
        raise NotImplementedError

    def search_batch(self, corpus: Corpus, rows: np.ndarray, k: int, threads: int, **setting) -> list[np.ndarray]:
        raise NotImplementedError

    def index_bytes(self, workdir: Path) -> int | None:
        """Bytes of the saved index on disk (None when the engine keeps nothing on disk)."""
        return dir_bytes(workdir)

    def close(self) -> None:
        pass


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def rss_bytes() -> int:
    """RSS of this process plus its children (Milvus Lite runs its server as a child process)."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
