"""What every peer shares: the corpus on disk, the Peer interface, timing, RSS and disk-size helpers."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np

# the corpus and the timer live in benchmarks.common; peers and tests import them from here too
from benchmarks.common import VOCAB_SIZE, Corpus, Timer, corpus_size, load_corpus  # noqa: F401


class Peer:
    """One engine. ``build`` once, then ``search_one``/``search_batch`` per setting in ``settings()``.

    Results are arrays of doc row numbers (int), best first. ``search_one`` must run on one thread;
    ``search_batch`` may use ``threads`` threads. ``notes`` ends up in the table.
    """

    name = "peer"
    notes = ""
    requires: tuple[str, ...] = ()  # modules the engine needs (the bench extra), checked before any build
    build_defaults: dict = {}  # the engine's build keywords, under the ones a race passes in

    def __init__(self, build: dict | None = None, settings: list | None = None):
        # build: keywords over build_defaults; settings: [(label, search keywords)] to measure instead of
        # the peer's own sweep (a race's peers file)
        self.build_options = {**self.build_defaults, **(build or {})}
        self._settings = [(label, dict(s)) for label, s in settings] if settings else None

    def settings(self) -> list[tuple[str, dict]]:
        return self._settings or [("default", {})]

    def prepare(self, corpus: Corpus) -> None:
        """Before the RSS baseline: bring the input into RAM so RSS delta counts the index alone."""
        for name in ("d_indptr", "d_indices", "d_data"):
            setattr(corpus, name, np.array(getattr(corpus, name)))

    def load(self) -> None:
        """Import the engine's library before its build is timed: a race's build time is the index's, not
        a fresh process's start-up (each engine's start-up is the same for every build it makes)."""
        for module in self.requires:
            importlib.import_module(module)

    def build(self, corpus: Corpus, workdir: Path) -> None:
        raise NotImplementedError

    def prepare_queries(self, corpus: Corpus) -> None:
        """Before any timed search: turn the corpus's queries into what the engine's search call takes (a
        tokenspace SparseBatch, SINDI's uint32 arrays), as a caller's encoder hands them over; search_one
        then takes query ``qrow`` in that form, so a race times the search call, not a format
        conversion of the race's own making."""

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


def int_ids(ids) -> np.ndarray:
    """A tokenspace search's string ids (the row numbers the corpus was built with) as the int64 array a
    race scores."""
    return np.array([int(i) for i in ids], np.int64)


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
