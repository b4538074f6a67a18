"""What the benchmarks share: the bench corpus on disk, the run record every result starts with (date,
commit, machine, command), writing results JSON, and timing.

One module so that a figure in docs/benchmarks.md can always be traced the same way: its JSON names the
commit it measured, the machine it ran on and the command that reproduces it.
"""
from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenspace.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "bench-data"  # generated corpora (git-ignored)


# --- the run record -----------------------------------------------------------------------------------

def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> str:
    """CPU model, cores this process may use, RAM, OS and Python: enough to tell two machines apart."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores visible, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def commit() -> str:
    """The short commit measured, with "+dirty" when src/ or benchmarks/ differ from it (then the figure
    is of uncommitted code); "unknown" outside a git checkout (the GPU machine gets a bare copy)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "src", "benchmarks")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+dirty" if dirty else "")) if head else "unknown"


def module_name(script: str | Path) -> str:
    """``benchmarks/cost_curve.py`` -> ``benchmarks.cost_curve``: the name to run it by."""
    rel = Path(script).resolve().with_suffix("").relative_to(ROOT)
    return ".".join(rel.parts)


def command(script: str | Path, argv: list[str] | None = None) -> str:
    """The command line that reproduces this run: ``python -m benchmarks.<name> <args>``. ``argv`` is what
    ``main(argv)`` was given (tests pass a list); None means this process's own arguments."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python", "-m", module_name(script), *args])


def run_record(script: str | Path, argv: list[str] | None = None) -> dict:
    """The four fields every maintained result starts with. Call as ``run_record(__file__, argv)``."""
    return {"date": utc_now(), "commit": commit(), "machine": machine(), "command": command(script, argv)}


def write_json(path: str | Path, payload: dict, record: dict | None = None) -> Path:
    """Write ``record`` then ``payload`` as indented JSON; through a temporary file, so a killed run
    leaves the previous result rather than half a file. ``record=None`` writes ``payload`` as is (it
    already carries its record, e.g. a merged report)."""
    path = Path(path)
    doc = {**(record or {}), **payload}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
    return path


# --- timing -------------------------------------------------------------------------------------------

class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


def timed(fn, queries):
    """Per-query latencies (seconds) and results, one query at a time."""
    lat, out = [], []
    for i in range(len(queries)):
        q = queries[i]
        t = time.perf_counter()
        out.append(fn(q))
        lat.append(time.perf_counter() - t)
    return np.array(lat), out


# --- the bench corpus ---------------------------------------------------------------------------------

VOCAB_SIZE = 30522  # gen_corpus.py's V
CORPUS_FILES = ["d_indptr", "d_indices", "d_data", "q_indptr", "q_indices", "q_data", "dense_docs", "dense_q"]


@dataclass
class Corpus:
    """A bench corpus as numpy arrays (memory-mapped). Doc i's external id is ``str(i)``."""

    d_indptr: np.ndarray
    d_indices: np.ndarray
    d_data: np.ndarray
    q_indptr: np.ndarray
    q_indices: np.ndarray
    q_data: np.ndarray
    dim: int
    data_dir: Path
    n_docs: int

    def docs_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.d_data, self.d_indices, self.d_indptr), shape=(self.n_docs, self.dim))

    def queries_scipy(self):
        import scipy.sparse as sp

        return sp.csr_matrix((self.q_data, self.q_indices, self.q_indptr), shape=(len(self.q_indptr) - 1, self.dim))

    def query(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.q_indptr[i], self.q_indptr[i + 1]
        return np.asarray(self.q_indices[a:b]), np.asarray(self.q_data[a:b])

    def dense_docs(self) -> np.ndarray:
        return np.load(self.data_dir / "dense_docs.npy", mmap_mode="r")[: self.n_docs]

    def dense_queries(self) -> np.ndarray:
        return np.load(self.data_dir / "dense_q.npy")

    def raw_csr_bytes(self) -> int:
        return int(self.d_indptr.nbytes + self.d_indices.nbytes + self.d_data.nbytes)

    def batches(self):
        """(documents, queries) as tokenspace SparseBatches, the documents read into RAM."""
        from tokenspace.sparse import SparseBatch

        docs = SparseBatch(np.array(self.d_indptr), np.array(self.d_indices), np.array(self.d_data), self.dim)
        qs = SparseBatch(np.asarray(self.q_indptr), np.asarray(self.q_indices), np.asarray(self.q_data), self.dim)
        return docs, qs


def corpus_size(data_dir: Path) -> int:
    """How many documents the corpus in ``data_dir`` holds."""
    return len(np.load(data_dir / "d_indptr.npy", mmap_mode="r")) - 1


def load_corpus(data_dir: Path, n_docs: int) -> Corpus:
    """The first ``n_docs`` rows of the corpus in ``data_dir`` (bench-100K is a prefix of bench-1M)."""
    def ld(name):
        return np.load(data_dir / f"{name}.npy", mmap_mode="r")

    d_indptr = np.asarray(ld("d_indptr")[: n_docs + 1])
    if len(d_indptr) != n_docs + 1:
        raise ValueError(f"{data_dir} holds {len(d_indptr) - 1} docs, fewer than {n_docs}")
    end = int(d_indptr[-1])
    return Corpus(d_indptr, ld("d_indices")[:end], ld("d_data")[:end], np.asarray(ld("q_indptr")),
                  np.asarray(ld("q_indices")), np.asarray(ld("q_data")), VOCAB_SIZE, data_dir, n_docs)


def find_generator() -> Path:
    """The project's corpus generator (shared/bench/gen_corpus.py, beside or inside the checkout)."""
    for cand in (os.environ.get("TOKENSPACE_GEN_CORPUS"), ROOT.parent / "shared/bench/gen_corpus.py",
                 ROOT / "shared/bench/gen_corpus.py"):
        if cand and Path(cand).exists():
            return Path(cand)
    raise FileNotFoundError("gen_corpus.py not found: set TOKENSPACE_GEN_CORPUS to its path")


def ensure_corpus(data_root: Path = DATA) -> Path:
    """bench-data/bench-1M, generated when missing (bench-100K is read as its first 100K rows)."""
    out = data_root / "bench-1M"
    if all((out / f"{f}.npy").exists() for f in CORPUS_FILES):
        return out
    gen = find_generator()
    print(f"generating the 1M corpus with {gen} into {out} (several minutes) ...", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(gen), str(out), "1000000"], check=True)
    return out


def _exact_top(qs, dt_, k: int) -> np.ndarray:
    gt = np.full((qs.shape[0], k), -1, np.int64)
    for s in range(0, qs.shape[0], 16):
        scores = (qs[s:s + 16] @ dt_).toarray()
        for j, row in enumerate(scores):
            top = np.argpartition(-row, k - 1)[:k]
            top = top[np.argsort(-row[top], kind="stable")]
            top = top[row[top] > 0]
            gt[s + j, :len(top)] = top
    return gt


_GT_SHARED: tuple = ()  # the docs a forked ground-truth worker reads (inherited, never pickled)


def _exact_top_rows(bounds: tuple[int, int]) -> np.ndarray:
    qs, dt_, k = _GT_SHARED
    return _exact_top(qs[bounds[0]:bounds[1]], dt_, k)


def ground_truth(data_dir: Path, n_docs: int, k: int, workers: int = 1) -> Path:
    """Exact top-k doc rows per query by scipy (cached beside the corpus): what every recall is against.
    ``workers`` > 1 splits the queries over forked processes (the same products, row by row)."""
    global _GT_SHARED
    path = data_dir / f"gt_{n_docs}_top{k}.npy"
    if path.exists():
        return path
    print(f"computing exact top-{k} for {n_docs} docs ...", flush=True)
    corpus = load_corpus(data_dir, n_docs)
    dt_ = corpus.docs_scipy().T.tocsr()
    qs = corpus.queries_scipy()
    if workers > 1:
        _GT_SHARED = (qs, dt_, k)
        step = -(-qs.shape[0] // (4 * workers)) // 16 * 16 or 16
        chunks = [(s, min(s + step, qs.shape[0])) for s in range(0, qs.shape[0], step)]
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                gt = np.concatenate(pool.map(_exact_top_rows, chunks))
        finally:
            _GT_SHARED = ()
    else:
        gt = _exact_top(qs, dt_, k)
    with atomic_path(path) as tmp:
        np.save(tmp, gt)
    return path
