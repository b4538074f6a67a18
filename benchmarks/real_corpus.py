"""A real learned-sparse text corpus (the earlier race): Debian's offline English encoded by SPLADE-tiny.

    nice -n 10 python -m benchmarks.corpus real-text --out bench-data/real-text --n 1000000
    python -m benchmarks.engines speed --corpus-dir bench-data/real-text      # or benchmarks/real_engines.py

Passages (tokenspace.data.passages): GCIDE per sense, WordNet glosses and examples, FOLDOC and the
Jargon File per paragraph, the installed documentation per paragraph (Python's and the Linux kernel's
reST sources, the PostgreSQL, Django and SQLAlchemy HTML manuals), then manual pages per paragraph until
``--n`` (`make bench-packages` installs the Debian packages they come from); exact duplicate texts are
dropped (a manual page's boilerplate), the order is shuffled with a fixed seed (no source's alphabetical
clustering survives), and 10,000 short queries (WordNet lemma phrases and GCIDE headwords) are held apart.
Vectors: SPLADE-tiny (the ``splade-tiny`` asset), log(1 + ReLU(max over tokens of the MLM logits)), as
the tagger's text side; every non-zero weight is kept.

Resumable: OUT/passages.txt and OUT/queries.txt are written once; the documents are encoded in parts
(OUT/parts/part-NNNNN.npz, each written atomically with its timing beside it) and a rerun skips the
parts already there, so an interrupted build goes on where it stopped. When every part is there, the
corpus is written in search_speed.py's --corpus-dir layout (d_indptr/d_indices/d_data.npy, q_*.npy)
with OUT/stats.json (sizes, tokens per document and per query, encoding time).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from tokenspace.assets import AssetMissingError
from tokenspace.atomic import atomic_path, write_text
from tokenspace.data import passages as P
from tokenspace.sparse import SparseBatch

DICTD = Path("/usr/share/dictd")
WORDNET = Path("/usr/share/wordnet")
MAN = "/usr/share/man/man[1-9]/*.gz"
# documentation in Debian packages (make bench-packages): (glob, format); Sphinx/kernel reST sources, HTML
DOCS = (("/usr/share/doc/python3.11/html/_sources/**/*.rst.txt", "text"),
        ("/usr/share/doc/linux-doc/Documentation/**/*.rst.gz", "text"),
        ("/usr/share/doc/linux-doc/Documentation/**/*.txt.gz", "text"),  # not the .yaml device-tree schemas
        ("/usr/share/doc/postgresql-doc-15/html/*.html", "html"),
        ("/usr/share/doc/python-django-doc/html/**/*.html", "html"),
        ("/usr/share/doc/python-sqlalchemy-doc/html/**/*.html", "html"))
N_QUERIES = 10_000


# ----------------------------------------------------------------------------- texts
def _dictd(name: str, root: Path) -> list[tuple[str, str]]:
    index = (root / f"{name}.index").read_text(encoding="utf-8")
    with gzip.open(root / f"{name}.dict.dz") as f:  # dictzip is gzip-compatible
        return list(P.dictd_entries(index, f.read()))


def _read(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path) as fh:
                return fh.read().decode("utf-8", errors="replace")
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except (OSError, EOFError):
        return None


def _title(path: str) -> str:
    name = Path(path).name
    for suffix in (".gz", ".txt", ".rst", ".html"):
        name = name.removesuffix(suffix)
    return name


def doc_passages(docs=DOCS) -> list[str]:
    """Paragraphs of the installed documentation; generated pages (Sphinx's _modules source listings,
    indexes, search pages) are skipped."""
    cutters = {"text": P.text_passages, "html": P.html_passages}
    out = []
    for pattern, kind in docs:
        for f in sorted(glob.glob(pattern, recursive=True)):
            if "/_modules/" in f or Path(f).name in ("genindex.html", "search.html", "py-modindex.html"):
                continue
            text = _read(f)
            if text is not None:
                out.extend(cutters[kind](_title(f), text))
    return out


def sources(dictd: Path = DICTD, wordnet: Path = WORDNET, man: str = MAN, docs=DOCS) -> Iterator[tuple[str, list[str]]]:
    """(source name, passages) in the order they are taken; manual pages come last (filler to reach N)."""
    yield "gcide", [p for h, e in _dictd("gcide", dictd) for p in P.gcide_passages(h, e)]
    yield "wordnet", [p for pos in ("noun", "verb", "adj", "adv")
                      for p in P.wordnet_passages((wordnet / f"data.{pos}").read_text(encoding="utf-8"))]
    for name in ("foldoc", "jargon"):
        yield name, [p for h, e in _dictd(name, dictd) for p in P.paragraph_passages(h, e)]
    yield "docs", doc_passages(docs)
    out = []
    for f in sorted(glob.glob(man)):
        roff = _read(f)
        if roff is not None:
            out.extend(P.man_passages(Path(f).name[:-3].rsplit(".", 1)[0], roff))
    yield "man", out


def query_candidates(dictd: Path = DICTD, wordnet: Path = WORDNET) -> list[str]:
    lemmas = [q for pos in ("noun", "verb", "adj", "adv")
              for q in P.wordnet_lemmas((wordnet / f"data.{pos}").read_text(encoding="utf-8"))]
    return lemmas + [h for h, _ in _dictd("gcide", dictd)]


def collect(srcs, n: int, seed: int = 0) -> tuple[list[str], dict[str, int]]:
    """Up to ``n`` distinct passages from ``srcs`` in order (duplicates by the text after "title: "),
    shuffled with ``seed``; and how many each source gave."""
    seen: set[str] = set()
    out: list[str] = []
    counts: dict[str, int] = {}
    for name, passages in srcs:
        counts[name] = 0
        for p in passages:
            if len(out) >= n:
                break
            body = p.split(": ", 1)[-1]
            if body in seen:
                continue
            seen.add(body)
            out.append(p)
            counts[name] += 1
    random.Random(seed).shuffle(out)
    return out, counts


def _write_lines(path: Path, lines: list[str]) -> None:
    write_text(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def prepare_texts(out: Path, n: int, n_queries: int = N_QUERIES, srcs=None, candidates=None) -> tuple[list[str], list[str]]:
    """OUT/passages.txt and OUT/queries.txt, built once (a rerun reads them back)."""
    pfile, qfile = out / "passages.txt", out / "queries.txt"
    if pfile.exists() and qfile.exists():
        return _read_lines(pfile), _read_lines(qfile)
    t0 = time.perf_counter()
    passages, counts = collect(srcs if srcs is not None else sources(), n)
    queries = P.hold_out_queries(candidates if candidates is not None else query_candidates(), n_queries, passages)
    _write_lines(pfile, passages)
    _write_lines(qfile, queries)
    write_text(out / "sources.json", json.dumps({"passages": counts, "queries": len(queries),
                                                 "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
    print(f"texts: {len(passages):,} passages {counts}, {len(queries):,} queries "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return passages, queries


# ----------------------------------------------------------------------------- vectors
class Splade:
    """SPLADE-tiny's text vectors: log(1 + ReLU(max_j MLM_j)) over the real tokens, as Tagger.text_embed
    computes them (that class needs the image classifier's assets too, so its text side is not reused)."""

    def __init__(self, weights: str = "asset:splade-tiny", threads: int = 2, max_length: int = 256,
                 dtype: str = "float32", device: str = "cpu", batch: int = 64):
        import torch  # start-up: the corpus files are read without torch

        from tokenspace.models.maxproj import max_projection  # the tagger's kernel, same numbers
        from tokenspace.models.towers import BertMLMTower, resolve_weights

        torch.set_num_threads(threads)
        self.torch, self.max_projection = torch, max_projection
        self.dtype = getattr(torch, dtype)  # the logits' matmul; bfloat16 is ~1.3x faster on this CPU
        self.device, self.batch = torch.device(device), batch
        self.tower = BertMLMTower(weights).eval().to(self.device)
        from tokenizers import Tokenizer  # start-up: as torch

        self.tok = Tokenizer.from_file(str(Path(resolve_weights(weights)) / "tokenizer.json"))
        self.tok.enable_truncation(max_length)
        self.tok.no_padding()

    def __call__(self, texts: list[str]) -> SparseBatch:
        torch, batch = self.torch, self.batch
        enc = self.tok.encode_batch(texts)
        order = np.argsort([len(e.ids) for e in enc], kind="stable")  # similar lengths together: less padding
        parts = []
        t = self.tower
        with torch.inference_mode():
            for a in range(0, len(order), batch):
                idx = order[a : a + batch]
                width = max(len(enc[i].ids) for i in idx)
                ids = torch.zeros(len(idx), width, dtype=torch.long)
                mask = torch.zeros(len(idx), width, dtype=torch.long)
                for r, i in enumerate(idx):
                    ids[r, : len(enc[i].ids)] = torch.tensor(enc[i].ids)
                    mask[r, : len(enc[i].ids)] = 1
                ids, mask = ids.to(self.device), mask.to(self.device)
                h = t.mlm_transform(t(ids, mask))  # [b, L, H]
                best = self.max_projection(h, t.word_embeddings, t.mlm_bias, mask.bool(), self.dtype)  # [b, V]
                parts.append(SparseBatch.from_torch(torch.log1p(torch.relu(best))))  # sparse per batch: no [N, V]
        out = SparseBatch.concat(parts)
        return out[np.argsort(order, kind="stable")]  # back to the input order


def encode_parts(passages: list[str], parts: Path, encode: Callable[[list[str]], SparseBatch],
                 part_size: int, shard: tuple[int, int] = (0, 1)) -> list[Path]:
    """Encode ``passages`` in parts of ``part_size`` rows; parts already on disk are skipped. Each part is
    written atomically, then its timing (part-NNNNN.json). ``shard`` (k, m): only parts i with i % m == k,
    so m processes of one thread each share the work (one process with two threads spends much of its
    CPU time waiting for its second thread on a busy machine)."""
    n_parts = (len(passages) + part_size - 1) // part_size
    files = [parts / f"part-{i:05d}.npz" for i in range(n_parts)]
    todo = [i for i, f in enumerate(files) if not f.exists() and i % shard[1] == shard[0]]
    if todo:
        print(f"encoding {len(todo)} of {n_parts} parts ({sum(f.exists() for f in files)} already done)", flush=True)
    t0, rows_done = time.perf_counter(), 0
    for k, i in enumerate(todo):
        chunk = passages[i * part_size : (i + 1) * part_size]
        ts = time.perf_counter()
        batch = encode(chunk)
        if len(batch) != len(chunk):
            raise RuntimeError(f"part {i}: {len(batch)} vectors for {len(chunk)} passages")
        batch.save(files[i])
        write_text(files[i].with_suffix(".json"), json.dumps({"rows": len(chunk), "seconds": time.perf_counter() - ts}))
        rows_done += len(chunk)
        rate = rows_done / (time.perf_counter() - t0)
        left = sum(min(part_size, len(passages) - j * part_size) for j in todo[k + 1 :])
        print(f"part {i + 1}/{n_parts}: {len(chunk):,} rows in {time.perf_counter() - ts:.0f} s, "
              f"{rate:.0f} rows/s, about {left / rate / 60:.0f} min left", flush=True)
    return files


def write_corpus(out: Path, docs: SparseBatch, queries: SparseBatch) -> None:
    """search_speed.py's --corpus-dir layout."""
    for prefix, b in (("d", docs), ("q", queries)):
        for name, arr in (("indptr", b.indptr.astype(np.int64)), ("indices", b.indices.astype(np.int32)),
                          ("data", b.values.astype(np.float32))):
            with atomic_path(out / f"{prefix}_{name}.npy") as tmp:
                np.save(tmp, arr)


def corpus_stats(docs: SparseBatch, queries: SparseBatch, passages: list[str], query_texts: list[str]) -> dict:
    return {"docs": len(docs), "queries": len(queries),
            "doc_nnz_mean": float(docs.row_nnz().mean()), "doc_nnz_median": float(np.median(docs.row_nnz())),
            "query_nnz_mean": float(queries.row_nnz().mean()),
            "query_nnz_median": float(np.median(queries.row_nnz())),
            "doc_words_mean": float(np.mean([len(p.split()) for p in passages])) if passages else None,
            "query_words_mean": float(np.mean([len(q.split()) for q in query_texts])),
            "active_dims_docs": int(np.count_nonzero(np.bincount(docs.indices, minlength=docs.dim)))}


def done_prefix(parts: Path, n_passages: int, part_size: int) -> list[Path]:
    """The parts on disk from part 0 up to the first missing one (the passages are shuffled, so any
    prefix is a uniform sample of the whole)."""
    files = []
    for i in range((n_passages + part_size - 1) // part_size):
        f = parts / f"part-{i:05d}.npz"
        if not f.exists():
            break
        files.append(f)
    return files


def build(out: Path, n: int, part_size: int = 20_000, n_queries: int = N_QUERIES, encode=None,
          srcs=None, candidates=None, prefix_only: bool = False, shard: tuple[int, int] = (0, 1)) -> dict | None:
    """The whole build (encoding the missing parts), or with ``prefix_only`` the corpus of the parts
    already encoded (a build stopped for lack of time); returns the stats."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    passages, queries = prepare_texts(out, n, n_queries, srcs, candidates)
    encode = encode or Splade()
    if prefix_only:
        files = done_prefix(out / "parts", len(passages), part_size)
        if not files:
            raise SystemExit(f"error: no encoded parts in {out / 'parts'} yet")
        passages = passages[: sum(json.loads(f.with_suffix(".json").read_text())["rows"] for f in files)]
    else:
        files = encode_parts(passages, out / "parts", encode, part_size, shard)
        if not all(f.exists() for f in files):  # another shard's parts are still being encoded
            print("this shard is done; the corpus is written by the run that finds every part", flush=True)
            return None
    docs = SparseBatch.concat(SparseBatch.load(f) for f in files)
    q = encode(queries)
    write_corpus(out, docs, q)
    seconds = sum(json.loads(f.with_suffix(".json").read_text())["seconds"] for f in files)
    stats = {**corpus_stats(docs, q, passages, queries), "encode_docs_seconds": round(seconds, 1),
             "this_run_seconds": round(time.perf_counter() - t0, 1), "part_size": part_size,
             "logits_dtype": str(getattr(encode, "dtype", "")).replace("torch.", ""),
             "sources": json.loads((out / "sources.json").read_text()) if (out / "sources.json").exists() else None}
    write_text(out / "stats.json", json.dumps(stats, indent=1))
    return stats


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench-data/real-text")
    ap.add_argument("--n", type=int, default=1_000_000, help="passages (fewer if the sources hold fewer)")
    ap.add_argument("--queries", type=int, default=N_QUERIES)
    ap.add_argument("--part-size", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="precision of the MLM logits' matrix product (the max and the log run in float32)")
    ap.add_argument("--device", default="cpu", help="where SPLADE-tiny runs (cuda: a GPU encodes 1M passages in minutes)")
    ap.add_argument("--batch", type=int, default=64, help="passages per forward pass (512 or more on a GPU)")
    ap.add_argument("--shard", default="0/1", help="K/M: encode only parts i with i %% M == K (M processes)")
    ap.add_argument("--prefix-only", action="store_true",
                    help="encode nothing more: write the corpus of the parts done so far (a stopped build)")
    a = ap.parse_args(argv)
    try:
        k, m = (int(x) for x in a.shard.split("/"))
        if not 0 <= k < m:
            raise ValueError
    except ValueError:
        ap.error(f"--shard must be K/M with 0 <= K < M, got {a.shard!r}")
    missing = [str(p) for p in (DICTD / "gcide.index", DICTD / "foldoc.index", DICTD / "jargon.index",
                                WORDNET / "data.noun") if not p.exists()]
    pfile = a.out / "passages.txt"
    if missing and not pfile.exists():
        print(f"error: Debian text missing ({', '.join(missing)}): run `make bench-packages`", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        encode = Splade(threads=a.threads, dtype=a.dtype, device=a.device, batch=a.batch)
    except AssetMissingError as e:  # its message names the command that installs the weights
        print(f"error: {e}", file=sys.stderr)
        return 2
    stats = build(a.out, a.n, a.part_size, a.queries, encode=encode, prefix_only=a.prefix_only, shard=(k, m))
    print(json.dumps(stats, indent=1))
    return 0

