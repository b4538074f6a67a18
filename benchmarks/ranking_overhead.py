"""What the ranking levers cost exact search: a hub prior (subtracted inside the kernels) and idf query
weights, against the plain dot product, on the same index and queries in one process.

    python -m benchmarks.engines ranking                                  # bench-1M (generated when missing)
    python -m benchmarks.engines ranking --corpus-dir bench-data/real-text-100K --docs 100000

One query at a time on one thread, exact mode, k = 10; the four settings interleaved pass by pass
(--passes, default 5) so that drift of a shared machine hits each alike; the median pass's QPS and its
ratio to the plain setting. The hub bank (K = 10, weight 0.5, CSLS's): --bank of the corpus's queries
after the timed ones where it holds that many (real-text: 10,000 queries), else --bank of its documents
cut to their 15 heaviest weights (query-like rows: bench-1M has 1,000 queries). The prior's index keeps its documents in hubness
order (set_hub_prior's default); "plain" is a second index of the same documents in insertion order
without a prior, and every ratio is to it. Writes benchmarks/results/ranking_overhead-<corpus>.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import (
    ensure_corpus,  # noqa: E402
    load_corpus,  # noqa: E402
)
from tokenspace.index import InvertedIndex  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

# (index, search keywords): "plain" is the index as built, without a prior (insertion order); the others
# search one index that holds a hub prior, its documents in hubness order (set_hub_prior's default)
SETTINGS = {"plain": ("plain", {}), "no prior, hubness order": ("hub", {"prior_weight": 0}),
            "idf 0.5": ("plain", {"idf": 0.5}), "hub prior 0.5": ("hub", {"prior_weight": 0.5}),
            "idf 0.5 + hub prior 0.5": ("hub", {"idf": 0.5, "prior_weight": 0.5})}


def bank_rows(docs: SparseBatch, n: int, top: int = 15) -> SparseBatch:
    rng = np.random.default_rng(0)
    return docs[np.sort(rng.choice(len(docs), size=min(n, len(docs)), replace=False))].prune_topk(top)


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, default=None, help="default: bench-data/bench-1M (generated)")
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--bank", type=int, default=5000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--name", default=None, help="the corpus's name in the JSON file (default: its folder's)")
    args = ap.parse_args(argv)
    data_dir = args.corpus_dir or ensure_corpus(ROOT / "bench-data")
    corpus = load_corpus(data_dir, args.docs)
    docs = SparseBatch(corpus.d_indptr, np.asarray(corpus.d_indices), np.asarray(corpus.d_data), corpus.dim)
    nq = min(args.queries, len(corpus.q_indptr) - 1)
    queries = SparseBatch(corpus.q_indptr, corpus.q_indices, corpus.q_data, corpus.dim)[:nq]
    t0 = time.perf_counter()
    index = InvertedIndex.build(docs, [str(i) for i in range(len(docs))])
    build_s = time.perf_counter() - t0
    indexes = {"plain": index, "hub": InvertedIndex.build(docs, [str(i) for i in range(len(docs))])}
    index = indexes["hub"]
    t0 = time.perf_counter()
    all_q = SparseBatch(corpus.q_indptr, corpus.q_indices, corpus.q_data, corpus.dim)
    held_out = len(all_q) - nq >= args.bank
    bank = all_q[nq:nq + args.bank] if held_out else bank_rows(docs, args.bank)
    index.set_hub_prior(bank, k=10, weight=0.5)
    prior_s = time.perf_counter() - t0
    print(f"[ranking_overhead] {len(docs):,} docs, {nq} queries: build {build_s:.1f} s, hub prior {prior_s:.1f} s",
          file=sys.stderr)
    rows = [queries[i:i + 1] for i in range(nq)]
    for which, kw in SETTINGS.values():  # compile and warm every path once
        indexes[which].search(rows[0], k=10, **kw)
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for p in range(args.passes):
        order = list(SETTINGS) if p % 2 == 0 else list(SETTINGS)[::-1]
        for name in order:
            which, kw = SETTINGS[name]
            search = indexes[which].search
            t0 = time.perf_counter()
            for q in rows:
                search(q, k=10, **kw)
            times[name].append(time.perf_counter() - t0)
    qps = {name: nq / float(np.median(t)) for name, t in times.items()}
    print("| setting | QPS (median pass) | time vs plain |\n|---|---:|---:|")
    for name in SETTINGS:
        print(f"| {name} | {qps[name]:,.0f} | {qps['plain'] / qps[name]:.3f}x |")
    name = args.name or Path(data_dir).name
    out = ROOT / "benchmarks" / "results" / f"ranking_overhead-{name}.json"
    write_json(out, {
        "corpus": name, "docs": len(docs), "queries": nq, "passes": args.passes, "build_s": build_s,
        "hub_prior_s": prior_s, "bank": f"{len(bank)} {'held-out queries' if held_out else 'documents, top 15 weights'}",
        "seconds_per_pass": times, "qps_median": qps,
        "time_vs_plain": {n: qps["plain"] / qps[n] for n in SETTINGS}}, run_record(__file__, argv))
    print(f"wrote {out}", file=sys.stderr)
    return 0

