"""Same-process A/B of the embedded index: an older copy of the package against this one.

    git archive <commit> src/tokenspace | tar -x -C bench-data/old   # then rename it (below)
    NUMBA_NUM_THREADS=1 python benchmarks/old_vs_new.py bench-data/bench-1M --old bench-data/old \\
        --n 1000000 --queries 300 --rounds 7 --json benchmarks/results/old_vs_new-1m.json

--old is a folder holding the older package renamed ``tokenspace_old`` (its own imports rewritten
from ``tokenspace`` to ``tokenspace_old``), so both load in one process. Both indexes are built from
the same arrays; every engine_quick.py setting runs over the same queries one at a time, old and new
interleaved in each round; reported: whether hits and scores are identical, the median over rounds of
the mean ms per query, and the ratio new/old. Separate processes differ by about +-3% (memory
alignment, the shared machine), more than the effects measured here, hence one process.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from engine_quick import SETTINGS, load_corpus  # noqa: E402

from tokenspace.index import InvertedIndex  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--old", type=Path, required=True, help="folder holding the tokenspace_old package")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--old-first", action="store_true",
                    help="build the old index first (default: the new one); see the note on build order")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.old.resolve()))
    from tokenspace_old.index import InvertedIndex as OldIndex
    from tokenspace_old.sparse import SparseBatch as OldBatch

    docs, qs = load_corpus(args.corpus, args.n)
    qs = qs[: args.queries]
    ids = [str(i) for i in range(len(docs))]
    print(f"corpus {args.corpus} n={len(docs):,} nnz={docs.nnz:,} queries={len(qs)}", flush=True)
    def build_new():
        t = time.perf_counter()
        return InvertedIndex.build(docs, ids), time.perf_counter() - t

    def build_old():
        t = time.perf_counter()
        return OldIndex.build(OldBatch(docs.indptr, docs.indices, docs.values, docs.dim), ids), time.perf_counter() - t

    # Build order matters on this VM: in a control run with the same code on both sides, the index
    # built first searched 1.1-2.5x slower (probably memory placement: numpy asks for huge pages,
    # which this VM hands out unevenly over time), so run both orders and compare the two.
    if args.old_first:
        old, old_build = build_old()
        new, new_build = build_new()
    else:
        new, new_build = build_new()
        old, old_build = build_old()
    old_qs = [OldBatch(q.indptr, q.indices, q.values, q.dim) for q in (qs[i] for i in range(len(qs)))]
    new_qs = [qs[i] for i in range(len(qs))]
    st_new, st_old = new.stats(), old.stats()
    print(f"build s: old {old_build:.1f}, new {new_build:.1f}; index / raw CSR: old {st_old['size_vs_raw_csr']:.3f}, "
          f"new {st_new['size_vs_raw_csr']:.3f} ({st_old['index_bytes'] / 1e9:.2f} -> {st_new['index_bytes'] / 1e9:.2f} GB)",
          flush=True)

    def run(index, queries, opts):
        lat, hits = np.empty(len(queries)), []
        for i, q in enumerate(queries):
            t0 = time.perf_counter()
            hits.append(index.search(q, k=args.k, **opts)[0])
            lat[i] = time.perf_counter() - t0
        return lat.mean() * 1e3, hits

    rows = []
    for name, opts in SETTINGS:
        run(old, old_qs, opts)  # compile and warm both
        run(new, new_qs, opts)
    times = {name: ([], []) for name, _ in SETTINGS}
    same = {}
    for r in range(args.rounds):
        for name, opts in SETTINGS:
            t_old, h_old = run(old, old_qs, opts)
            t_new, h_new = run(new, new_qs, opts)
            times[name][0].append(t_old)
            times[name][1].append(t_new)
            if r == 0:
                same[name] = all([(h.id, h.score) for h in a] == [(h.id, h.score) for h in b]
                                 for a, b in zip(h_old, h_new))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{'setting':28s} {'identical':>9s} {'old ms':>7s} {'new ms':>7s} {'new/old':>8s}")
    for name, _ in SETTINGS:
        mo, mn = float(np.median(times[name][0])), float(np.median(times[name][1]))
        rows.append({"setting": name, "identical_hits_and_scores": same[name], "old_ms": mo, "new_ms": mn,
                     "ratio": mn / mo, "old_rounds_ms": times[name][0], "new_rounds_ms": times[name][1]})
        print(f"{name:28s} {'yes' if same[name] else 'NO':>9s} {mo:7.3f} {mn:7.3f} {mn / mo:8.3f}")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python benchmarks/old_vs_new.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "n": len(docs), "nnz": docs.nnz,
            "built_first": "old" if args.old_first else "new",
            "queries": len(qs), "build_s": {"old": old_build, "new": new_build},
            "stats": {"old": st_old, "new": st_new}, "rows": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
