"""Seismic's k-NN graph for a big corpus, built once and saved, so that a race can load it.

    python -m benchmarks.engines seismic-knn --corpus-dir bench-data/real-text --nknn 10 --via tokenspace
    python -m benchmarks.engines seismic-knn --corpus-dir bench-data/real-text --nknn 10 \
        --build '{"centroid_fraction": 0.1, "summary_energy": 0.4, "max_fraction": 4.0, "min_cluster_size": 10, "n_postings": 9668}'

Seismic refines a search's best hits with their neighbours in a graph of the documents' nearest
neighbours (its ``n_knn`` search knob). Two ways to make that graph, saved where a race's Seismic build
takes it back (``knn_path``, with ``nknn``; benchmarks/head_to_head.py):

* ``--via seismic`` (default): the library's own ``build_knn``, which searches Seismic's index with every
  document cut to its 10 heaviest terms at heap_factor 0.7. At real-text-967K it took more than 85
  minutes of both cores and never finished on this machine.
* ``--via tokenspace``: every document searched in tokenspace's InvertedIndex (``--search``, the
  documents as queries, itself dropped), written in Seismic's own graph file format (write_graph; the
  tests check it byte for byte against the library's ``save_knn``). Seismic then searches exactly as it
  would with its own graph, only with neighbours found another way.

Either way the graph's recall against the exact neighbours (scipy) of ``--check`` sampled documents is
measured and reported. The graph holds document row numbers, so it fits any Seismic build of the same
corpus. An existing graph file is kept (delete it to rebuild); ``--via tokenspace`` writes resumable
parts. Writes benchmarks/results/seismic_knn-<name>.json with the wall times and the graph's recall.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import corpus_size, load_corpus, run_record, write_json  # noqa: E402
from tokenspace.atomic import atomic_path, write_bytes  # noqa: E402

PART = 20_000  # documents per resumable part of --via tokenspace
# tokenspace's default graph search: approximate, 0.99 of the exact neighbours on real-text-959K (1,000
# sampled documents) in ~0.6 ms a document on two threads; query_mass 0.9 found 0.999 but took 20 ms (its
# long cut documents take the float first pass)
SEARCH = {"mode": "approx", "query_mass": 0.8, "rerank": 70, "impact_floor": 0.2}


def _tag(via: str) -> str:
    """File-name suffix of a graph (and its results) built another way than Seismic's own."""
    return "" if via == "seismic" else f"-{via}"


def graph_path(corpus_dir: Path, nknn: int, via: str = "seismic") -> Path:
    """Where the graph lands: Seismic's save_knn appends ``.knn.seismic`` to the stem it is given."""
    return corpus_dir / "work" / f"seismic-knn{nknn}{_tag(via)}.knn.seismic"


# ----------------------------------------------------------------------------- Seismic's file format
# pyseismic-lsr 0.5.x saves a graph (Knn::serialize) as little-endian: n_vecs u64, nknn u64, then the
# neighbours packed in a bit-field vector: its u64 word count and words (neighbour j of doc i is value
# i * nknn + j, `width` bits each, low bits first), its bit length u64, width u8, mask u64, length u64.
# The width is the bits of the largest neighbour id. Neighbours are best first.
def write_graph(path: Path, neighbours: np.ndarray) -> None:
    """Save an (n, nknn) array of neighbour rows in Seismic's graph file, atomically."""
    nb = np.ascontiguousarray(neighbours, np.uint64)
    n, nknn = nb.shape
    width = max(1, int(nb.max()).bit_length()) if nb.size else 1
    bits = np.zeros((nb.size, width), np.uint8)
    for b in range(width):
        bits[:, b] = (nb.ravel() >> np.uint64(b)) & np.uint64(1)
    packed = np.packbits(bits.ravel(), bitorder="little")
    n_words = (nb.size * width + 63) // 64
    words = np.zeros(n_words * 8, np.uint8)
    words[:len(packed)] = packed
    head = struct.pack("<QQQ", n, nknn, n_words)
    tail = struct.pack("<QBQQ", nb.size * width, width, (1 << width) - 1, nb.size)
    write_bytes(path, head + words.tobytes() + tail)


def read_graph(path: Path) -> np.ndarray:
    """The (n, nknn) neighbour rows of a graph file written by Seismic or write_graph."""
    data = Path(path).read_bytes()
    bad = ValueError(f"{path} is not a Seismic k-NN graph of this format (pyseismic-lsr 0.5), or not a whole one")
    if len(data) < 24:
        raise bad
    n, nknn, n_words = struct.unpack_from("<QQQ", data, 0)
    if len(data) != 24 + 8 * n_words + 25:
        raise bad
    words = np.frombuffer(data, np.uint8, n_words * 8, 24)
    n_bits, width, _, length = struct.unpack_from("<QBQQ", data, 24 + 8 * n_words)
    if length != n * nknn or n_bits != length * width or not 1 <= width <= 64:
        raise bad
    bits = np.unpackbits(words, bitorder="little")[:n_bits].reshape(length, width).astype(np.uint64)
    return (bits << np.arange(width, dtype=np.uint64)).sum(axis=1).reshape(n, nknn).astype(np.int64)


# ----------------------------------------------------------------------------- the two ways to build it
def seismic_graph(corpus, nknn: int, build: dict, out: Path) -> dict:
    from benchmarks.peers.seismic_peer import SeismicPeer

    peer = SeismicPeer(build=build)
    with tempfile.TemporaryDirectory(dir=out.parent) as work:
        t0 = time.perf_counter()
        peer.build(corpus, Path(work))
        t1 = time.perf_counter()
        print(f"index built in {t1 - t0:.0f} s; building the {nknn}-NN graph of {corpus.n_docs:,} documents",
              flush=True)
        peer.index.build_knn(nknn)
        t2 = time.perf_counter()
        # save_knn writes <stem>.knn.seismic; write beside the target and rename, so that a graph file
        # that exists is a whole one
        part = out.parent / f"{out.name}.part"
        peer.index.save_knn(str(part))
        os.replace(f"{part}.knn.seismic", out)
    return {"index_build_s": t1 - t0, "knn_build_s": t2 - t1}


def tokenspace_graph(corpus, nknn: int, search: dict, threads: int, out: Path) -> dict:
    from tqdm import tqdm

    from tokenspace.index import InvertedIndex
    from tokenspace.sparse import SparseBatch

    n = corpus.n_docs
    docs = SparseBatch(corpus.d_indptr, np.asarray(corpus.d_indices), np.asarray(corpus.d_data), corpus.dim)
    t0 = time.perf_counter()
    index = InvertedIndex.build(docs, [str(i) for i in range(n)])
    t1 = time.perf_counter()
    parts = out.parent / f"{out.name}.parts"
    rows = []
    for s in tqdm(range(0, n, PART), desc=f"{nknn}-NN graph", unit="part"):
        e = min(n, s + PART)
        f = parts / f"{s:09d}-{e:09d}.npy"
        if not f.exists():
            hits = index.search(docs[s:e], nknn + 1, threads=threads, **search)
            with atomic_path(f) as tmp:
                np.save(tmp, np.array([_drop_self(h, s + r, nknn) for r, h in enumerate(hits)], np.int64))
        rows.append(np.load(f))
    t2 = time.perf_counter()
    write_graph(out, np.concatenate(rows))
    for f in parts.iterdir():
        f.unlink()
    parts.rmdir()
    return {"index_build_s": t1 - t0, "knn_build_s": t2 - t1, "search": search, "search_threads": threads}


def _drop_self(hits, doc: int, nknn: int) -> list[int]:
    """The nknn best hits other than the document itself (a doc with fewer hits repeats its last one,
    or itself when it has none: Seismic's file holds exactly nknn a row)."""
    ids = [int(h.id) for h in hits if int(h.id) != doc][:nknn]
    fill = ids[-1] if ids else doc
    return ids + [fill] * (nknn - len(ids))


def graph_recall(corpus, graph: np.ndarray, n_check: int, seed: int = 0) -> float:
    """Mean |graph row & exact nknn neighbours| / nknn over n_check sampled documents (scipy, self out)."""
    nknn = graph.shape[1]
    docs = corpus.docs_scipy()
    sample = np.random.default_rng(seed).choice(corpus.n_docs, min(n_check, corpus.n_docs), replace=False)
    dt_ = docs.T.tocsr()
    found = 0
    for s in range(0, len(sample), 64):
        rows = sample[s:s + 64]
        scores = (docs[rows] @ dt_).toarray()
        scores[np.arange(len(rows)), rows] = -np.inf
        for j, d in enumerate(rows):
            top = np.argpartition(-scores[j], nknn)[:nknn]
            found += len(set(top.tolist()) & set(graph[d].tolist()))
    return found / (len(sample) * nknn)


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-dir", type=Path, required=True, help="a corpus from benchmarks/real_corpus.py")
    ap.add_argument("--nknn", type=int, default=10, help="neighbours per document")
    ap.add_argument("--via", choices=("seismic", "tokenspace"), default="seismic",
                    help="which engine finds the neighbours (the file is Seismic's either way)")
    ap.add_argument("--build", default="{}", help="--via seismic: Seismic's build options as JSON (the race's)")
    ap.add_argument("--search", default=json.dumps(SEARCH),
                    help="--via tokenspace: InvertedIndex.search keywords as JSON")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="--via tokenspace: search threads")
    ap.add_argument("--check", type=int, default=1000, help="documents whose exact neighbours check the graph")
    ap.add_argument("--name", default=None, help="results name (default: the corpus folder's)")
    a = ap.parse_args(argv)
    if not (a.corpus_dir / "d_indptr.npy").exists():
        ap.error(f"{a.corpus_dir} holds no corpus (d_indptr.npy): build one with benchmarks/real_corpus.py")
    if a.nknn < 1:
        ap.error("--nknn must be >= 1")
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    try:
        build, search = json.loads(a.build), json.loads(a.search)
    except json.JSONDecodeError as e:
        ap.error(f"--build and --search must be JSON: {e}")
    if a.via == "seismic" and importlib.util.find_spec("seismic") is None:
        ap.error("--via seismic needs pyseismic-lsr (the bench extra: pip install -e '.[bench]')")
    out = graph_path(a.corpus_dir, a.nknn, a.via)
    if out.exists():
        print(f"{out} exists: kept (delete it to rebuild)")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    n = corpus_size(a.corpus_dir)
    corpus = load_corpus(a.corpus_dir, n)
    if a.via == "seismic":
        timing = seismic_graph(corpus, a.nknn, build, out)
    else:
        timing = tokenspace_graph(corpus, a.nknn, search, a.threads, out)
    recall = graph_recall(corpus, read_graph(out), a.check) if a.check > 0 else None
    report = {"corpus": a.name or a.corpus_dir.name, "n_docs": n, "nknn": a.nknn, "via": a.via,
              **({"build": build} if a.via == "seismic" else {}),
              **timing, "graph_bytes": out.stat().st_size, "graph_path": str(out),
              "graph_recall": recall, "graph_recall_docs": min(a.check, n),
              "threads": os.environ.get("RAYON_NUM_THREADS", f"all ({os.cpu_count()})") if a.via == "seismic"
              else a.threads,
              "load_avg_1min_end": os.getloadavg()[0]}
    res = ROOT / "benchmarks/results" / f"seismic_knn-{report['corpus']}{_tag(a.via)}.json"
    write_json(res, report, run_record(__file__, argv))
    print(f"graph built in {timing['knn_build_s']:.0f} s ({report['graph_bytes'] / 1e6:.0f} MB, recall "
          f"{recall if recall is None else round(recall, 3)} of the exact neighbours): {out}; wrote {res}")

