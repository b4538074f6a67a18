"""The cost curve of the embedded index: build time, memory and QPS against the corpus size N.

    python -m benchmarks.engines cost-curve bench-data/stair-10M --sizes 100000,1000000,10000000 \\
        --json benchmarks/results/cost_curve.json --plot docs/img/cost_curve.png

The corpus folder is in gen_corpus.py's layout (d_* and q_* .npy; fitted_corpus.py --stream writes a
10M one); size N takes its first N docs, memory-mapped. Each size runs in its own process (so its peak
RSS is its own):

* build: the index is built from the memory-mapped corpus in segments of --segment-docs docs, each
  saved and then memory-mapped (``save(path, remap=True)``), so the build never holds more than one
  segment's arrays in RAM; build time includes writing the files;
* load: ``InvertedIndex.load`` (memory-mapped, crc32 verified);
* search: --queries queries one at a time on one thread (set NUMBA_NUM_THREADS=1), exact and
  approximate (defaults), after one untimed warm-up pass; QPS, mean and p99 latency;
* recall@10 of approx against exact on all timed queries; exact against scipy (an exact sparse
  product streamed over the memory-mapped corpus in blocks of 1M docs, so it runs at any N) on
  --check queries: the smoke check of the engine against an independent reference at every size;
* scipy's own QPS (CSC columns of the query terms, as engine_quick.py) where the CSC copy fits in
  RAM (--scipy-max-gb);
* memory: the process's anonymous RSS (heap: what the build allocates; sampled every 0.1 s, peak
  reported) and its file-backed RSS (pages of the memory-mapped corpus and index it has touched,
  which the kernel can drop and re-read), index bytes on disk and against the raw CSR.

Prints a table, writes JSON, and draws QPS and memory against N (matplotlib) when --plot is given.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]

from tokenspace.index import InvertedIndex  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

K = 10


def corpus_prefix(folder: Path, n: int):
    ip = np.load(folder / "d_indptr.npy", mmap_mode="r")
    if len(ip) - 1 < n:
        raise SystemExit(f"{folder} holds {len(ip) - 1:,} docs, fewer than {n:,}")
    ip = np.array(ip[: n + 1])
    ix = np.load(folder / "d_indices.npy", mmap_mode="r")[: ip[-1]]
    dt = np.load(folder / "d_data.npy", mmap_mode="r")[: ip[-1]]
    dim = int(json.loads((folder / "dim.json").read_text())["dim"]) if (folder / "dim.json").exists() else 30522
    qs = SparseBatch(np.load(folder / "q_indptr.npy"), np.load(folder / "q_indices.npy"),
                     np.load(folder / "q_data.npy"), dim)
    return ip, ix, dt, dim, qs


def rss_mb() -> dict:
    """Current RSS split (MB): anon (heap, not reclaimable) and file (mapped file pages)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                out[line.split(":")[0][3:].lower()] = int(line.split()[1]) / 1024
    return out


class PeakAnon:
    """Peak anonymous RSS, sampled every 0.1 s in a thread (ru_maxrss would count touched
    memory-mapped corpus pages too)."""

    def __init__(self):
        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_mb()["anon"])

    def stop(self) -> float:
        self._stop.set()
        self._t.join()
        return max(self.peak, rss_mb()["anon"])


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(ip, ix, dt, dim, out: Path, segment_docs: int) -> InvertedIndex:
    """Segment by segment from the memory-mapped corpus; every segment is saved and remapped."""
    if out.exists():
        shutil.rmtree(out)
    index = InvertedIndex(dim)
    n = len(ip) - 1
    for s in range(0, n, segment_docs):
        e = min(n, s + segment_docs)
        a, b = ip[s], ip[e]
        # indices and values stay views of the memory-mapped corpus (SparseBatch keeps arrays of its
        # dtypes as they are); only the row pointers are rebased
        part = SparseBatch(ip[s:e + 1] - a, ix[a:b], dt[a:b], dim)
        index.add(part, [str(i) for i in range(s, e)])
        index.save(out, remap=True)
        print(f"  built docs {e:,} / {n:,}  rss {rss_mb()}", flush=True)
    return index


def scipy_reference(ip, ix, dt, dim, qs: SparseBatch, k: int, block: int = 1_000_000):
    """Exact top-k (doc numbers, scores) of each query by scipy, streamed over the corpus in blocks."""
    import scipy.sparse as sp

    q = qs.to_scipy().T.tocsc().astype(np.float32)  # dim x nq
    n = len(ip) - 1
    best_d = np.full((len(qs), 0), -1, np.int64)
    best_s = np.zeros((len(qs), 0), np.float32)
    for s in range(0, n, block):
        e = min(n, s + block)
        a, b = ip[s], ip[e]
        m = sp.csr_matrix((np.asarray(dt[a:b]), np.asarray(ix[a:b]), ip[s:e + 1] - a), shape=(e - s, dim))
        scores = np.asarray((m @ q).todense()).T  # nq x block
        d = np.concatenate([best_d, np.broadcast_to(np.arange(s, e), scores.shape)], axis=1)
        sc = np.concatenate([best_s, scores.astype(np.float32)], axis=1)
        top = np.argsort(-sc, axis=1, kind="stable")[:, :k]  # stable: ties keep the smaller doc
        best_d, best_s = np.take_along_axis(d, top, 1), np.take_along_axis(sc, top, 1)
    return best_d, best_s


def timed(index, qs, opts):
    lat, hits = [], []
    for i in range(len(qs)):
        t = time.perf_counter()
        hits.append(index.search(qs[i], k=K, **opts)[0])
        lat.append(time.perf_counter() - t)
    return np.array(lat), hits


def measure(args) -> dict:
    """One size, in this process."""
    n = args.one
    ip, ix, dt, dim, qs = corpus_prefix(args.corpus, n)
    nq = min(args.queries, len(qs))
    qs = qs[:nq]
    out = args.workdir / f"idx-{n}"
    res = {"n": n, "nnz": int(ip[-1]), "raw_csr_bytes": int(ip[-1]) * 8 + (n + 1) * 8, "queries": nq}
    print(f"N={n:,}: nnz {res['nnz']:,} ({res['nnz'] / n:.1f} per doc)", flush=True)
    t = time.perf_counter()
    peak = PeakAnon()
    index = build(ip, ix, dt, dim, out, args.segment_docs)
    res["build_s"] = time.perf_counter() - t
    res["build_peak_anon_mb"] = peak.stop()
    res["build_end_rss_mb"] = rss_mb()
    del index
    t = time.perf_counter()
    index = InvertedIndex.load(out, verify=args.verify)
    res["load_s"] = time.perf_counter() - t
    res["load_verify"] = args.verify
    res["index_bytes"] = dir_bytes(out)
    res["size_vs_raw_csr"] = res["index_bytes"] / res["raw_csr_bytes"]
    res["segments"] = len(index._segments)
    print(f"  build {res['build_s']:.1f} s, load {res['load_s']:.1f} s, index {res['index_bytes'] / 1e9:.2f} GB "
          f"= {res['size_vs_raw_csr']:.2f}x raw CSR", flush=True)

    settings = [("exact", {}), ("approx", {"mode": "approx"})]
    for _, opts in settings:  # compile and fault the index in
        for i in range(nq):
            index.search(qs[i], k=K, **opts)
    runs = {}
    for name, opts in settings:
        lat, hits = timed(index, qs, opts)
        runs[name] = hits
        res[name] = {"qps": 1 / lat.mean(), "mean_ms": lat.mean() * 1e3, "p99_ms": float(np.quantile(lat, 0.99)) * 1e3}
        print(f"  {name}: {res[name]['qps']:.1f} QPS, p99 {res[name]['p99_ms']:.1f} ms", flush=True)
    truth = [{h.id for h in hits} for hits in runs["exact"]]
    res["approx"]["recall@10_vs_exact"] = float(np.mean(
        [len({h.id for h in g} & t) / max(1, len(t)) for g, t in zip(runs["approx"], truth)]))

    # smoke check of exact mode against scipy on a sample of the queries
    nc = min(args.check, nq)
    t = time.perf_counter()
    ref_d, ref_s = scipy_reference(ip, ix, dt, dim, qs[:nc], K)
    same_ids, max_diff, recalls = 0, 0.0, []
    for r in range(nc):
        got = runs["exact"][r]
        want = [(int(d), float(s)) for d, s in zip(ref_d[r], ref_s[r]) if s > 0]
        got_ids = [int(h.id) for h in got]
        same_ids += got_ids == [d for d, _ in want]
        recalls.append(len(set(got_ids) & {d for d, _ in want}) / max(1, len(want)))
        for h, (_, s) in zip(got, want):  # rank by rank: equal scores even where tied docs swap
            max_diff = max(max_diff, abs(h.score - s) / max(1.0, abs(s)))
    res["check"] = {"queries": nc, "same_ranking": same_ids, "recall@10_vs_scipy": float(np.mean(recalls)),
                    "max_rel_score_diff": max_diff, "seconds": time.perf_counter() - t}
    print(f"  exact vs scipy on {nc} queries: same ranking {same_ids}, recall {res['check']['recall@10_vs_scipy']:.4f}, "
          f"max rel score diff {max_diff:.2e}", flush=True)

    csc_gb = res["nnz"] * 8 / 1e9
    if csc_gb <= args.scipy_max_gb:
        import scipy.sparse as sp

        csc = sp.csr_matrix((np.asarray(dt), np.asarray(ix), ip), shape=(n, dim)).tocsc()

        def scipy_one(q):
            idx, val = q.row(0)
            s = csc[:, idx] @ val
            top = np.argpartition(-s, K)[:K]
            return top[np.lexsort((top, -s[top]))]

        for i in range(min(20, nq)):
            scipy_one(qs[i])
        lat = []
        for i in range(nq):
            t = time.perf_counter()
            scipy_one(qs[i])
            lat.append(time.perf_counter() - t)
        lat = np.array(lat)
        res["scipy"] = {"qps": 1 / lat.mean(), "mean_ms": lat.mean() * 1e3, "p99_ms": float(np.quantile(lat, 0.99)) * 1e3}
        print(f"  scipy: {res['scipy']['qps']:.1f} QPS", flush=True)
        del csc
    else:
        res["scipy"] = {"skipped": f"CSC copy {csc_gb:.1f} GB > --scipy-max-gb {args.scipy_max_gb}"}
    res["search_rss_mb"] = rss_mb()
    if not args.keep:
        shutil.rmtree(out)
    return res


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, style in (("exact", "tokenspace exact", "o-"), ("approx", "tokenspace approx (defaults)", "s-"),
                              ("scipy", "scipy exact (CSC columns)", "^--")):
        pts = [(r["n"], r[key]["qps"]) for r in results if "qps" in r.get(key, {})]
        if pts:
            ax1.plot(*zip(*pts), style, label=label)
    ax1.set(xscale="log", yscale="log", xlabel="documents N", ylabel="queries / s (1 thread, one at a time)",
            title="QPS vs N")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    ax2.plot(ns, [r["index_bytes"] / 2**30 for r in results], "o-", label="index on disk")
    ax2.plot(ns, [r["raw_csr_bytes"] / 2**30 for r in results], "k:", label="raw CSR")
    ax2.plot(ns, [r["build_peak_anon_mb"] / 1024 for r in results], "s-", label="build: peak heap (anon RSS)")
    ax2.plot(ns, [r["search_rss_mb"]["anon"] / 1024 for r in results], "^-", label="search: heap (anon RSS)")
    ax2.plot(ns, [r["search_rss_mb"]["file"] / 1024 for r in results], "v-",
             label="search: mapped pages resident (file RSS)")
    ax2.set(xscale="log", yscale="log", xlabel="documents N", ylabel="GiB", title="memory vs N")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--queries", type=int, default=100, help="queries timed one at a time per setting")
    ap.add_argument("--check", type=int, default=20, help="queries checked against scipy at every size")
    ap.add_argument("--segment-docs", type=int, default=1_000_000)
    ap.add_argument("--scipy-max-gb", type=float, default=4.0, help="measure scipy's QPS when its CSC copy is smaller")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench-data/cost-curve")
    ap.add_argument("--keep", action="store_true", help="keep the built indexes")
    ap.add_argument("--verify", action="store_true", help="load with crc32 checks (reads the index once more)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--merge", action="store_true",
                    help="keep the other sizes' results of the existing --json (each keeps its command and date)")
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.one:
        res = measure(args)
        print("RESULT " + json.dumps(res))
        return 0

    results = []
    for n in [int(x) for x in args.sizes.split(",")]:
        cmd = [sys.executable, "-m", "benchmarks.engines", "cost-curve", str(args.corpus), "--one", str(n), "--queries", str(args.queries),
               "--check", str(args.check), "--segment-docs", str(args.segment_docs),
               "--scipy-max-gb", str(args.scipy_max_gb), "--workdir", str(args.workdir)]
        cmd += ["--keep"] * args.keep + ["--verify"] * args.verify
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT)
        lines = p.stdout.splitlines()
        print("\n".join(x for x in lines if not x.startswith("RESULT ")), flush=True)
        got = [json.loads(x[7:]) for x in lines if x.startswith("RESULT ")]
        if p.returncode != 0 or not got:
            results.append({"n": n, "error": f"exit {p.returncode}"})
            print(f"N={n:,} failed (exit {p.returncode})", flush=True)
            continue
        results.append(got[0])

    record = run_record(__file__, argv)
    for r in results:
        r["run"] = record  # per size: a merged file keeps each size's own run
    if args.merge and args.json and args.json.exists():
        old = json.loads(args.json.read_text())
        done = {r["n"] for r in results}
        kept = [dict(r, run=r.get("run", {"command": old["command"], "date": old["date"]}))
                for r in old["results"] if r["n"] not in done]
        results = sorted(kept + results, key=lambda r: r["n"])
    ok = [r for r in results if "error" not in r]
    hdr = (f"{'N':>11s} {'build s':>8s} {'peak anon MB':>12s} {'index GB':>9s} {'x CSR':>6s} {'exact QPS':>9s} "
           f"{'approx QPS':>10s} {'approx R@10':>11s} {'scipy QPS':>9s} {'exact=scipy':>11s} {'search anon/file MB':>19s}")
    print("\n" + hdr)
    for r in ok:
        sq = r["scipy"].get("qps")
        mem = f"{r['search_rss_mb']['anon']:,.0f} / {r['search_rss_mb']['file']:,.0f}"
        print(f"{r['n']:>11,} {r['build_s']:8.1f} {r['build_peak_anon_mb']:12,.0f} {r['index_bytes'] / 1e9:9.2f} "
              f"{r['size_vs_raw_csr']:6.2f} {r['exact']['qps']:9.1f} {r['approx']['qps']:10.1f} "
              f"{r['approx']['recall@10_vs_exact']:11.3f} {('%.1f' % sq) if sq else '-':>9s} "
              f"{r['check']['same_ranking']:>5d}/{r['check']['queries']:<5d} {mem:>19s}")
    record = dict(record, command="; ".join(dict.fromkeys(r["run"]["command"] for r in results)))
    report = {"corpus": str(args.corpus), "results": results}
    if args.json:
        write_json(args.json, report, record)
    if args.plot and ok:
        plot(ok, args.plot, f"{args.corpus.name}: cost vs N ({ok[0]['queries']} queries, k={K})")
        print(f"plot: {args.plot}")
    return 0

