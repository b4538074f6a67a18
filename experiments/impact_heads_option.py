"""What building without impact heads saves, and that searches without an impact floor do not notice.

    python -m experiments.impact_heads_option                                    # the two real corpora
    python -m experiments.impact_heads_option --corpora real-images-all --queries 500

For each corpus in bench-data/: the index built with and without impact heads (InvertedIndex.build's
``impact_heads``): build seconds and bytes on disk. On the first corpus also an interleaved A/B of
search with the two indexes, query by query (order drawn per query, best of 3 timings each, one thread),
for exact mode and the settings given (by default real-images-120K's fastest at recall 0.95 and 0.99,
docs/benchmarks.md): QPS of each and the share of queries with identical hits. Writes
benchmarks/results/impact_heads_option.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import (  # noqa: E402
    corpus_size,
    load_corpus,
    machine,  # noqa: E402
)
from benchmarks.peers.common import dir_bytes  # noqa: E402
from tokenspace.index import InvertedIndex  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

SETTINGS = {"exact": {"mode": "exact"},
            "approx qm=0.9 a=1.0 rerank=20": {"mode": "approx", "query_mass": 0.9, "alpha": 1.0, "rerank": 20},
            "approx qm=0.8 a=0.7 rerank=100": {"mode": "approx", "query_mass": 0.8, "alpha": 0.7, "rerank": 100}}


def sizes(batch: SparseBatch, ids: list[str], work: Path) -> tuple[dict, dict]:
    """{heads: {build_s, index_bytes}} and the two indexes (kept for the A/B)."""
    out, built = {}, {}
    for heads in (True, False):
        t = time.perf_counter()
        index = InvertedIndex.build(batch, ids, impact_heads=heads)
        seconds = time.perf_counter() - t
        folder = work / f"heads-{heads}"
        index.save(folder)
        out[f"impact_heads={heads}"] = {"build_s": round(seconds, 2), "index_bytes": dir_bytes(folder)}
        shutil.rmtree(folder)
        built[heads] = index
    return out, built


def interleaved(indexes: dict, queries: list[SparseBatch], setting: dict, rng) -> dict:
    """Both indexes on every query, in a random order per query; best of 3 timings each."""
    for q in queries[:100]:  # warm-up (compilation, caches)
        for index in indexes.values():
            index.search(q, 10, threads=1, **setting)
    spent = {heads: 0.0 for heads in indexes}
    same = 0
    for q in queries:
        hits = {}
        for heads in (rng.permutation(list(indexes))):
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                hits[heads] = indexes[heads].search(q, 10, threads=1, **setting)
                best = min(best, time.perf_counter() - t)
            spent[heads] += best
        same += hits[True] == hits[False]
    return {"qps_with_heads": len(queries) / spent[True], "qps_without": len(queries) / spent[False],
            "without_over_with": spent[True] / spent[False], "same_hits": same / len(queries)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", nargs="+", default=["real-images-all", "real-text"])
    ap.add_argument("--queries", type=int, default=2000, help="queries in the A/B (first corpus)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "impact_heads_option.json")
    a = ap.parse_args(argv)
    report = {"command": "python -m experiments.impact_heads_option " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "corpora": {}}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="heads-") as tmp:
        for i, name in enumerate(a.corpora):
            folder = ROOT / "bench-data" / name
            c = load_corpus(folder, corpus_size(folder))
            batch = SparseBatch(c.d_indptr, c.d_indices, c.d_data, c.dim)
            row, indexes = sizes(batch, [str(j) for j in range(c.n_docs)], Path(tmp))
            row["n_docs"] = c.n_docs
            if i == 0:
                qs = [SparseBatch(np.array([0, len(ix)]), ix, v, c.dim)
                      for ix, v in (c.query(r) for r in range(min(a.queries, len(c.q_indptr) - 1)))]
                row["search"] = {label: interleaved(indexes, qs, s, rng) for label, s in SETTINGS.items()}
            del indexes
            report["corpora"][name] = row
            print(name, json.dumps(row), flush=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
