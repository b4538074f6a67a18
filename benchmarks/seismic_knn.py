"""Seismic's k-NN graph for a big corpus, built once and saved, so that a race can load it.

    python benchmarks/seismic_knn.py --corpus-dir bench-data/real-text --nknn 10 \
        --build '{"centroid_fraction": 0.1, "summary_energy": 0.4, "max_fraction": 4.0, "min_cluster_size": 10, "n_postings": 9668}'

Seismic builds its graph by searching its own index with every document (``SeismicIndex.build_knn``):
at real-text-967K that did not finish inside a race's 3,600 s per-engine limit. Here it runs alone,
with no limit, and is saved where a race's Seismic build takes it back (``knn_path``, with ``nknn``;
benchmarks/head_to_head.py). The graph holds document ids, so a later build of the same corpus with the
same options can carry it. An existing graph file is kept (delete it to rebuild). Writes
benchmarks/results/seismic_knn-<name>.json with the build's and the graph's wall times.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # benchmarks.*

from benchmarks.peers.common import corpus_size, load_corpus  # noqa: E402
from benchmarks.peers.seismic_peer import SeismicPeer  # noqa: E402


def graph_path(corpus_dir: Path, nknn: int) -> Path:
    """Where the graph lands: Seismic's save_knn appends ``.knn.seismic`` to the stem it is given."""
    return corpus_dir / "work" / f"seismic-knn{nknn}.knn.seismic"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True, help="a corpus from benchmarks/real_corpus.py")
    ap.add_argument("--nknn", type=int, default=10, help="neighbours per document")
    ap.add_argument("--build", default="{}", help="Seismic's build options as JSON (those of the race)")
    ap.add_argument("--name", default=None, help="results name (default: the corpus folder's)")
    a = ap.parse_args(argv)
    if not (a.corpus_dir / "d_indptr.npy").exists():
        ap.error(f"{a.corpus_dir} holds no corpus (d_indptr.npy): build one with benchmarks/real_corpus.py")
    if a.nknn < 1:
        ap.error("--nknn must be >= 1")
    try:
        build = json.loads(a.build)
    except json.JSONDecodeError as e:
        ap.error(f"--build must be JSON: {e}")
    out = graph_path(a.corpus_dir, a.nknn)
    if out.exists():
        print(f"{out} exists: kept (delete it to rebuild)")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    n = corpus_size(a.corpus_dir)
    peer = SeismicPeer(build=build)
    with tempfile.TemporaryDirectory(dir=out.parent) as work:
        t0 = time.perf_counter()
        peer.build(load_corpus(a.corpus_dir, n), Path(work))
        t1 = time.perf_counter()
        print(f"index built in {t1 - t0:.0f} s; building the {a.nknn}-NN graph of {n:,} documents", flush=True)
        peer.index.build_knn(a.nknn)
        t2 = time.perf_counter()
        # save_knn writes <stem>.knn.seismic; write beside the target and rename, so that a graph file
        # that exists is a whole one
        part = out.parent / f"{out.name}.part"
        peer.index.save_knn(str(part))
        os.replace(f"{part}.knn.seismic", out)
    report = {"corpus": a.name or a.corpus_dir.name, "n_docs": n, "nknn": a.nknn, "build": build,
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": "python benchmarks/seismic_knn.py " + shlex.join(sys.argv[1:] if argv is None else argv),
              "index_build_s": t1 - t0, "knn_build_s": t2 - t1, "graph_bytes": out.stat().st_size,
              "threads": os.environ.get("RAYON_NUM_THREADS", f"all ({os.cpu_count()})"),
              "load_avg_1min_end": os.getloadavg()[0]}
    res = ROOT / "benchmarks/results" / f"seismic_knn-{report['corpus']}.json"
    res.write_text(json.dumps(report, indent=1) + "\n")
    print(f"graph built in {t2 - t1:.0f} s ({report['graph_bytes'] / 1e6:.0f} MB): {out}; wrote {res}")


if __name__ == "__main__":
    main()
