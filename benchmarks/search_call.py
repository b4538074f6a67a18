"""The public call against the raw one: InvertedIndex.search (a SparseBatch in, Hits out) against
search_arrays (arrays in, ids and scores out), per query, on one pinned core, with every answer hashed.

    python -m benchmarks.engines call --corpus-dir bench-data/real-text-100K --name real-text-100K

Arms, each timed one query at a time (or per query of a batch) by CPU time, interleaved chunk by chunk
(--batch queries at a time, the arms' order rotating) in --passes passes:
``arrays`` search_arrays(dims, weights); ``search`` search() of the query's one-row SparseBatch, made
before the timer as a model's encoder hands it over; ``search+batch`` the same with the one-row
SparseBatch built from the arrays inside the timer (what a caller holding arrays pays); ``search-batch``
search() over batches of --batch queries on one thread, per query. The ratio of each arm to ``arrays``
is taken per pass, then the median over passes. Three more arms time the call and reading its answer
at once, query by query, as a caller that uses each answer as it comes (every hit once, its id and its
score as Python objects): ``arrays+read`` (the ids beside the scores' tolist()), ``search+read`` (through
each Hit) and ``search+read-fields`` (through the answer's ids and scores; left out for code whose
answers have none), each taken as a ratio to ``arrays+read``. So a call made cheaper by making its hits
later still pays for them where they are read. Every arm's answers (ids and float32 scores of every
query) are hashed: the arms must agree, and the hashes in the JSON let a run at another commit show that
a change left every answer as it was (--expect OLD.json checks that here).
Each arm keeps its answers as returned to the end of the pass, as a caller that scores them does:
Python's garbage collector then runs more often in the arms that keep more objects; --no-gc times
without it.

Writes benchmarks/results/search_call-<name>.json (with the run record) and prints the table.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import corpus_size, load_corpus, run_record, write_json
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch

ROOT = Path(__file__).resolve().parents[1]
K = 10
# the settings that won the real-text-100K race at recall 0.95 and 0.99 and exact mode
# (docs/benchmarks.md), on the builds they won with
BUILDS = {"plain": {"impact_heads": False}, "mass80": {"impact_heads": False, "approx_mass": 0.8}}
SETTINGS = [("plain", "exact", {"mode": "exact"}),
            ("mass80", "qm=0.8 a=1.0 rerank=20", {"mode": "approx", "query_mass": 0.8, "alpha": 1.0, "rerank": 20}),
            ("plain", "qm=0.9 a=1.0 rerank=20", {"mode": "approx", "query_mass": 0.9, "alpha": 1.0, "rerank": 20})]
ARMS = ("arrays", "search", "search+batch", "search-batch")
READ_ARMS = ("arrays+read", "search+read", "search+read-fields")  # the call and reading its answer, query by query


def code_digest() -> dict:
    """Where the measured tokenspace comes from and a sha256 over its index package's sources: the code
    measured, whatever the run record's commit says (an A/B runs an older tree through PYTHONPATH)."""
    import tokenspace.index as pkg

    root = Path(pkg.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return {"index_package": str(root), "index_sources_sha256": h.hexdigest()}


def digest(h, answers) -> None:
    """Adds every query's ids and float32 scores (read(): (id, score) pairs), in order, to the sha256 ``h``:
    the same bytes as hashed since the first run, when answers were read as (ids, scores)."""
    for pairs in answers:
        h.update("\x1f".join(i for i, _ in pairs).encode() + b"\x1e")
        h.update(np.asarray([s for _, s in pairs], np.float32).tobytes() + b"\x1d")


def read(out) -> list[list[tuple[str, float]]]:
    """Answers as a caller reads them: (id, score) pairs, the score a Python float, from search_arrays'
    (ids, scores) or from search()'s hits (through each Hit)."""
    return [list(zip(o[0], o[1].tolist())) if type(o) is tuple else [(h.id, h.score) for h in o] for o in out]


def run_chunk(arm, index, qrows, ones, batch, dim, setting) -> tuple[float, list, list]:
    """One arm over one chunk of queries (``qrows`` their arrays, ``ones`` their one-row SparseBatches,
    ``batch`` all of them as one SparseBatch): CPU seconds, the answers as returned, and as read (the
    read arms read inside the timer; the others are read after it, for the hash only)."""
    out, got = [], None
    if arm == "arrays":
        c = time.process_time()
        out = [index.search_arrays(idx, val, K, **setting) for idx, val in qrows]
    elif arm == "search":
        c = time.process_time()
        out = [index.search(q, K, **setting)[0] for q in ones]
    elif arm == "search+batch":
        c = time.process_time()
        out = [index.search(SparseBatch(np.array([0, len(idx)]), idx, val, dim), K, **setting)[0]
               for idx, val in qrows]
    elif arm == "search-batch":
        c = time.process_time()
        out = index.search(batch, K, **setting)
    elif arm == "arrays+read":
        got = []
        c = time.process_time()
        for idx, val in qrows:
            ids, scores = index.search_arrays(idx, val, K, **setting)
            out.append((ids, scores))
            got.append(list(zip(ids, scores.tolist())))
    elif arm == "search+read":
        got = []
        c = time.process_time()
        for q in ones:
            hits = index.search(q, K, **setting)[0]
            out.append(hits)
            got.append([(h.id, h.score) for h in hits])
    else:  # search+read-fields
        got = []
        c = time.process_time()
        for q in ones:
            hits = index.search(q, K, **setting)[0]
            out.append(hits)
            got.append(list(zip(hits.ids, hits.scores)))
    sec = time.process_time() - c
    return sec, out, read(out) if got is None else got


def run_pass(index, chunks, dim, setting, rep: int, arms) -> tuple[dict, dict]:
    """Every arm over every chunk, the arms' order rotating from chunk to chunk (a noisy moment of the
    shared machine lands on all arms alike, not on one arm's whole pass): per arm, CPU seconds and the
    sha256 of its answers. Every answer as returned stays alive to the end of the pass, as with a caller
    that keeps what it searched; what was read is hashed and let go. (Kept, the read pairs added the same
    objects to every arm, and the collector's full passes over them fell in whichever arm's timer the
    count reached, the same arm pass after pass.)"""
    cpu = {arm: 0.0 for arm in arms}
    hashes = {arm: hashlib.sha256() for arm in arms}
    kept = []
    for i, (qrows, ones, batch) in enumerate(chunks):
        shift = (rep + i) % len(arms)
        for arm in arms[shift:] + arms[:shift]:
            sec, out, got = run_chunk(arm, index, qrows, ones, batch, dim, setting)
            cpu[arm] += sec
            digest(hashes[arm], got)
            kept.append(out)
    return cpu, {arm: h.hexdigest() for arm, h in hashes.items()}


def ratios(cpu: dict, base: str, arms) -> dict:
    """Each arm's median over passes of its per-pass ratio to ``base``."""
    return {arm: round(float(np.median([x / y for x, y in zip(cpu[arm], cpu[base])])), 4) for arm in arms}


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True)
    ap.add_argument("--name", default=None)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--batch", type=int, default=100, help="queries per search() call in the search-batch arm")
    ap.add_argument("--pin-core", type=int, default=None, help="default: the lowest core this process may use")
    ap.add_argument("--expect", type=Path, default=None,
                    help="a search_call JSON of another commit: every answer hash must equal its")
    ap.add_argument("--no-gc", action="store_true",
                    help="Python's garbage collector off while timing: what it costs the arms that keep Python objects")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    record = run_record(__file__, argv)
    n = corpus_size(a.corpus_dir)
    corpus = load_corpus(a.corpus_dir, n)
    dim = corpus.dim
    docs, qs = corpus.batches()
    nq = min(a.queries, len(qs))
    qrows = [corpus.query(r) for r in range(nq)]
    ones = [SparseBatch(np.array([0, len(idx)]), idx, val, dim) for idx, val in qrows]
    chunks = [(qrows[s:s + a.batch], ones[s:s + a.batch], qs[s:min(s + a.batch, nq)]) for s in range(0, nq, a.batch)]
    ids = list(map(str, range(n)))
    indexes = {name: InvertedIndex.build(docs, ids, **opts) for name, opts in BUILDS.items()}
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[0] if a.pin_core is None else a.pin_core
    os.sched_setaffinity(0, {core})
    rows = []
    try:
        for build, label, setting in SETTINGS:
            index = indexes[build]
            # an answer without ids and scores (a list of Hit, at an earlier commit) has no fields to read
            read_arms = READ_ARMS if hasattr(index.search(ones[0], K)[0], "ids") else READ_ARMS[:2]
            arms = ARMS + read_arms
            run_pass(index, chunks[:1], dim, setting, 0, arms)  # warm-up: numba's first calls, the kept plans
            cpu = {arm: [] for arm in arms}
            hashes = {}
            for rep in range(a.passes):
                if a.no_gc:
                    gc.disable()
                try:
                    sec, digests = run_pass(index, chunks, dim, setting, rep, arms)
                finally:
                    gc.enable()
                for arm in arms:
                    cpu[arm].append(sec[arm] / nq * 1e6)
                    hashes.setdefault(arm, digests[arm])
            if len(set(hashes.values())) != 1:
                raise SystemExit(f"{build} {label}: the arms' answers differ: {hashes}")
            row = {"build": build, "setting": label, "options": setting, "answers_sha256": hashes["arrays"],
                   "us_per_query_passes": {arm: [round(x, 2) for x in v] for arm, v in cpu.items()},
                   "us_per_query": {arm: round(float(np.median(v)), 2) for arm, v in cpu.items()},
                   "ratio_to_arrays": ratios(cpu, "arrays", ARMS[1:]),
                   "ratio_to_arrays_with_read": ratios(cpu, "arrays+read", read_arms[1:])}
            rows.append(row)
            print(f"{build} {label}: " + ", ".join(f"{arm} {row['us_per_query'][arm]:.1f} us" for arm in arms)
                  + " | ratios " + ", ".join(f"{arm} {r:.3f}" for arm, r in
                                             {**row["ratio_to_arrays"], **row["ratio_to_arrays_with_read"]}.items()),
                  file=sys.stderr, flush=True)
    finally:
        os.sched_setaffinity(0, set(allowed))
    mismatch = []
    if a.expect:
        old = {(r["build"], r["setting"]): r["answers_sha256"] for r in json.loads(a.expect.read_text())["rows"]}
        mismatch = [f"{r['build']} {r['setting']}" for r in rows
                    if (r["build"], r["setting"]) in old and old[(r["build"], r["setting"])] != r["answers_sha256"]]
    report = {**code_digest(), "corpus": a.name or a.corpus_dir.name, "n_docs": n, "k": K, "queries": nq, "passes": a.passes, "gc_off": a.no_gc,
              "batch": a.batch, "pinned_core": core, "load_avg_1min_end": os.getloadavg()[0],
              "expect": str(a.expect) if a.expect else None, "answers_differ_from_expect": mismatch, "rows": rows}
    print("| build | setting | search_arrays us/query | search() | ratio | search() + SparseBatch | ratio | "
          f"search() in batches of {a.batch} | ratio | each read at once: search_arrays us/query | search(), "
          "through each Hit | ratio | through ids, scores | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        us, rt, rr = r["us_per_query"], r["ratio_to_arrays"], r["ratio_to_arrays_with_read"]
        fields = (f"{us['search+read-fields']:.1f} | {rr['search+read-fields']:.3f}" if "search+read-fields" in rr
                  else "- | -")
        print(f"| {r['build']} | {r['setting']} | {us['arrays']:.1f} | {us['search']:.1f} | {rt['search']:.3f} | "
              f"{us['search+batch']:.1f} | {rt['search+batch']:.3f} | {us['search-batch']:.1f} | "
              f"{rt['search-batch']:.3f} | {us['arrays+read']:.1f} | {us['search+read']:.1f} | "
              f"{rr['search+read']:.3f} | {fields} |")
    out = write_json(a.out or ROOT / "benchmarks/results" / f"search_call-{report['corpus']}.json", report, record)
    print(f"wrote {out}")
    if mismatch:
        raise SystemExit(f"answers differ from {a.expect}: {', '.join(mismatch)}")

