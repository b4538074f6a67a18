"""The public call against the raw one: InvertedIndex.search (a SparseBatch in, Hits out) against
search_arrays (arrays in, ids and scores out), per query, on one pinned core, with every answer hashed.

    python -m benchmarks.engines call --corpus-dir bench-data/real-text-100K --name real-text-100K

Arms, each timed one query at a time (or per query of a batch) by CPU time, interleaved chunk by chunk
(--batch queries at a time, the arms' order rotating) in --passes passes:
``arrays`` search_arrays(dims, weights); ``search`` search() of the query's one-row SparseBatch, made
before the timer as a model's encoder hands it over; ``search+batch`` the same with the one-row
SparseBatch built from the arrays inside the timer (what a caller holding arrays pays); ``search-batch``
search() over batches of --batch queries on one thread, per query. The ratio of each arm to ``arrays``
is taken per pass, then the median over passes. Each arm is timed three ways: the calls alone; the calls
plus reading every hit once, its id and its score, as a caller does (search(): through each Hit;
search_arrays: its ids beside the scores' tolist()), so that an answer made cheaper by making its hits
later shows what reading them costs; and the calls plus reading the same pairs from the answers' ids and
scores (Hits' tuples; search_arrays as before), when the answers have them. Every arm's answers (ids and
float32 scores of every query) are hashed: the arms must agree, and the hashes in the JSON let a run at
another commit show that a change left every answer as it was (--expect OLD.json checks that here).
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


def read(arm, out) -> list[list[tuple[str, float]]]:
    """Every answer of ``out`` read once as a caller reads it, hit by hit: (id, score) pairs, the score a
    Python float (search_arrays: its ids with its float32 scores' tolist(); search(): each Hit's id and
    score)."""
    if arm == "arrays":
        return [list(zip(ids, scores.tolist())) for ids, scores in out]
    return [[(h.id, h.score) for h in hs] for hs in out]


def read_fields(arm, out) -> list[list[tuple[str, float]]] | None:
    """read()'s pairs from search()'s answers through their ``ids`` and ``scores`` (Hits), without a Hit;
    None for an answer without them (a list of Hit, at a commit before Hits). search_arrays: read()."""
    if arm == "arrays":
        return read(arm, out)
    if out and not hasattr(out[0], "ids"):
        return None
    return [list(zip(hs.ids, hs.scores)) for hs in out]


def run_chunk(arm, index, qrows, ones, batch, dim, setting) -> tuple[float, float, float | None, list, list]:
    """One arm over one chunk of queries (``qrows`` their arrays, ``ones`` their one-row SparseBatches,
    ``batch`` all of them as one SparseBatch): CPU seconds of the calls, of reading their answers (read())
    and of reading them through their fields (read_fields(); None without fields), the answers as
    returned and as read."""
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
    else:
        c = time.process_time()
        out = index.search(batch, K, **setting)
    call = time.process_time() - c
    c = time.process_time()
    answers = read(arm, out)
    sec_read = time.process_time() - c
    c = time.process_time()
    fields = read_fields(arm, out)
    sec_fields = time.process_time() - c
    if fields is not None and fields != answers:
        raise SystemExit(f"{arm}: reading the answers' fields gives other hits than reading each Hit")
    return call, sec_read, None if fields is None else sec_fields, out, answers


def run_pass(index, chunks, dim, setting, rep: int) -> tuple[dict, dict, dict, dict]:
    """Every arm over every chunk, the arms' order rotating from chunk to chunk (a noisy moment of the
    shared machine lands on all arms alike, not on one arm's whole pass): per arm, CPU seconds of the calls,
    of reading their answers hit by hit and through their fields (None without fields), and the sha256 of
    the answers read. Every answer as returned stays alive to the end of the pass, as with a caller that
    keeps what it searched; what was read is hashed and let go. (Kept, the read pairs added the same
    objects to every arm, and the collector's full passes over them fell in whichever arm's timer the
    count reached, the same arm pass after pass.)"""
    cpu = {arm: 0.0 for arm in ARMS}
    cpu_read = {arm: 0.0 for arm in ARMS}
    cpu_fields = {arm: 0.0 for arm in ARMS}
    hashes = {arm: hashlib.sha256() for arm in ARMS}
    kept = []
    for i, (qrows, ones, batch) in enumerate(chunks):
        shift = (rep + i) % len(ARMS)
        for arm in ARMS[shift:] + ARMS[:shift]:
            sec, sec_read, sec_fields, out, got = run_chunk(arm, index, qrows, ones, batch, dim, setting)
            cpu[arm] += sec
            cpu_read[arm] += sec_read
            cpu_fields[arm] = None if sec_fields is None or cpu_fields[arm] is None else cpu_fields[arm] + sec_fields
            digest(hashes[arm], got)
            kept.append(out)
    return cpu, cpu_read, cpu_fields, {arm: h.hexdigest() for arm, h in hashes.items()}


def ratios(cpu: dict) -> dict:
    """Each arm's median over passes of its per-pass ratio to ``arrays``."""
    return {arm: round(float(np.median([x / y for x, y in zip(cpu[arm], cpu["arrays"])])), 4) for arm in ARMS[1:]}


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
            run_pass(index, chunks[:1], dim, setting, 0)  # warm-up: numba's first calls, the kept plans
            cpu = {arm: [] for arm in ARMS}
            cpu_read = {arm: [] for arm in ARMS}  # the calls and reading their answers hit by hit
            cpu_fields = {arm: [] for arm in ARMS}  # the calls and reading their answers' fields
            hashes = {}
            for rep in range(a.passes):
                if a.no_gc:
                    gc.disable()
                try:
                    sec, sec_read, sec_fields, digests = run_pass(index, chunks, dim, setting, rep)
                finally:
                    gc.enable()
                for arm in ARMS:
                    cpu[arm].append(sec[arm] / nq * 1e6)
                    cpu_read[arm].append((sec[arm] + sec_read[arm]) / nq * 1e6)
                    if sec_fields[arm] is not None:
                        cpu_fields[arm].append((sec[arm] + sec_fields[arm]) / nq * 1e6)
                    hashes.setdefault(arm, digests[arm])
            if len(set(hashes.values())) != 1:
                raise SystemExit(f"{build} {label}: the arms' answers differ: {hashes}")
            row = {"build": build, "setting": label, "options": setting, "answers_sha256": hashes["arrays"],
                   "us_per_query_passes": {arm: [round(x, 2) for x in v] for arm, v in cpu.items()},
                   "us_per_query": {arm: round(float(np.median(v)), 2) for arm, v in cpu.items()}}
            row["ratio_to_arrays"] = ratios(cpu)
            row["us_per_query_with_read"] = {arm: round(float(np.median(v)), 2) for arm, v in cpu_read.items()}
            row["ratio_to_arrays_with_read"] = ratios(cpu_read)
            has_fields = all(cpu_fields[arm] for arm in ARMS)
            row["us_per_query_with_fields"] = {arm: round(float(np.median(v)), 2) for arm, v in cpu_fields.items()} \
                if has_fields else None
            row["ratio_to_arrays_with_fields"] = ratios(cpu_fields) if has_fields else None
            rows.append(row)
            print(f"{build} {label}: " + ", ".join(f"{arm} {row['us_per_query'][arm]:.1f} us" for arm in ARMS)
                  + " | ratios " + ", ".join(f"{arm} {r:.3f}" for arm, r in row["ratio_to_arrays"].items())
                  + " | with reading " + ", ".join(f"{arm} {r:.3f}" for arm, r in row["ratio_to_arrays_with_read"].items()),
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
    print("| build | setting | search_arrays us/query | search() | ratio | with reading each Hit | with reading "
          "ids, scores | search() + SparseBatch | ratio | search() in batches of "
          f"{a.batch} | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        us, rt, rr, rf = r["us_per_query"], r["ratio_to_arrays"], r["ratio_to_arrays_with_read"], \
            r["ratio_to_arrays_with_fields"]
        fields = "-" if rf is None else f"{rf['search']:.3f}"
        print(f"| {r['build']} | {r['setting']} | {us['arrays']:.1f} | {us['search']:.1f} | {rt['search']:.3f} | "
              f"{rr['search']:.3f} | {fields} | {us['search+batch']:.1f} | {rt['search+batch']:.3f} | "
              f"{us['search-batch']:.1f} | {rt['search-batch']:.3f} |")
    out = write_json(a.out or ROOT / "benchmarks/results" / f"search_call-{report['corpus']}.json", report, record)
    print(f"wrote {out}")
    if mismatch:
        raise SystemExit(f"answers differ from {a.expect}: {', '.join(mismatch)}")

