"""Measure one peer in this process: build, then per setting one-query-at-a-time and batched search.

Run by search_speed.py as ``python -m benchmarks.peers.worker PEER DATA_DIR N_DOCS OUT.json ...`` in a
fresh process, so that thread-pool sizes (fixed by environment variables at first use), RSS deltas
and crashes belong to this peer alone. Writes one JSON object to OUT.json: measurements, or
``{"error": reason}`` when the engine cannot be imported, built or run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks.peers import PEERS
from benchmarks.peers.common import Timer, load_corpus, rss_bytes

WARMUP = 5


def recall_at(results, gt, k) -> float:
    """Mean |top-k returned  ∩  exact top-k| / |exact top-k| over queries (queries with no answer skipped)."""
    vals = []
    for res, truth in zip(results, gt):
        truth = truth[truth >= 0][:k]
        if len(truth):
            vals.append(len(set(np.asarray(res[:k]).tolist()) & set(truth.tolist())) / len(truth))
    return float(np.mean(vals)) if vals else float("nan")


def peer_class(name: str) -> type:
    """The Peer class of engine ``name`` (importing it does not import the engine's library)."""
    module, cls = PEERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_peer(name: str, options: dict | None = None):
    """The peer, built with ``options`` (its constructor's keywords: build parameters, settings to sweep)."""
    return peer_class(name)(**(options or {}))


def measure(peer, corpus, workdir, gt, k, n_single, batch_size, threads, repeats=1) -> dict:
    """Build, then time every setting one query at a time ``repeats`` times (passes over all settings in
    turn, so that a noisy minute on the shared machine hits one pass of several settings, not every
    pass of one; the QPS reported is the median pass, each pass's QPS is kept), then batched once."""
    rows = np.arange(len(corpus.q_indptr) - 1)
    single_rows = rows[:n_single]
    peer.prepare(corpus)
    own = peer.exact_gt(corpus, k)
    if own is not None:
        gt = own
    rss0 = rss_bytes()
    with Timer() as t_build:
        peer.build(corpus, workdir)
    rss1 = rss_bytes()
    out = {"peer": peer.name, "build_s": t_build.seconds, "rss_delta_bytes": rss1 - rss0,
           "index_bytes": peer.index_bytes(workdir), "raw_csr_bytes": corpus.raw_csr_bytes(),
           "settings": []}
    settings = peer.settings()
    lats = {label: [] for label, _ in settings}
    answers = {}
    for rep in range(repeats):
        for label, setting in settings:
            def one(r, setting=setting):
                idx, val = corpus.query(int(r))
                return peer.search_one(idx, val, k, qrow=int(r), **setting)

            if rep == 0:
                for r in single_rows[:WARMUP]:
                    one(r)
            lat, res1 = [], []
            for r in single_rows:
                t0 = time.perf_counter()
                res1.append(one(r))
                lat.append(time.perf_counter() - t0)
            lats[label].append(np.array(lat))
            answers[label] = res1
    for label, setting in settings:
        qps = [len(lat) / lat.sum() for lat in lats[label]]
        lat = np.concatenate(lats[label])
        peer.search_batch(corpus, rows[:min(len(rows), batch_size)], k, threads, **setting)  # warm-up
        resb = []
        t0 = time.perf_counter()
        for s in range(0, len(rows), batch_size):
            resb.extend(peer.search_batch(corpus, rows[s:s + batch_size], k, threads, **setting))
        tb = time.perf_counter() - t0
        out["settings"].append({
            "setting": label,
            "single_queries": len(single_rows), "single_qps": float(np.median(qps)),
            "single_qps_runs": [round(q, 1) for q in qps],
            "single_mean_ms": 1e3 * lat.mean(), "single_p99_ms": 1e3 * float(np.quantile(lat, 0.99)),
            "single_recall": recall_at(answers[label], gt[single_rows], k),
            "batch_queries": len(rows), "batch_size": batch_size, "batch_threads": threads,
            "batch_qps": len(rows) / tb, "batch_recall": recall_at(resb, gt, k),
        })
        print(f"[{peer.name}] {label}: {out['settings'][-1]}", file=sys.stderr, flush=True)
    out["notes"] = peer.notes
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=sorted(PEERS))
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("n_docs", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gt", type=Path, required=True, help=".npy [n_queries, k] exact top-k doc rows")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--single", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1, help="passes of the one-at-a-time timing (median QPS)")
    ap.add_argument("--batch-size", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--options", type=json.loads, default=None,
                    help="JSON keywords for the peer's constructor (benchmarks/real_engines.py's sweeps)")
    a = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{a.peer}-", dir=a.workdir))
    try:
        try:
            peer = make_peer(a.peer, a.options)
        except ImportError as e:
            raise RuntimeError(f"not installed ({e}); pip install 'tokenspace[bench]'") from e
        corpus = load_corpus(a.data_dir, a.n_docs)
        gt = np.load(a.gt)
        result = measure(peer, corpus, workdir, gt, a.k, a.single, a.batch_size, a.threads, a.repeats)
        peer.close()
    except Exception as e:  # noqa: BLE001 - the harness reports every failure in the table with its reason
        traceback.print_exc()
        kind = "not installed" if isinstance(e, ImportError) else type(e).__name__
        result = {"peer": a.peer, "error": f"{kind}: {e}"[:400]}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    a.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
