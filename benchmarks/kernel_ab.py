"""Two versions of the index kernels in one process: kernels.py of an earlier commit against today's, on the
same segment arrays with the same options, one query at a time, every answer compared.

    git show d8d0948:src/tokenspace/index/kernels.py > /tmp/kernels_old.py
    python -m benchmarks.engines kernel-ab --old /tmp/kernels_old.py --corpus-dir bench-data/real-text --name real-text-200K
    python -m benchmarks.engines kernel-ab --old /tmp/kernels_old.py --preset 10M \
        --corpus-dir bench-data/real-text-fit-10M --name real-text-fit-10M --queries 500

--preset picks the builds and settings: ``race`` (default) the winners of the 200K race, ``10M`` the two arms
of the 10M approximate ÷ exact ratio.

The earlier file is loaded as a module of its own (it imports tokenspace.index.layout and numba_cache, shared
with today's). Both arms call their own search_query on the same segment (each through its own address
table of the same arrays), with the options today's one-query plan makes, into their own thread scratch.
The arms alternate chunk by chunk (--chunk queries), the first arm alternating by pass; CPU time per query
on one pinned core, and the median over passes of today ÷ earlier. It measures the kernels alone: what
changed outside kernels.py is in neither arm, and the two must read the options and the segment table alike
(the run stops where their answers differ).

Writes benchmarks/results/kernel_ab-<name>.json (with the run record) and prints the table.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import corpus_size, load_corpus, run_record, write_json
from tokenspace.index import InvertedIndex
from tokenspace.index import kernels as today

ROOT = Path(__file__).resolve().parents[1]
K = 10
# each preset: build name -> (InvertedIndex.build keywords, {setting label: search keywords})
_EXACT = {"exact": {"mode": "exact"}}
PRESETS = {
    # the builds and settings that won the real-text-200K race at recall 0.95 and 0.99 (docs/benchmarks.md)
    "race": {
        name: (build, {**_EXACT,
                       "qm=1.0 rerank=50 floor=0.3": {"mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": 50,
                                                      "impact_floor": 0.3},
                       "qm=0.9 rerank=20": {"mode": "approx", "query_mass": 0.9, "alpha": 1.0, "rerank": 20}})
        for name, build in (("heads", {}), ("mass80-nores-heads", {"approx_mass": 0.8, "residual_lists": False}))},
    # the two arms of the 10M approximate ÷ exact ratio: the winning approximate setting on its heads build,
    # exact search on the build without heads (docs/benchmarks.md, "10M documents")
    "10M": {"heads": ({"impact_heads": True}, {"floor=0.35 rerank=200": {
                "mode": "approx", "query_mass": 1.0, "alpha": 1.0, "rerank": 200, "impact_floor": 0.35}}),
            "plain": ({"impact_heads": False}, _EXACT)},
}


def load_kernels(path: Path):
    """kernels.py of another commit as a module of its own. It is registered in sys.modules: numba's cache
    imports a kernel's module by name when it loads the compiled kernel back."""
    name = "tokenspace_kernels_earlier"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_chunk(module, seg, opt, dim, qrows) -> tuple[float, list]:
    """(CPU seconds, answers) of one module's search_query over a chunk of queries."""
    table = module.scratch_table(dim)
    docs, scores = np.empty(K, np.int64), np.empty(K, np.float32)
    out = []
    c = time.process_time()
    for idx, val in qrows:
        m = module.search_query(seg.table, seg.fwd_indices, opt, idx, val, dim, table, docs, scores)
        out.append((docs[:m].tobytes(), scores[:m].tobytes()))
    return time.process_time() - c, out


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="kernels.py of the earlier commit (git show REV:PATH)")
    ap.add_argument("--corpus-dir", type=Path, required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--pin-core", type=int, default=None, help="default: the lowest core this process may use")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="race", help="the builds and settings timed")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not a.old.is_file():
        ap.error(f"--old {a.old}: no such file")
    record = run_record(__file__, argv)
    earlier = load_kernels(a.old)
    arms = {"earlier": earlier, "today": today}
    n = corpus_size(a.corpus_dir)
    corpus = load_corpus(a.corpus_dir, n)
    docs, _ = corpus.batches()
    nq = min(a.queries, len(corpus.q_indptr) - 1)
    qrows = [tuple(np.ascontiguousarray(x, dt) for x, dt in zip(corpus.query(r), (np.int32, np.float32)))
             for r in range(nq)]
    chunks = [qrows[s:s + a.chunk] for s in range(0, nq, a.chunk)]
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[0] if a.pin_core is None else a.pin_core
    os.sched_setaffinity(0, {core})
    rows = []
    try:
        for build, (options, settings) in PRESETS[a.preset].items():
            index = InvertedIndex.build(docs, list(map(str, range(n))), **options)
            arrays = index._segments[0].kernel_arrays()
            segs = {name: module.kernel_segment(arrays) for name, module in arms.items()}
            for label, s in settings.items():
                plan = index._plan(s["mode"], K, s.get("query_mass"), s.get("alpha"), s.get("rerank"),
                                   s.get("impact_floor"), None, one=True)
                opt = plan[0][3]
                answers = {name: run_chunk(arms[name], segs[name], opt, index.dim, qrows)[1] for name in arms}
                if answers["earlier"] != answers["today"]:
                    raise SystemExit(f"{build} {label}: the two kernels' answers differ")
                us = {name: [] for name in arms}
                for rep in range(a.passes):
                    order = list(arms) if rep % 2 == 0 else list(arms)[::-1]
                    cpu = dict.fromkeys(arms, 0.0)
                    for chunk in chunks:
                        for name in order:
                            cpu[name] += run_chunk(arms[name], segs[name], opt, index.dim, chunk)[0]
                    for name in arms:
                        us[name].append(cpu[name] / nq * 1e6)
                ratios = [t / e for t, e in zip(us["today"], us["earlier"])]
                row = {"build": build, "setting": label, "options": s,
                       "us_per_query": {name: round(float(np.median(v)), 2) for name, v in us.items()},
                       "us_per_query_passes": {name: [round(x, 2) for x in v] for name, v in us.items()},
                       "today_over_earlier": round(float(np.median(ratios)), 4),
                       "today_over_earlier_range": [round(min(ratios), 4), round(max(ratios), 4)]}
                rows.append(row)
                print(f"{build} {label}: earlier {row['us_per_query']['earlier']:.1f} us, today "
                      f"{row['us_per_query']['today']:.1f} us, today/earlier {row['today_over_earlier']:.3f}",
                      file=sys.stderr, flush=True)
    finally:
        os.sched_setaffinity(0, set(allowed))
    report = {"corpus": a.name or a.corpus_dir.name, "preset": a.preset, "n_docs": n, "k": K, "queries": nq,
              "passes": a.passes,
              "chunk": a.chunk, "earlier_kernels": str(a.old), "pinned_core": core,
              "load_avg_1min_end": os.getloadavg()[0], "answers_identical": True, "rows": rows}
    print("| build | setting | earlier us/query | today | today ÷ earlier (range) |\n|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["today_over_earlier_range"]
        print(f"| {r['build']} | {r['setting']} | {r['us_per_query']['earlier']:.1f} | {r['us_per_query']['today']:.1f} "
              f"| {r['today_over_earlier']:.3f} ({lo:.3f}-{hi:.3f}) |")
    out = write_json(a.out or ROOT / "benchmarks/results" / f"kernel_ab-{report['corpus']}.json", report, record)
    print(f"wrote {out}")
