"""Engines raced in one process, their timing passes interleaved: ratios that host noise cannot tilt.

    python benchmarks/head_to_head.py --corpus-dir bench-data/real-text --name real-text-967K \
        --peer tokenspace '{"settings": [["qm=0.65 a=0.9 rerank=50", {"mode": "approx", "query_mass": 0.65, "alpha": 0.9, "rerank": 50}]]}' \
        --peer seismic '{"build": {"n_postings": 9668}, "settings": [["qc=10 hf=1.0", {"query_cut": 10, "heap_factor": 1.0}]]}' \
        --peer pisa '{}'

real_engines.py runs each engine in its own process, one after the other, so a slow quarter of an hour
on the shared machine lands on one engine and tilts the ratio (the same code measured 1.45x and 1.58x
over Seismic in two runs). Here every engine is built first, in this process, and then each pass times
every setting of every engine one query at a time (1,000 queries, the worker's timing), the engines'
order rotating from pass to pass; a noisy minute hits a few settings of one pass, not one engine. The
targets are read per pass: the fastest setting of each engine whose recall@10 reaches the target, and
the ratio of the two within that pass; the median and range of those per-pass ratios are reported.
Recall does not depend on timing, so it is computed once. Writes
benchmarks/results/head_to_head-<name>.json, the recall-vs-QPS plot docs/head_to_head-<name>.png, and
prints the table.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `python benchmarks/head_to_head.py` imports benchmarks.*

from benchmarks.peers import PEERS  # noqa: E402
from benchmarks.peers.common import Timer, corpus_size, load_corpus  # noqa: E402
from benchmarks.peers.worker import WARMUP, make_peer, peer_class, recall_at  # noqa: E402
from benchmarks.search_speed import ground_truth, machine  # noqa: E402

K = 10
TARGETS = (0.95, 0.99)


def time_pass(peer, corpus, rows, setting) -> tuple[float, list]:
    """QPS of one pass of one-at-a-time queries, and the answers."""
    answers, total = [], 0.0
    for r in rows:
        idx, val = corpus.query(int(r))
        t0 = time.perf_counter()
        answers.append(peer.search_one(idx, val, K, qrow=int(r), **setting))
        total += time.perf_counter() - t0
    return len(rows) / total, answers


def race(peers: list, corpus, gt, n_single: int, passes: int) -> list[dict]:
    """Every (engine, setting) timed in ``passes`` interleaved passes; rows with recall and each pass's QPS."""
    rows = np.arange(min(n_single, len(corpus.q_indptr) - 1))
    cells = [(peer, label, setting) for peer in peers for label, setting in peer.settings()]
    out = {(p.name, label): {"engine": p.name, "setting": label, "qps_passes": []} for p, label, _ in cells}
    for p, _, setting in cells:  # warm-up (recall is taken from the first timed pass: answers do not change)
        time_pass(p, corpus, rows[:WARMUP], setting)
    for rep in range(passes):
        shift = rep % len(peers)  # rotate which engine goes first
        order = [c for p in peers[shift:] + peers[:shift] for c in cells if c[0] is p]
        for p, label, setting in order:
            qps, answers = time_pass(p, corpus, rows, setting)
            row = out[(p.name, label)]
            row["qps_passes"].append(round(qps, 1))
            if "recall" not in row:
                row["recall"] = recall_at(answers, gt[rows], K)
        print(f"pass {rep + 1}/{passes} done", file=sys.stderr, flush=True)
    for row in out.values():
        row["qps"] = float(np.median(row["qps_passes"]))
    return list(out.values())


def best_per_pass(rows: list[dict], engine: str, target: float) -> list[tuple[float, str] | None]:
    """Per pass, the fastest setting of ``engine`` whose recall reaches ``target``: (QPS, setting)."""
    ok = [r for r in rows if r["engine"] == engine and r["recall"] >= target]
    n = max((len(r["qps_passes"]) for r in rows), default=0)
    return [max(((r["qps_passes"][i], r["setting"]) for r in ok), default=None) for i in range(n)]


def ratios(rows: list[dict], a: str, b: str, target: float | None) -> dict | None:
    """Per pass QPS of engine a over engine b (at a recall target: each one's fastest setting reaching
    it that pass; target None: their 'exact' / 'maxscore' settings)."""
    if target is None:
        pick = {e: [r for r in rows if r["engine"] == e and r["setting"] in ("exact", "maxscore")] for e in (a, b)}
        if not pick[a] or not pick[b]:
            return None
        per = [x / y for x, y in zip(pick[a][0]["qps_passes"], pick[b][0]["qps_passes"])]
    else:
        pa, pb = best_per_pass(rows, a, target), best_per_pass(rows, b, target)
        if not pa or any(x is None for x in pa + pb):
            return None
        per = [x[0] / y[0] for x, y in zip(pa, pb)]
    return {"per_pass": [round(r, 3) for r in per], "median": float(np.median(per)), "min": min(per), "max": max(per)}


def plot(report: dict, path: Path) -> None:
    """recall@10 against QPS, one point per (engine, setting) at its median pass with the range of its
    passes as a bar, and each engine's Pareto front."""
    import matplotlib  # start-up: only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    from benchmarks.real_engines import pareto, recall_qps_axes

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for engine in dict.fromkeys(r["engine"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["engine"] == engine]
        xs, ys = [r["recall"] for r in rows], [r["qps"] for r in rows]
        lo = [r["qps"] - min(r["qps_passes"]) for r in rows]
        hi = [max(r["qps_passes"]) - r["qps"] for r in rows]
        bars = ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=3, alpha=0.35, elinewidth=0.8)
        front = pareto([(r["recall"], r["qps"], r["setting"]) for r in rows])
        ax.plot([f[0] for f in front], [f[1] for f in front], "-o", ms=3, color=bars[0].get_color(), label=engine)
    recall_qps_axes(ax, 0.8, "queries / s, one at a time on one core")
    ax.set_title(f"{report['corpus']}: {report['n_docs']:,} docs, {report['single_queries']:,} queries, "
                 f"{report['passes']} interleaved passes ({report['date']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True, help="a corpus from benchmarks/real_corpus.py")
    ap.add_argument("--peer", nargs=2, action="append", required=True, metavar=("ENGINE", "OPTIONS"),
                    help="an engine and its constructor options as JSON (build, settings; \"label\": the name "
                         "of its rows, for a second build of an engine); repeatable")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--single", type=int, default=1000, help="queries timed one at a time per setting and pass")
    ap.add_argument("--name", default=None)
    a = ap.parse_args(argv)
    if not (a.corpus_dir / "d_indptr.npy").exists():
        ap.error(f"{a.corpus_dir} holds no corpus (d_indptr.npy): build one with benchmarks/real_corpus.py")
    try:
        specs = [(engine, json.loads(opts)) for engine, opts in a.peer]
    except json.JSONDecodeError as e:
        ap.error(f"--peer OPTIONS must be JSON: {e}")
    labels = [opts.get("label", engine) for engine, opts in specs]
    if len(set(labels)) < len(labels):
        ap.error(f"two peers are named alike ({', '.join(labels)}): give a second build of an engine a \"label\"")
    unknown = sorted({engine for engine, _ in specs} - set(PEERS))
    if unknown:
        ap.error(f"unknown engine(s) {', '.join(unknown)}: pick from {', '.join(sorted(PEERS))}")
    # before any build: a missing engine library would otherwise end the race after minutes of building
    missing = dict.fromkeys(f"{m} (for {engine})" for engine, _ in specs for m in peer_class(engine).requires
                            if importlib.util.find_spec(m) is None)
    if missing:
        ap.error(f"not installed: {', '.join(missing)}; the engines are the bench extra: pip install -e '.[bench]'")
    # no thread limits: builds may use every core; a single search of each peer runs on the calling thread
    # (Seismic's search, PISA's query, tokenspace's threads=1), so the race is one core per query
    n = corpus_size(a.corpus_dir)
    corpus = load_corpus(a.corpus_dir, n)
    gt = np.load(ground_truth(a.corpus_dir, n, K))
    workdir = Path(tempfile.mkdtemp(prefix="head-to-head-", dir=a.corpus_dir))
    peers, builds = [], []
    try:
        for i, (engine, opts) in enumerate(specs):
            peer = make_peer(engine, {key: v for key, v in opts.items() if key != "label"})
            peer.name = labels[i]
            peer.prepare(corpus)
            (workdir / str(i)).mkdir()
            with Timer() as t:
                peer.build(corpus, workdir / str(i))
            builds.append({"engine": peer.name, "options": opts.get("build", {}), "build_s": t.seconds,
                           "index_bytes": peer.index_bytes(workdir / str(i))})
            print(f"built {peer.name} in {t.seconds:.0f} s", file=sys.stderr, flush=True)
            peers.append(peer)
        rows = race(peers, corpus, gt, a.single, a.passes)
    finally:
        for p in peers:
            p.close()
        shutil.rmtree(workdir, ignore_errors=True)
    name = a.name or a.corpus_dir.name
    # every build of the first engine against every other engine
    firsts = [p.name for p, (engine, _) in zip(peers, specs) if engine == specs[0][0]]
    others = [p.name for p, (engine, _) in zip(peers, specs) if engine != specs[0][0]]
    report = {"corpus": name, "n_docs": n, "k": K, "passes": a.passes, "single_queries": a.single,
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
              "command": "python benchmarks/head_to_head.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "load_avg_1min_end": os.getloadavg()[0], "builds": builds, "rows": rows,
              "ratios": {f"{first}/{o} @{t if t else 'exact'}": ratios(rows, first, o, t)
                         for first in firsts for o in others for t in (*TARGETS, None)}}
    print("| engine | setting | recall@10 | QPS (median pass) | passes |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['setting']} | {r['recall']:.3f} | {r['qps']:,.0f} | "
              f"{' / '.join(f'{q:,.0f}' for q in r['qps_passes'])} |")
    for key, val in report["ratios"].items():
        if val:
            print(f"{key}: median {val['median']:.2f}x (passes {', '.join(f'{x:.2f}' for x in val['per_pass'])})")
    out = ROOT / "benchmarks/results" / f"head_to_head-{name}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    png = ROOT / "docs" / f"head_to_head-{name}.png"
    plot(report, png)
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    main()
