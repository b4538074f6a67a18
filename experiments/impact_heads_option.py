"""What building without impact heads saves, and that searches without an impact floor do not notice.

    python -m experiments.run impact_heads_option                                # the two real corpora
    python -m experiments.run impact_heads_option --set 'corpora.names=["real-images-all"]' --set search.queries=500

For each corpus in bench-data/: the index built with and without impact heads (InvertedIndex.build's
``impact_heads``): build seconds and bytes on disk. On the first corpus also an interleaved A/B of
search with the two indexes, query by query (order drawn per query, best of 3 timings each, one thread),
for exact mode and the settings given (by default real-images-120K's fastest at recall 0.95 and 0.99,
docs/benchmarks.md): QPS of each and the share of queries with identical hits. Writes
benchmarks/results/impact_heads_option.json.
"""
from __future__ import annotations

import json
import shutil
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
from experiments import config  # noqa: E402
from tokenspace.index import InvertedIndex  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402


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


def interleaved(indexes: dict, queries: list[SparseBatch], setting: dict, rng, warmup: int = 100, k: int = 10,
                timings: int = 3) -> dict:
    """Both indexes on every query, in a random order per query; best of 3 timings each."""
    for q in queries[:warmup]:  # warm-up (compilation, caches)
        for index in indexes.values():
            index.search(q, k, threads=1, **setting)
    spent = {heads: 0.0 for heads in indexes}
    same = 0
    for q in queries:
        hits = {}
        for heads in (rng.permutation(list(indexes))):
            best = float("inf")
            for _ in range(timings):
                t = time.perf_counter()
                hits[heads] = indexes[heads].search(q, k, threads=1, **setting)
                best = min(best, time.perf_counter() - t)
            spent[heads] += best
        same += hits[True] == hits[False]
    return {"qps_with_heads": len(queries) / spent[True], "qps_without": len(queries) / spent[False],
            "without_over_with": spent[True] / spent[False], "same_hits": same / len(queries)}


def main(argv=None) -> int:
    run, _ = config.start("impact_heads_option", argv)
    corpora = run["corpora"]["names"]  # folders of bench-data/; the A/B runs on the first
    ab = run["search"]
    queries, seed, warmup, k, timings = ab["queries"], ab["seed"], ab["warmup"], ab["k"], ab["timings"]
    # exact, and real-images-120K's fastest settings at recall 0.95 and 0.99 (docs/benchmarks.md)
    settings = ab["settings"].whole()
    out = ROOT / run["output"]["json"]
    run.ready()
    report = {"command": run.command(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "corpora": {}}
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="heads-") as tmp:
        for i, name in enumerate(corpora):
            folder = ROOT / "bench-data" / name
            c = load_corpus(folder, corpus_size(folder))
            batch = SparseBatch(c.d_indptr, c.d_indices, c.d_data, c.dim)
            row, indexes = sizes(batch, [str(j) for j in range(c.n_docs)], Path(tmp))
            row["n_docs"] = c.n_docs
            if i == 0:
                qs = [SparseBatch(np.array([0, len(ix)]), ix, v, c.dim)
                      for ix, v in (c.query(r) for r in range(min(queries, len(c.q_indptr) - 1)))]
                row["search"] = {label: interleaved(indexes, qs, s, rng, warmup, k, timings)
                                 for label, s in settings.items()}
            del indexes
            report["corpora"][name] = row
            print(name, json.dumps(row), flush=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
