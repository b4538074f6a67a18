"""Search speed of tokenspace's InvertedIndex against its peers, side by side in one run.

    make bench                                           # = python -m benchmarks.engines speed (bench-1M)
    python -m benchmarks.engines speed --corpus 100k      # bench-100K: the first 100K docs of bench-1M
    python -m benchmarks.engines speed --quick            # fewer queries, for a smoke run
    python -m benchmarks.engines speed --peers tokenspace,scipy
    python -m benchmarks.engines speed --corpus-dir bench-data/stair-1M   # from benchmarks/fitted_corpus.py

The corpus is the project's standard one, made by ../shared/bench/gen_corpus.py into bench-data/
(git-ignored) when missing. Every peer runs in its own process (benchmarks/peers/worker.py): built
once, then per setting (a) one query at a time on 1 thread -- QPS, mean and p99 latency -- and
(b) batches of queries on 2 threads -- QPS; recall@10 against the exact answer (scipy) for both;
build time, RSS delta across the build, index size on disk against the raw CSR size. A peer that
fails to install, build or run is a row with its reason, never silently dropped.

Writes benchmarks/results/search_speed[-100k].json and the markdown table into docs/benchmarks.md
(between markers per corpus, so the 100K and 1M tables live side by side).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import corpus_size, ensure_corpus, ground_truth, machine
from benchmarks.peers import PEERS
from benchmarks.report import markdown_table, print_table, update_docs

CORPORA = {"100k": 100_000, "1m": 1_000_000}
K = 10
# thread pools are sized once per process from these, before any engine is imported; the one-query
# measurements then ask each engine for 1 thread where it has a knob (see each peer)
THREAD_ENV = ("OMP_NUM_THREADS", "RAYON_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS",
              "OPENBLAS_NUM_THREADS")


def run_peer(name, data_dir, n_docs, gt, args) -> dict:
    # per corpus size: two runs (100K and 1M) may be measuring the same peer at once
    out = ROOT / "benchmarks/results" / f".worker-{name}-{n_docs}{getattr(args, 'tag', '')}.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, **{v: str(args.threads) for v in THREAD_ENV})
    cmd = [sys.executable, "-m", "benchmarks.peers.worker", name, str(data_dir), str(n_docs), str(out),
           "--gt", str(gt), "--k", str(K), "--single", str(args.single), "--batch-size", str(args.batch_size),
           "--threads", str(args.threads), "--workdir", str(args.workdir)]
    if getattr(args, "repeats", 1) > 1:  # real_engines.py: median of several one-at-a-time passes
        cmd += ["--repeats", str(args.repeats)]
    if getattr(args, "options", None):  # real_engines.py: build parameters / settings for this run
        cmd += ["--options", json.dumps(args.options)]
    t0 = time.time()
    load0 = os.getloadavg()[0]  # the machine is shared: say how busy it was while this peer ran
    log = out.with_suffix(".log")
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout,
                                  check=False)
    except subprocess.TimeoutExpired:
        return {"peer": name, "error": f"timed out after {args.timeout:.0f} s"}
    if out.exists():
        res = json.loads(out.read_text())
        out.unlink()
    else:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        res = {"peer": name, "error": f"worker died (exit {proc.returncode}): {' | '.join(tail)}"[:400]}
    res["wall_s"] = time.time() - t0
    res["load_avg_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return res


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="1m")
    ap.add_argument("--quick", action="store_true", help="100 one-at-a-time queries, 200 batched")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of: " + ",".join(PEERS))
    ap.add_argument("--data", type=Path, default=ROOT / "bench-data")
    ap.add_argument("--corpus-dir", type=Path, default=None,
                    help="a corpus directory in gen_corpus.py's layout instead of bench-1M, e.g. one written by "
                         "benchmarks/fitted_corpus.py (all its docs are used; --corpus is ignored)")
    ap.add_argument("--single", type=int, default=None, help="queries timed one at a time (default 1000)")
    ap.add_argument("--batch-size", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2, help="threads for the batched runs")
    ap.add_argument("--timeout", type=float, default=5400, help="seconds per peer before it is reported as timed out")
    ap.add_argument("--workdir", type=Path, default=None, help="where indexes are built (default: bench-data/work)")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--out", type=Path, default=None, help="results JSON (default benchmarks/results/search_speed*.json)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other peers' rows of the existing results JSON (their command/date are kept "
                         "per row): for re-measuring one peer without rebuilding the slow ones")
    args = ap.parse_args(argv)
    args.single = args.single or (100 if args.quick else 1000)
    args.workdir = args.workdir or args.data / "work"
    args.workdir.mkdir(parents=True, exist_ok=True)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        ap.error(f"unknown peers {unknown}; choose from {list(PEERS)}")

    if args.corpus_dir:
        data_dir = args.corpus_dir
        n_docs = corpus_size(data_dir)
        args.corpus = data_dir.name
    else:
        data_dir = ensure_corpus(args.data)
        n_docs = CORPORA[args.corpus]
    gt = ground_truth(data_dir, n_docs, K)
    command = "python -m benchmarks.engines speed " + " ".join(argv if argv is not None else sys.argv[1:])
    name = args.corpus_dir.name if args.corpus_dir else f"bench-{args.corpus.upper()}"
    report = {"corpus": name, "n_docs": n_docs, "k": K, "command": command.strip(),
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
              "threads_batch": args.threads, "single_queries": args.single, "batch_size": args.batch_size,
              "results": []}
    suffix = "" if args.corpus == "1m" else f"-{args.corpus.lower()}"
    suffix += "-quick" if args.quick else ""
    out = args.out or ROOT / "benchmarks/results" / f"search_speed{suffix}.json"
    for name in peers:
        print(f"--- {name}", flush=True)
        res = run_peer(name, data_dir, n_docs, gt, args)
        res["run"] = {"command": report["command"], "date": report["date"]}
        print(json.dumps(res)[:600], flush=True)
        report["results"].append(res)
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        kept = [r for r in old["results"] if r["peer"] not in peers]
        for r in kept:
            r.setdefault("run", {"command": old["command"], "date": old["date"]})
        order = list(PEERS)
        report["results"] = sorted(kept + report["results"], key=lambda r: order.index(r["peer"]))
        report["command"] = "; ".join(dict.fromkeys(r["run"]["command"] for r in report["results"]))
    out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    if not args.no_docs:
        update_docs(ROOT / "docs/benchmarks.md", report, markdown_table(report))
    print(f"wrote {out}" + ("" if args.no_docs else " and docs/benchmarks.md"))


