"""Rescoring's row reads: what a candidate costs by how its row is touched before it is scored.

Rows are read at random from a large forward store and touched not at all, at each row's first and last
entries, or at every cache line of the row (what the index kernels' rescoring does), the last with a
constant step and with a step read from the arrays' itemsize.

    python -m benchmarks.engines rescore-rows --corpus-dir bench-data/real-text-fit-10M --name real-text-fit-10M

The store is the corpus's rows as the index keeps them (term ids narrowed to uint16 for up to 65,536
dims, weights as saved, memory-mapped). Each draw is --rows random rows scored against one random dense query, the way the kernel
does: bounds first, then the touch loop, then the dot products. The modes alternate draw by draw in
--passes passes, each on draw sets far apart from the others' (a mode must not find rows another has just
read in cache); nanoseconds per row, median over passes. Every mode's scores are checked against numpy.

Writes benchmarks/results/rescore_rows-<name>.json (with the run record) and prints the table.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

from benchmarks.common import run_record, write_json
from tokenspace.index.kernels import touch_rows
from tokenspace.index.segment import fwd_index_dtype

ROOT = Path(__file__).resolve().parents[1]
MODES = ("none", "ends", "every line", "every line, step from itemsize")
LINE = 64


@njit(cache=True, nogil=True)
def score_rows(indptr, indices, values, rows, q, mode, out):
    """out[i]: the dot product of row rows[i] with the dense query q, after touching the rows as ``mode``
    says (0: not at all, 1: first and last entries, 2: every cache line, through the kernels' touch_rows,
    3: every line with a step numba cannot fold); returns the touched sum, so that the touching loads are not dropped."""
    n = len(rows)
    start = np.empty(n, np.int64)
    end = np.empty(n, np.int64)
    for i in range(n):
        start[i] = indptr[rows[i]]
        end[i] = indptr[rows[i] + 1]
    touched = np.float32(0.0)
    if mode == 2:  # the kernel's own loop
        touched = touch_rows(indices, values, start, end, n)
    for i in range(n):
        s0, s1 = start[i], end[i]
        if s1 <= s0 or mode == 0 or mode == 2:
            continue
        if mode == 3:  # every line with the step read from the arrays (a run-time value to numba)
            for p in range(s0, s1, LINE // values.itemsize):
                touched += values[p]
            for p in range(s0, s1, LINE // indices.itemsize):
                touched += np.float32(indices[p])
        touched += values[s0] + values[s1 - 1] + np.float32(indices[s0]) + np.float32(indices[s1 - 1])
    for i in range(n):
        s = np.float32(0.0)
        for p in range(start[i], end[i]):
            s += q[indices[p]] * values[p]
        out[i] = s
    return touched


def load_store(corpus_dir: Path, dim: int):
    """(indptr, term ids, weights) of the corpus's documents, the ids in the index's dtype for ``dim``
    (uint16 up to 65,536 dims); the weights stay memory-mapped."""
    indptr = np.load(corpus_dir / "d_indptr.npy")
    indices = np.load(corpus_dir / "d_indices.npy", mmap_mode="r").astype(fwd_index_dtype(dim))
    values = np.load(corpus_dir / "d_data.npy", mmap_mode="r")
    return indptr, indices, values


def measure(store, dim: int, rows: int, draws: int, passes: int, seed: int = 0) -> dict:
    """ns per row of each mode (median over passes, and every pass), its scores checked against numpy."""
    indptr, indices, values = store
    rng = np.random.default_rng(seed)
    q = rng.random(dim).astype(np.float32)
    sets = [rng.integers(0, len(indptr) - 1, rows) for _ in range(draws)]
    out = np.empty(rows, np.float32)
    for mode in range(len(MODES)):  # compile, and check every mode's scores on the first draw
        score_rows(indptr, indices, values, sets[0], q, mode, out)
        want = [float(np.dot(q[indices[indptr[r]:indptr[r + 1]]].astype(np.float64),
                             values[indptr[r]:indptr[r + 1]])) for r in sets[0]]
        if not np.allclose(out, want, rtol=1e-4, atol=1e-5):
            raise SystemExit(f"mode {MODES[mode]}: scores differ from numpy")
    ns = {m: [] for m in MODES}
    # each mode reads a draw set a third of the sets away from the others' (tens of MB of rows between two
    # reads of one set), so no mode finds the rows another mode has just brought into cache
    gap = max(1, draws // len(MODES))
    for rep in range(passes):
        spent = dict.fromkeys(MODES, 0.0)
        for i in range(draws):
            order = range(len(MODES)) if (rep + i) % 2 == 0 else reversed(range(len(MODES)))
            for mode in order:
                rs = sets[(i + mode * gap) % draws]
                t = time.perf_counter()
                score_rows(indptr, indices, values, rs, q, mode, out)
                spent[MODES[mode]] += time.perf_counter() - t
        for m in MODES:
            ns[m].append(spent[m] / (draws * rows) * 1e9)
    return {"ns_per_row": {m: round(float(np.median(v)), 1) for m, v in ns.items()},
            "ns_per_row_passes": {m: [round(x, 1) for x in v] for m, v in ns.items()}}


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--rows", type=int, default=200, help="rows per draw (the candidates of one query)")
    ap.add_argument("--draws", type=int, default=3000)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--dim", type=int, default=30522)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not (a.corpus_dir / "d_indptr.npy").is_file():
        ap.error(f"--corpus-dir {a.corpus_dir}: no d_indptr.npy there")
    record = run_record(__file__, argv)
    store = load_store(a.corpus_dir, a.dim)
    res = measure(store, a.dim, a.rows, a.draws, a.passes)
    report = {"corpus": a.name or a.corpus_dir.name, "n_docs": len(store[0]) - 1, "nnz": int(store[0][-1]),
              "rows_per_draw": a.rows, "draws": a.draws, "passes": a.passes, **res}
    print("| rows touched before scoring | ns per row (median pass) |\n|---|---|")
    for m in MODES:
        print(f"| {m} | {res['ns_per_row'][m]:.0f} |")
    out = write_json(a.out or ROOT / "benchmarks/results" / f"rescore_rows-{report['corpus']}.json", report, record)
    print(f"wrote {out}", file=sys.stderr)
