"""What one query costs around the search kernel: InvertedIndex.search's Python and a caller's SparseBatch.

    python benchmarks/query_overhead.py --corpus-dir bench-data/real-text --index bench-data/real-text/work/ts-index

Engines are raced one query at a time (real_engines.py), where everything outside the numba kernel is
paid per query: building the query's SparseBatch, search()'s checks, the output arrays, turning the
hits' row numbers into ids. Per query, interleaved so that load shifts hit all three alike, this times
(1) the kernel alone (kernels.search_batch on prepared options), (2) ``index.search`` on a prepared
SparseBatch and (3) the caller's whole path (SparseBatch + search + the hit ids as ints, what the
benchmark peer does), and reports the medians of (2) - (1) and (3) - (1) over all queries and passes,
and of (0) the kernel's call searching no row: what crossing into numba costs (part of (1)).
The index is built once (and saved to --index) when the folder does not hold one. Prints a table and
writes benchmarks/results/query_overhead-<name>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # benchmarks.*

from benchmarks.peers.common import corpus_size, load_corpus  # noqa: E402
from tokenspace.index import InvertedIndex, kernels  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

K = 10
SETTINGS = {  # exact mode, and the 967K race's fastest at recall 0.95 and 0.99 before the retuning of 2026-11-27
    "exact": {"mode": "exact"},
    "approx qm=0.7 rerank=100 floor=0.35": {"mode": "approx", "query_mass": 0.7, "alpha": 1.0, "rerank": 100,
                                            "impact_floor": 0.35},
    "approx qm=0.8 rerank=100 floor=0.2": {"mode": "approx", "query_mass": 0.8, "alpha": 1.0, "rerank": 100,
                                           "impact_floor": 0.2},
}


def load(corpus_dir: Path, index_dir: Path, n_queries: int):
    n = corpus_size(corpus_dir)
    corpus = load_corpus(corpus_dir, n)
    if not (index_dir / "MANIFEST.json").exists():
        docs = SparseBatch(corpus.d_indptr, corpus.d_indices, corpus.d_data, corpus.dim)
        InvertedIndex.build(docs, [str(i) for i in range(n)]).save(index_dir)
    index = InvertedIndex.load(index_dir)
    return index, [corpus.query(r) for r in range(min(n_queries, len(corpus.q_indptr) - 1))]


def kernel_call(index, options, rows=(0,)):
    """The kernel alone on one query: what search() would run for a one-segment index; returns the
    (docs, scores, count) arrays it fills. rows=(): the same call searching no row, i.e. the cost of
    crossing into numba (typing and unboxing the arguments)."""
    arrays, rows = index._segments[0].kernel_arrays(), np.array(rows, np.int64)

    def run(idx, val):
        out = np.zeros((1, options.k), np.int64), np.zeros((1, options.k), np.float32), np.zeros(1, np.int64)
        kernels.search_batch(arrays, options, np.array([0, len(idx)], np.int64), idx, val, rows, *out,
                             kernels.scratch(index.dim))
        return out
    return run


def kernel_options(setting: dict):
    """The kernels' SearchOptions for one of SETTINGS, as search() makes them for a one-segment index."""
    exact = setting.get("mode", "exact") == "exact"
    return kernels.search_options(K, K if exact else setting["rerank"], exact, setting.get("alpha", 1.0),
                                  setting.get("query_mass", 1.0), None, setting.get("impact_floor", 0.0))


def measure(index, queries, setting: dict, passes: int) -> dict:
    if len(index._segments) != 1:
        raise SystemExit("the index must be one segment (built in one piece), so the kernel alone is comparable")
    n, dim = len(index), index.dim
    options = kernel_options(setting)
    kernel, crossing = kernel_call(index, options), kernel_call(index, options, rows=())
    batches = [SparseBatch(np.array([0, len(i)]), i, v, dim) for i, v in queries]

    def user(idx, val):
        hits = index.search(SparseBatch(np.array([0, len(idx)]), idx, val, dim), K, **setting)[0]
        return [int(h.id) for h in hits]

    user(*queries[0]), kernel(*queries[0])  # compile / warm
    t_kernel, t_search, t_user, t_cross = [], [], [], []
    clock = time.perf_counter
    for _ in range(passes):
        for (idx, val), batch in zip(queries, batches):
            t0 = clock()
            crossing(idx, val)
            t_cross.append(clock() - t0)
            t0 = clock()
            kernel(idx, val)
            t1 = clock()
            index.search(batch, K, **setting)
            t2 = clock()
            user(idx, val)
            t3 = clock()
            t_kernel.append(t1 - t0), t_search.append(t2 - t1), t_user.append(t3 - t2)
    tk, ts, tu = (np.array(t) * 1e6 for t in (t_kernel, t_search, t_user))
    return {"docs": n, "queries": len(queries), "passes": passes, "crossing_us": float(np.median(t_cross) * 1e6),
            "kernel_us": float(np.median(tk)), "search_us": float(np.median(ts)), "user_us": float(np.median(tu)),
            "search_overhead_us": float(np.median(ts - tk)), "user_overhead_us": float(np.median(tu - tk))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True, help="a corpus from benchmarks/real_corpus.py")
    ap.add_argument("--index", type=Path, required=True, help="a saved InvertedIndex of it (built there if absent)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--name", default=None, help="results name (default: the corpus folder's)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not (a.corpus_dir / "q_indptr.npy").exists():
        ap.error(f"{a.corpus_dir} holds no corpus (q_indptr.npy): build one with benchmarks/real_corpus.py")
    index, queries = load(a.corpus_dir, a.index, a.queries)
    rows = []
    for label, setting in SETTINGS.items():
        rows.append({"setting": label, **measure(index, queries, setting, a.passes)})
    name = a.name or a.corpus_dir.name
    report = {"corpus": name, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": "python benchmarks/query_overhead.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "rows": rows}
    print("| setting | docs | into numba us | kernel us | search us | search - kernel us | caller's path us | "
          "caller - kernel us |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['docs']:,} | {r['crossing_us']:.1f} | {r['kernel_us']:.1f} | {r['search_us']:.1f} | "
              f"{r['search_overhead_us']:.1f} | {r['user_us']:.1f} | {r['user_overhead_us']:.1f} |")
    out = a.out or ROOT / "benchmarks/results" / f"query_overhead-{name}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
