"""Which road an index job takes: numba's kernels, or numpy for a small index in a process without numba.

Start-up, measured: a fresh process pays ~0.3-0.45 s to import numba and ~0.4 s more on its first call of
a cached kernel (numba builds its typing context and imports scipy.linalg then), more than the whole of a
one-query `tokenspace search` on a small index, whose load checks and one exact query take a few
milliseconds in numpy. So a process that has not loaded the kernels (kernels.py) opens, checks and
searches a small index in numpy (numpy_checks.py, numpy_search.py: the same answers), and imports the
kernels only where a job needs them: a large index, a batch of queries, approximate search, a build, a
session that answers many queries and loads them at start (Searcher.fast_text, as the service does;
InvertedIndex.load_kernels), or a process whose numpy road has cost it about what loading them costs
(NUMPY_BUDGET_S: a script that searches a mid-size index query by query pays at most that, then runs
the kernels). Once loaded, the kernels take every job: a long-running process is no slower than before.
This module is the one place that choice is made.
"""
from __future__ import annotations

import sys
import time
from types import ModuleType

import numpy as np

from tokenspace.index import numpy_checks

# Above this many entries (forward-store entries for a search, array items for a check) the kernels are
# loaded whatever the process: the numpy road reads every stored entry for a query (measured 25-35 ns an
# entry on the shared 2-core machine, 735K entries: 18-26 ms a query, the kernels 4-7 ms), so at 2**21
# a numpy query costs ~50-70 ms there, still well under numba's ~0.8 s load for a one-query command.
NUMPY_MAX_ENTRIES = 1 << 21
# the numpy road's time a process spends before it loads the kernels anyway (about their load's cost:
# past it, staying on numpy would cost more than loading them, as in renting skis until their price)
NUMPY_BUDGET_S = 0.5
_KERNELS = "tokenspace.index.kernels"
_kernels: ModuleType | None = None
_spent = 0.0  # the numpy road's seconds so far in this process (spent)


def kernels() -> ModuleType:
    """kernels.py, imported on first use (it imports numba and sets its cache place: numba_cache.py)."""
    global _kernels
    if _kernels is None:
        from tokenspace.index import kernels as module  # start-up: numba, only where a job needs it

        _kernels = module
    return _kernels


def use_kernels(entries: int) -> bool:
    """Whether a job over this many entries runs the kernels: always once they are loaded (their calls
    are the faster ones), else above NUMPY_MAX_ENTRIES or once the numpy road has spent NUMPY_BUDGET_S."""
    return _KERNELS in sys.modules or entries > NUMPY_MAX_ENTRIES or _spent > NUMPY_BUDGET_S


def spent(seconds: float) -> None:
    """Count a numpy road's job's seconds towards NUMPY_BUDGET_S."""
    global _spent
    _spent += seconds


def on_numpy(fn, *args):
    """``fn(*args)``, a job of the numpy road, its seconds counted towards NUMPY_BUDGET_S (spent)."""
    t = time.perf_counter()
    out = fn(*args)
    spent(time.perf_counter() - t)
    return out


def _either(name: str, entries: int, *args):
    """kernels.<name>(*args) where use_kernels(entries), else numpy_checks.<name>(*args): the same answer."""
    if use_kernels(entries):
        return getattr(kernels(), name)(*args)
    return on_numpy(getattr(numpy_checks, name), *args)


def check_rows(indptr, indices, values) -> int:
    """kernels.check_rows (-1, or the first row without strictly increasing dims and finite weights >= 0)."""
    return _either("check_rows", len(indices), indptr, indices, values)


def check_lists(ptr, items, hi: int, per: int, chunk: int) -> int:
    """kernels.check_lists: a CSR's pointers and items checked (see there for the answers)."""
    return _either("check_lists", len(items) + len(ptr), ptr, items, hi, per, chunk)


def fnv1a(ptr, blob) -> np.ndarray:
    """kernels.fnv1a: the uint64 FNV-1a hash of each row's bytes."""
    return _either("fnv1a", len(blob), ptr, blob)
