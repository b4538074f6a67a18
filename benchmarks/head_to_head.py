"""Engines raced in one process, their timing passes interleaved: ratios that host noise cannot tilt.

    python -m benchmarks.head_to_head --corpus-dir bench-data/real-text --name real-text-967K \
        --peer tokenspace '{"settings": [["qm=0.65 a=0.9 rerank=50", {"mode": "approx", "query_mass": 0.65, "alpha": 0.9, "rerank": 50}]]}' \
        --peer seismic '{"build": {"n_postings": 9668}, "settings": [["qc=10 hf=1.0", {"query_cut": 10, "heap_factor": 1.0}]]}' \
        --peer pisa '{}'

real_engines.py runs each engine in its own process, one after the other, so a slow quarter of an hour
on the shared machine lands on one engine and tilts the ratio (the same code measured 1.45x and 1.58x
over Seismic in two runs). Here every engine is built first, in this process, and then each pass times
every setting of every engine one query at a time (1,000 queries, the worker's timing), --chunk queries at
a time (100: every setting runs the first 100, then every setting the next 100, ...), the engines' order
rotating from pass to pass; a noisy minute hits every setting of a pass alike, not one engine. The
targets are read per pass: the fastest setting of each engine whose recall@10 reaches the target, and
the ratio of the two within that pass; the median and range of those per-pass ratios are reported.
Recall does not depend on timing, so it is computed once.

Each build is timed with its engine's library loaded (Peer.load): the index's build, not a fresh
process's start-up. Several builds of one engine (labels "sindi-p40", "sindi-p0", ...) race as one
family: the family ratios take, per pass, the fastest setting of any build of each engine. After the builds the process is
pinned to one core (--pin-core; builds may use them all), so one query at a time is one core's work.
--screen N first times every setting once on N queries and keeps for the timed passes only the settings
no other setting of the same engine beats by 15% in speed at an equal or higher recall on those queries
from a build no larger (a wide grid costs one short pass, the race is run on the front; a lean build
stays for the size-capped ratio below). Each engine searches its queries in the
form its search call takes, made before the timer (Peer.prepare_queries: tokenspace's `search()` gets a
one-row SparseBatch, as from a model's encoder). --batch-threads T then times each kept setting's batch
call (the engine's own multi-threaded batch search; SINDI, which has none, in T forked worker processes)
over --batch-queries queries on T threads (unpinned), in --batch-passes interleaved passes with the
engines' order rotated, and reports the batch QPS ratios at each recall target by wall time
(batch_family_ratios); --batch-only runs that race alone (no one-query passes).
Writes benchmarks/results/head_to_head-<name>.json
(starting with the run record: date, commit, machine, command), the recall-vs-QPS plot
benchmarks/results/head_to_head-<name>.png, and prints the table. The index-size target's ratio (the
first engine's builds no larger than the other engine's smallest build reaching each recall target,
size_capped_ratios) is in the JSON too, and for races written before it:

    python -m benchmarks.head_to_head size-capped benchmarks/results/head_to_head-NAME.json ...
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ground_truth, run_record, write_json
from benchmarks.peers import PEERS
from benchmarks.peers.common import Timer, corpus_size, load_corpus
from benchmarks.peers.worker import WARMUP, make_peer, peer_class, recall_at

ROOT = Path(__file__).resolve().parents[1]
K = 10
TARGETS = (0.95, 0.99)
FAMILY_TARGETS = (0.90, 0.95, 0.99)
EXACT_LABELS = ("exact", "maxscore", "exhaustive")  # each engine's exact setting, whatever it calls it
SCREEN_SLACK = 1.15  # screened out: a setting of its engine, on a build no larger, this much faster at >= recall


def time_pass(peer, corpus, rows, setting) -> tuple[float, list, float]:
    """QPS of one pass of one-at-a-time queries, the answers, and the QPS by this process's CPU time.

    The CPU-time QPS leaves out the time this process waited for a core: on a shared machine (load
    above the core count) wall time measures the neighbours as much as the engine, CPU time much less
    (an A/B of one kernel against itself: +-20% a pass by wall time, +-2% by CPU time). Every engine's
    one-query search runs on the calling thread, so the process's CPU time is the query's."""
    answers, total, cpu = [], 0.0, 0.0
    for r in rows:
        idx, val = corpus.query(int(r))
        c0 = time.process_time()
        t0 = time.perf_counter()
        answers.append(peer.search_one(idx, val, K, qrow=int(r), **setting))
        total += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return len(rows) / total, answers, len(rows) / max(cpu, 1e-9)


def screen(cells, corpus, gt, n: int, size: dict) -> tuple[list, dict]:
    """Time every cell once on ``n`` queries; keep the cells on their family's front (``front``; ``size``:
    index bytes by build name)."""
    rows = np.arange(min(n, len(corpus.q_indptr) - 1))
    seen = {}
    for p, label, setting in cells:
        time_pass(p, corpus, rows[:WARMUP], setting)
        _, answers, qps = time_pass(p, corpus, rows, setting)
        seen[(p.name, label)] = (recall_at(answers, gt[rows], K), qps)
    keep = front(cells, seen, size)
    return keep, {f"{e} | {lab}": {"recall": round(r, 4), "qps": round(q, 1)} for (e, lab), (r, q) in seen.items()}


def front(cells, seen: dict, size: dict) -> list:
    """The cells no other cell of the same family beats by SCREEN_SLACK in speed at an equal or higher
    recall from a build no larger (``size``: index bytes by build name; a build of unknown size is never
    the smaller), and every exact setting. Size counts because the index-size target races only the
    builds under a cap (size_capped_ratios): a lean build beaten by a larger one of its family stays."""
    def no_larger(o, p) -> bool:
        so, sp = size.get(o.name), size.get(p.name)
        return (so is None and sp is None) or (so is not None and sp is not None and so <= sp)

    keep = []
    for p, label, setting in cells:
        r, q = seen[(p.name, label)]
        beaten = any(getattr(o, "family", o.name) == getattr(p, "family", p.name) and (o.name, lab) != (p.name, label)
                     and seen[(o.name, lab)][0] >= r and seen[(o.name, lab)][1] >= SCREEN_SLACK * q
                     and no_larger(o, p) for o, lab, _ in cells)
        if label in EXACT_LABELS or not beaten:
            keep.append((p, label, setting))
    return keep


def race(peers: list, corpus, gt, n_single: int, passes: int, cells: list | None = None,
         deadline: float | None = None, chunk: int = 0) -> list[dict]:
    """Every (engine, setting) timed in ``passes`` interleaved passes; rows with recall and each pass's QPS.
    ``deadline`` (a time.monotonic() value): no pass starts after it, so a run on a machine lent for a
    fixed time reports the passes it finished (at least one) instead of nothing.

    ``chunk`` > 0: a pass runs its queries ``chunk`` at a time, every cell on each chunk before the next
    one (the cells' order reversed from chunk to chunk), and a cell's QPS in the pass is over all its
    chunks. A pass of a wide race lasts minutes, and this machine's speed changes within minutes (the
    same kernel, one core, 230 then 400 us a query): timed cell after cell, the two engines' best
    settings could land in different phases of one pass (per-pass ratios 1.3x-3.6x in one run);
    chunk by chunk, every cell sees every phase. 0: each cell's queries in one go, as before."""
    rows = np.arange(min(n_single, len(corpus.q_indptr) - 1))
    if cells is None:
        cells = [(peer, label, setting) for peer in peers for label, setting in peer.settings()]
    out = {(p.name, label): {"engine": p.name, "family": getattr(p, "family", p.name), "setting": label,
                             "qps_passes": [], "cpu_qps_passes": []} for p, label, _ in cells}
    for p, _, setting in cells:  # warm-up (recall is taken from the first timed pass: answers do not change)
        time_pass(p, corpus, rows[:WARMUP], setting)
    step = chunk if chunk > 0 else len(rows)
    parts = [rows[s:s + step] for s in range(0, len(rows), step)]
    for rep in range(passes):
        if rep and deadline is not None and time.monotonic() > deadline:
            print(f"deadline: {rep} of {passes} passes run", file=sys.stderr, flush=True)
            break
        shift = rep % len(peers)  # rotate which engine goes first
        order = [c for p in peers[shift:] + peers[:shift] for c in cells if c[0] is p]
        spent = {(p.name, label): [0.0, 0.0, []] for p, label, _ in cells}  # wall s, CPU s, answers
        for i, part in enumerate(parts):
            for p, label, setting in (order if i % 2 == 0 else order[::-1]):
                qps, answers, cpu_qps = time_pass(p, corpus, part, setting)
                acc = spent[(p.name, label)]
                acc[0] += len(part) / qps
                acc[1] += len(part) / cpu_qps
                acc[2] += answers
        for key, (wall, cpu, answers) in spent.items():
            row = out[key]
            row["qps_passes"].append(round(len(rows) / wall, 1))
            row["cpu_qps_passes"].append(round(len(rows) / max(cpu, 1e-9), 1))
            if "recall" not in row:
                row["recall"] = recall_at(answers, gt[rows], K)
        print(f"pass {rep + 1}/{passes} done", file=sys.stderr, flush=True)
    for row in out.values():
        row["qps"] = float(np.median(row["qps_passes"]))
        row["cpu_qps"] = float(np.median(row["cpu_qps_passes"]))
    return list(out.values())


def batch_race(peers, cells, corpus, gt, n_queries: int, threads: int, passes: int = 1, batch_size: int = 250,
               deadline: float | None = None) -> dict:
    """Each cell's batch call over the first ``n_queries`` queries, ``batch_size`` at a time on ``threads``
    threads, in ``passes`` interleaved passes (the engines' order rotated): per cell its QPS per pass (wall
    time: the work is spread over threads or processes), their median and the recall."""
    rows = np.arange(min(n_queries, len(corpus.q_indptr) - 1))
    out, live = {}, []
    for p, label, setting in cells:
        try:  # warm-up: a first call's compilations, pools and plans are not timed
            p.search_batch(corpus, rows[:min(len(rows), batch_size)], K, threads, **setting)
        except NotImplementedError:
            continue
        live.append((p, label, setting))
        out[(p.name, label)] = {"batch_qps_passes": [], "batch_threads": threads, "batch_queries": len(rows),
                                "batch_size": batch_size}
    for rep in range(passes):
        if rep and deadline is not None and time.monotonic() > deadline:
            print(f"deadline: {rep} of {passes} batch passes run", file=sys.stderr, flush=True)
            break
        shift = rep % len(peers)
        order = [c for p in peers[shift:] + peers[:shift] for c in live if c[0] is p]
        for p, label, setting in order:
            res = []
            t0 = time.perf_counter()
            for s in range(0, len(rows), batch_size):
                res.extend(p.search_batch(corpus, rows[s:s + batch_size], K, threads, **setting))
            dt_ = time.perf_counter() - t0
            row = out[(p.name, label)]
            row["batch_qps_passes"].append(round(len(rows) / dt_, 1))
            if "batch_recall" not in row:
                row["batch_recall"] = recall_at(res, gt[rows], K)
        print(f"batch pass {rep + 1}/{passes} done", file=sys.stderr, flush=True)
    for row in out.values():
        row["batch_qps"] = float(np.median(row["batch_qps_passes"]))
    return out


def best_per_pass(rows: list[dict], engine: str, target: float, key: str = "engine",
                  field: str = "qps_passes") -> list[tuple[float, str] | None]:
    """Per pass, the fastest setting of ``engine`` (rows whose ``key`` is it: "engine" = one build,
    "family" = every build of an engine) whose recall reaches ``target``: (QPS, setting). field:
    "qps_passes" (wall time) or "cpu_qps_passes" (CPU time)."""
    ok = [r for r in rows if r.get(key, r["engine"]) == engine and r["recall"] >= target]
    n = max((len(r.get(field, [])) for r in rows), default=0)
    return [max(((r[field][i], r["setting"]) for r in ok), default=None) for i in range(n)]


def ratios(rows: list[dict], a: str, b: str, target: float | None, key: str = "engine",
           field: str = "qps_passes") -> dict | None:
    """Per pass QPS of engine a over engine b (at a recall target: each one's fastest setting reaching
    it that pass; target None: their exact settings, EXACT_LABELS, the fastest where several builds)."""
    if target is None:
        rows = [r for r in rows if r["setting"].split()[-1] in EXACT_LABELS]
        target = 0.0
    pa, pb = best_per_pass(rows, a, target, key, field), best_per_pass(rows, b, target, key, field)
    if not pa or any(x is None for x in pa + pb):
        return None
    per = [x[0] / y[0] for x, y in zip(pa, pb)]
    out = {"per_pass": [round(r, 3) for r in per], "median": float(np.median(per)), "min": min(per), "max": max(per)}
    med = lambda picks: sorted(picks)[len(picks) // 2]  # noqa: E731 - the median pass's (QPS, setting)
    out["a"], out["b"] = [{"qps": q, "setting": lab} for q, lab in (med(pa), med(pb))]
    return out


def size_capped_ratios(report: dict, field: str = "cpu_qps_passes") -> dict:
    """The index-size target's ratio: at each recall target, the first engine's builds no larger than the
    smallest build of the other engine that reaches it, against every build of the other engine (ratios
    by family, per pass); with "cap_bytes", that smallest build's size. None where no build fits."""
    size = {b["engine"]: b["index_bytes"] for b in report["builds"]}
    rows = report["rows"]
    fams = list(dict.fromkeys(r["family"] for r in rows))
    out = {}
    for o in fams[1:]:
        for t in FAMILY_TARGETS:
            reach = [size[r["engine"]] for r in rows if r["family"] == o and r["recall"] >= t and size.get(r["engine"])]
            if not reach:
                out[f"{fams[0]}/{o} @{t}"] = None
                continue
            cap = min(reach)
            kept = [r for r in rows if r["family"] != fams[0] or (size.get(r["engine"]) or cap + 1) <= cap]
            r = ratios(kept, fams[0], o, t, "family", field)
            out[f"{fams[0]}/{o} @{t}"] = None if r is None else {**r, "cap_bytes": cap}
    return out


def verdict(report: dict, which: str = "family_ratios") -> str:
    """The markdown table: the first engine's family over every other family at each recall target
    (which: "family_ratios" by wall time, "family_ratios_cpu" by CPU time)."""
    fams = list(dict.fromkeys(r["family"] for r in report["rows"]))
    first, lines = fams[0], []
    head = " | ".join(f">= {t}" for t in FAMILY_TARGETS)
    lines += [f"| {first} / peer, QPS at matched recall@10 | {head} | exact |", "|---|" + "---|" * (len(FAMILY_TARGETS) + 1)]
    for o in fams[1:]:
        cells = []
        for t in (*FAMILY_TARGETS, None):
            r = report[which].get(f"{first}/{o} @{t if t else 'exact'}")
            cells.append(f"**{r['median']:.2f}x** ({r['min']:.2f}-{r['max']:.2f})" if r else "-")
        lines.append(f"| {o} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """recall@10 against QPS, one point per (engine, setting) at its median pass with the range of its
    passes as a bar, and each engine's Pareto front."""
    import matplotlib  # start-up: only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg")

    from benchmarks.real_engines import pareto, recall_qps_axes

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    batch = not report["single_queries"]  # --batch-only: the batch race's QPS
    q, qp = ("batch_qps", "batch_qps_passes") if batch else ("qps", "qps_passes")
    for engine in dict.fromkeys(r["engine"] for r in report["rows"]):
        rows = [r for r in report["rows"] if r["engine"] == engine and q in r]
        if not rows:
            continue
        xs, ys = [r["recall"] for r in rows], [r[q] for r in rows]
        lo = [r[q] - min(r[qp]) for r in rows]
        hi = [max(r[qp]) - r[q] for r in rows]
        bars = ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=3, alpha=0.35, elinewidth=0.8)
        front = pareto([(r["recall"], r[q], r["setting"]) for r in rows])
        ax.plot([f[0] for f in front], [f[1] for f in front], "-o", ms=3, color=bars[0].get_color(), label=engine)
    if batch:
        b = report["batch"]
        recall_qps_axes(ax, 0.8, f"queries / s, batches of {b['size']} on {b['threads']} threads")
        ax.set_title(f"{report['corpus']}: {report['n_docs']:,} docs, {b['queries']:,} queries, "
                     f"{b['passes']} interleaved passes ({report['date']})", fontsize=9)
    else:
        recall_qps_axes(ax, 0.8, "queries / s, one at a time on one core")
        ax.set_title(f"{report['corpus']}: {report['n_docs']:,} docs, {report['single_queries']:,} queries, "
                     f"{report['passes']} interleaved passes ({report['date']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def size_capped_cli(paths: list[str]) -> int:
    """Print each race JSON's size-capped ratios by CPU time (size_capped_ratios), worked out from its rows."""
    for path in paths:
        report = json.loads(Path(path).read_text())
        print(f"{path} ({report.get('date')}, commit {report.get('commit')}):")
        for key, val in size_capped_ratios(report).items():
            print(f"  {key}: " + ("no build fits" if val is None else
                                  f"median {val['median']:.2f}x ({val['min']:.2f}-{val['max']:.2f}) from builds <= "
                                  f"{val['cap_bytes'] / 1e6:,.1f} MB; passes {val['per_pass']}"))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["size-capped"]:
        return size_capped_cli(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True, help="a corpus from benchmarks/real_corpus.py")
    ap.add_argument("--peers-file", type=Path, default=None,
                    help="a JSON list of [ENGINE, OPTIONS] pairs raced before the --peer ones "
                         "(benchmarks/peers/race_lsr.json: every engine with its authors' sweep)")
    ap.add_argument("--peer", nargs=2, action="append", default=[], metavar=("ENGINE", "OPTIONS"),
                    help="an engine and its constructor options as JSON (build, settings; \"label\": the name "
                         "of its rows, for a second build of an engine; \"family\": race it as an engine of "
                         "its own, e.g. an A/B of one engine); repeatable")
    ap.add_argument("--engines", nargs="+", default=None, metavar="ENGINE",
                    help="race only these engines' entries of --peers-file (e.g. tokenspace sindi)")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--single", type=int, default=1000, help="queries timed one at a time per setting and pass")
    ap.add_argument("--chunk", type=int, default=100,
                    help="a pass times every setting on this many queries before the next ones (0: each "
                         "setting's queries in one go)")
    ap.add_argument("--name", default=None)
    ap.add_argument("--pin-core", type=int, default=None,
                    help="the core the timed passes run on (default: the lowest this process may use; -1: no pin)")
    ap.add_argument("--screen", type=int, default=0, help="screen the settings on this many queries first (0: no)")
    ap.add_argument("--batch-threads", type=int, default=0, help="also time each setting's batch call (0: no)")
    ap.add_argument("--batch-queries", type=int, default=2000)
    ap.add_argument("--batch-passes", type=int, default=1, help="interleaved passes of the batch race")
    ap.add_argument("--batch-size", type=int, default=250, help="queries per batch call")
    ap.add_argument("--batch-only", action="store_true",
                    help="race the batch calls alone (needs --batch-threads): no one-query passes")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the start after which no further timed pass begins (a lent machine's time)")
    a = ap.parse_args(argv)
    if a.batch_only and not a.batch_threads:
        ap.error("--batch-only needs --batch-threads")
    deadline = None if a.deadline is None else time.monotonic() + a.deadline
    record = run_record(__file__, argv)
    if not (a.corpus_dir / "d_indptr.npy").exists():
        ap.error(f"{a.corpus_dir} holds no corpus (d_indptr.npy): build one with benchmarks/real_corpus.py")
    try:
        specs = [(engine, json.loads(opts)) for engine, opts in a.peer]
    except json.JSONDecodeError as e:
        ap.error(f"--peer OPTIONS must be JSON: {e}")
    if a.peers_file:
        specs = [(engine, dict(opts)) for engine, opts in json.loads(a.peers_file.read_text())
                 if a.engines is None or engine in a.engines] + specs
    if not specs:
        ap.error("no engine to race: give --peer ENGINE OPTIONS or --peers-file")
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
    allowed = sorted(os.sched_getaffinity(0))
    try:
        for i, (engine, opts) in enumerate(specs):
            peer = make_peer(engine, {key: v for key, v in opts.items() if key not in ("label", "family")})
            peer.name = labels[i]
            peer.family = opts.get("family", engine)  # a family of its own: raced as another engine
            peer.prepare(corpus)
            peer.load()
            (workdir / str(i)).mkdir()
            with Timer() as t:
                peer.build(corpus, workdir / str(i))
            builds.append({"engine": peer.name, "options": opts.get("build", {}), "build_s": t.seconds,
                           "index_bytes": peer.index_bytes(workdir / str(i))})
            peer.prepare_queries(corpus)
            print(f"built {peer.name} in {t.seconds:.0f} s", file=sys.stderr, flush=True)
            peers.append(peer)
        core = allowed[0] if a.pin_core is None else a.pin_core
        if core >= 0:
            os.sched_setaffinity(0, {core})
        cells = [(p, label, setting) for p in peers for label, setting in p.settings()]
        screened = None
        if a.screen:
            cells, screened = screen(cells, corpus, gt, a.screen, {b["engine"]: b["index_bytes"] for b in builds})
            print(f"screened: {len(cells)} settings race", file=sys.stderr, flush=True)
        if a.batch_only:
            rows = [{"engine": p.name, "family": getattr(p, "family", p.name), "setting": label}
                    for p, label, _ in cells]
        else:
            rows = race(peers, corpus, gt, a.single, a.passes, cells, deadline, a.chunk)
        if a.batch_threads:
            os.sched_setaffinity(0, set(allowed))
            batch = batch_race(peers, cells, corpus, gt, a.batch_queries, a.batch_threads, a.batch_passes,
                               a.batch_size, deadline)
            for row in rows:
                row.update(batch.get((row["engine"], row["setting"]), {}))
                if a.batch_only:
                    row["recall"] = row.get("batch_recall", float("nan"))
            rows = [r for r in rows if "recall" in r]
    finally:
        os.sched_setaffinity(0, set(allowed))  # main() also runs inside tests: give the cores back
        for p in peers:
            p.close()
        shutil.rmtree(workdir, ignore_errors=True)
    name = a.name or a.corpus_dir.name
    # every build of the first engine against every other engine
    firsts = [p.name for p, (engine, _) in zip(peers, specs) if engine == specs[0][0]]
    others = [p.name for p, (engine, _) in zip(peers, specs) if engine != specs[0][0]]
    fams = list(dict.fromkeys(getattr(p, "family", p.name) for p in peers))
    report = {"corpus": name, "n_docs": n, "k": K, "passes": len(rows[0].get("qps_passes", [])),
              "single_queries": 0 if a.batch_only else a.single, "chunk": a.chunk,
              "pinned_core": core, "load_avg_1min_end": os.getloadavg()[0], "builds": builds, "rows": rows,
              "screen": screened,
              "ratios": {f"{first}/{o} @{t if t else 'exact'}": ratios(rows, first, o, t)
                         for first in firsts for o in others for t in (*TARGETS, None)},
              "family_ratios": {f"{fams[0]}/{o} @{t if t else 'exact'}": ratios(rows, fams[0], o, t, key="family")
                                for o in fams[1:] for t in (*FAMILY_TARGETS, None)},
              "family_ratios_cpu": {f"{fams[0]}/{o} @{t if t else 'exact'}": ratios(rows, fams[0], o, t, "family",
                                                                                    "cpu_qps_passes")
                                    for o in fams[1:] for t in (*FAMILY_TARGETS, None)}}
    report["size_capped_ratios_cpu"] = size_capped_ratios(report) if not a.batch_only else {}
    if a.batch_threads:
        report["batch"] = {"threads": a.batch_threads, "queries": a.batch_queries, "passes": a.batch_passes,
                           "size": a.batch_size}
        report["batch_family_ratios"] = {
            f"{fams[0]}/{o} @{t if t else 'exact'}": ratios(rows, fams[0], o, t, "family", "batch_qps_passes")
            for o in fams[1:] for t in (*FAMILY_TARGETS, None)}
    if a.batch_only:  # no one-query passes: the one-query ratios are empty
        for key in ("ratios", "family_ratios", "family_ratios_cpu"):
            report[key] = {}
    print("| engine | setting | recall@10 | QPS (median pass) | CPU-time QPS | passes | batch QPS | batch passes |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        one = (f"{r['qps']:,.0f} | {r['cpu_qps']:,.0f} | {' / '.join(f'{q:,.0f}' for q in r['qps_passes'])}"
               if "qps" in r else "- | - | -")
        bat = (f"{r['batch_qps']:,.0f} | {' / '.join(f'{q:,.0f}' for q in r['batch_qps_passes'])}"
               if "batch_qps" in r else "- | -")
        print(f"| {r['engine']} | {r['setting']} | {r['recall']:.3f} | {one} | {bat} |")
    for b in builds:
        print(f"built {b['engine']}: {b['build_s']:.1f} s, {(b['index_bytes'] or 0) / 1e6:,.1f} MB")
    for key, val in report["family_ratios"].items():
        if val:
            print(f"{key}: median {val['median']:.2f}x (passes {', '.join(f'{x:.2f}' for x in val['per_pass'])}; "
                  f"{val['a']['setting']} vs {val['b']['setting']})")
    for key, val in report["size_capped_ratios_cpu"].items():
        if val:
            print(f"{key} from builds <= {val['cap_bytes'] / 1e6:,.1f} MB (the peer's smallest reaching it), CPU "
                  f"time: median {val['median']:.2f}x (passes {', '.join(f'{x:.2f}' for x in val['per_pass'])})")
    if not a.batch_only:
        report["verdict"] = verdict(report)
        report["verdict_cpu"] = verdict(report, "family_ratios_cpu")
        print("by wall time:\n" + report["verdict"] + "\nby CPU time:\n" + report["verdict_cpu"])
    if a.batch_threads:
        report["verdict_batch"] = verdict(report, "batch_family_ratios")
        print(f"batches of {a.batch_size} on {a.batch_threads} threads, by wall time:\n" + report["verdict_batch"])
    out = write_json(ROOT / "benchmarks/results" / f"head_to_head-{name}.json", report, record)
    png = out.with_suffix(".png")
    plot({**record, **report}, png)
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    main()
