"""Does clustering the documents (renumbering them so similar ones sit in the same blocks) speed search?

    python benchmarks/reorder_probe.py bench-data/stair-1M-topn [--queries 200] [--json out.json]

Block-max skipping (kernels.search_one) skips a 64-doc block when its upper bound cannot reach the
running threshold; the bound is tight only when a block's documents share their heavy terms, which
doc-id reordering (clustering) arranges on real collections. This probe builds the corpus twice, in
its own order and sorted lexicographically by each document's three heaviest terms (a cheap
clustering), and times one query at a time in both (best of 2 interleaved rounds), exact and
approximate (defaults, alpha 1 = no block skipping, alpha 0.8), with recall@10 against exact.
The corpus folder is what gen_corpus.py or fitted_corpus.py writes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from engine_quick import load_corpus, timed  # noqa: E402

from tokenspace.index import InvertedIndex  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

SETTINGS = [("exact", {}), ("approx defaults", {"mode": "approx"}),
            ("approx alpha=1", {"mode": "approx", "alpha": 1.0}), ("approx alpha=0.8", {"mode": "approx", "alpha": 0.8})]


@njit(cache=True)
def heaviest_terms(indptr, indices, values, m):
    """[n, m] term ids of each row's m heaviest weights (missing: a value above every term id)."""
    n = len(indptr) - 1
    out = np.full((n, m), 1 << 30, np.int64)
    for i in range(n):
        a, b = indptr[i], indptr[i + 1]
        order = np.argsort(-values[a:b], kind="mergesort")
        for r in range(min(m, b - a)):
            out[i, r] = indices[a + order[r]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    docs, qs = load_corpus(args.corpus, args.n)
    qs = qs[: args.queries]
    ids = [str(i) for i in range(len(docs))]
    keys = heaviest_terms(docs.indptr, docs.indices, docs.values, 3)
    perm = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
    indexes = {"corpus order": InvertedIndex.build(docs, ids),
               "sorted by top-3 terms": InvertedIndex.build(SparseBatch.from_scipy(docs.to_scipy()[perm]),
                                                            [ids[p] for p in perm])}
    for index in indexes.values():  # compile and warm up
        for _, opts in SETTINGS:
            index.search(qs, k=10, **opts)
    best: dict[tuple, tuple] = {}
    for _ in range(2):
        for order, index in indexes.items():
            for name, opts in SETTINGS:
                lat, got = timed(lambda q, i=index, o=opts: i.search(q, k=10, **o)[0], qs)
                if (order, name) not in best or lat.mean() < best[order, name][0].mean():
                    best[order, name] = (lat, got)
    truth = [{h.id for h in hits} for hits in best["corpus order", "exact"][1]]
    rows = []
    for (order, name), (lat, got) in best.items():
        recall = float(np.mean([len({h.id for h in g} & t) / 10 for g, t in zip(got, truth)]))
        rows.append({"order": order, "setting": name, "qps": 1 / lat.mean(), "recall@10": recall})
        print(f"{order:22s} {name:18s} {1 / lat.mean():8.1f} QPS  recall@10 {recall:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(args.corpus), "n": len(docs), "queries": len(qs),
                                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
