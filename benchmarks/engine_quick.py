"""Quick self-check of the embedded engine against scipy on the bench corpus, in one run (ratios).

    python -m benchmarks.engines quick bench-data/bench-1M --n 100000 --queries 200
    python -m benchmarks.engines quick bench-data/bench-1M --n 1000000 --queries 300 --save /tmp/idx

The corpus folder is what ../shared/bench/gen_corpus.py writes (d_* and q_* arrays); --n takes the
first n docs. Measures: build time, index size vs raw CSR, and one query at a time on one thread for
scipy exact (CSC columns of the query terms times the query weights + argpartition) and for this
engine exact and approximate settings (QPS, mean and p99 latency, recall@10 against exact), plus
batched search with --threads. Prints a table and optionally writes JSON. The full comparison with
the other engines is benchmarks/search_speed.py; this one is for tuning.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import load_corpus, timed
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch

SETTINGS = [  # (name, search options); approx defaults: query_mass 0.9, alpha 0.9, rerank 5k
    ("exact", {}),
    ("approx default", {"mode": "approx"}),
    ("approx qm=0.85", {"mode": "approx", "query_mass": 0.85}),
    ("approx qm=0.85 rerank=100", {"mode": "approx", "query_mass": 0.85, "rerank": 100}),
    ("approx qm=0.8 rerank=100", {"mode": "approx", "query_mass": 0.8, "rerank": 100}),
    ("approx qm=0.95 rerank=20", {"mode": "approx", "query_mass": 0.95, "rerank": 20}),
    ("approx a=0.8", {"mode": "approx", "alpha": 0.8}),
]


def work_per_query(index: InvertedIndex, qs: SparseBatch) -> dict:
    """What exact search must read, from the index layout: the share of the non-zeros held in dense code
    columns, and per query (mean) the dense codes (n per dense-column term) and list postings."""
    seg = index._segments[0]  # built in one piece here
    is_dense = np.asarray(seg.dense_slot) >= 0
    df = np.asarray(seg.df, np.int64)
    nnz = int(seg.fwd_indptr[-1])
    codes, postings = [], []
    for r in range(len(qs)):
        terms = qs.row(r)[0]
        codes.append(seg.n * int(is_dense[terms].sum()))
        postings.append(int(df[terms][~is_dense[terms]].sum()))
    return {"dense_share_of_nnz": float(df[is_dense].sum() / nnz) if nnz else 0.0,
            "dense_codes_per_query": float(np.mean(codes)), "list_postings_per_query": float(np.mean(postings))}


def _batch_time(index, qs, k, threads, opts) -> float:
    t = time.perf_counter()
    index.search(qs, k=k, threads=threads, **opts)
    return time.perf_counter() - t


def row(name, lat, recall=None, extra=""):
    return {"setting": name, "qps": 1 / lat.mean(), "mean_ms": lat.mean() * 1e3,
            "p99_ms": np.quantile(lat, 0.99) * 1e3, "recall@10": recall, "note": extra}


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save", type=Path, help="also save + load (mmap, verified) the index here")
    ap.add_argument("--index", type=Path, help="load this saved index instead of building one")
    ap.add_argument("--settings", help='extra approx settings as JSON, e.g. \'[{"query_mass": 0.95}]\'')
    ap.add_argument("--rounds", type=int, default=2,
                    help="time every setting this many times, interleaved, and keep the best round "
                         "(the machine is shared and noisy)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    docs, qs = load_corpus(args.corpus, args.n).batches()
    qs = qs[: args.queries]
    ids = [str(i) for i in range(len(docs))]
    print(f"corpus {args.corpus} n={len(docs)} nnz={docs.nnz} queries={len(qs)}", flush=True)

    t = time.perf_counter()
    index = InvertedIndex.load(args.index) if args.index else InvertedIndex.build(docs, ids)
    build_s = time.perf_counter() - t  # a load time when --index is given
    st = index.stats()
    print(f"{'load' if args.index else 'build'} {build_s:.1f} s; index {st['index_bytes'] / 1e9:.2f} GB = {st['size_vs_raw_csr']:.2f}x raw CSR "
          f"({st['raw_csr_bytes'] / 1e9:.2f} GB); dense terms {st['dense_terms']}", flush=True)
    work = work_per_query(index, qs)
    print(f"dense columns hold {work['dense_share_of_nnz']:.0%} of the non-zeros; per query (exact) "
          f"{work['dense_codes_per_query'] / 1e6:.2f}M dense codes and {work['list_postings_per_query'] / 1e6:.2f}M "
          "list postings", flush=True)
    result = {"n": len(docs), "nnz": docs.nnz, "build_s": build_s, "stats": st, "work": work, "rows": []}
    if args.save:
        t = time.perf_counter()
        index.save(args.save)
        save_s = time.perf_counter() - t
        t = time.perf_counter()
        index = InvertedIndex.load(args.save)
        load_s = time.perf_counter() - t
        print(f"save {save_s:.1f} s; load (mmap, crc32 verified) {load_s:.1f} s", flush=True)
        result.update(save_s=save_s, load_s=load_s)

    # scipy exact: only the columns of the query terms (a CSC slice), like an inverted index would
    csc = docs.to_scipy().tocsc()

    def scipy_one(q):
        idx, val = q.row(0)
        s = csc[:, idx] @ val
        top = np.argpartition(-s, args.k)[: args.k]
        return top[np.lexsort((top, -s[top]))]

    settings = [("tokenspace exact", {})] + [
        (f"tokenspace {name}", opts) for name, opts in SETTINGS[1:]
    ] + [(f"tokenspace {o}", dict(json.loads(o), mode="approx")) for o in
         [json.dumps(x) for x in json.loads(args.settings or "[]")]]
    for _, opts in settings:  # compile, and fault the memory-mapped index in
        index.search(qs, k=args.k, **opts)
    fns = [("scipy exact (CSC columns)", scipy_one)] + [
        (name, lambda q, o=opts: index.search(q, k=args.k, **o)[0]) for name, opts in settings]
    best: dict[str, tuple] = {}
    for _ in range(args.rounds):
        for name, fn in fns:
            lat, got = timed(fn, qs)
            if name not in best or lat.mean() < best[name][0].mean():
                best[name] = (lat, got)
    truth = [{h.id for h in hits} for hits in best["tokenspace exact"][1]]
    rows = []
    for name, _ in fns:
        lat, got = best[name]
        rec = None
        if name.startswith("tokenspace"):
            rec = float(np.mean([len({h.id for h in g} & t) / max(1, len(t)) for g, t in zip(got, truth)]))
        rows.append(row(name, lat, rec))
    for name, opts in settings[:2]:
        dt = min(_batch_time(index, qs, args.k, args.threads, opts) for _ in range(args.rounds))
        rows.append({"setting": f"{name} batch threads={args.threads}", "qps": len(qs) / dt,
                     "mean_ms": None, "p99_ms": None, "recall@10": None, "note": "batch"})
    base = rows[0]["qps"]
    print(f"\n{'setting':44s} {'QPS':>8s} {'x scipy':>8s} {'mean ms':>8s} {'p99 ms':>8s} {'recall':>7s}")
    for r in rows:
        f = lambda v, fmt: (fmt % v) if v is not None else "-"  # noqa: E731
        print(f"{r['setting']:44s} {r['qps']:8.1f} {r['qps'] / base:8.2f} {f(r['mean_ms'], '%8.2f'):>8s} "
              f"{f(r['p99_ms'], '%8.2f'):>8s} {f(r['recall@10'], '%7.3f'):>7s}")
    result["rows"] = rows
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0

