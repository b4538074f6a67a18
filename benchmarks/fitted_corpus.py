"""A benchmark corpus fitted to real model outputs: scale a SparseBatch of STAIR vectors up to N docs.

    python -m benchmarks.corpus fitted stair_images.npz bench-data/stair-1M --n 1000000 \\
        [--queries stair_texts.npz] [--n-queries 1000] [--seed 0]

Input: .npz files in SparseBatch.save format (real image embeddings; optionally real text-query
embeddings). Output: the same files gen_corpus.py writes (d_indptr/d_indices/d_data, q_indptr/
q_indices/q_data as .npy), so benchmarks/search_speed.py reads it unchanged.

What is fitted, per generated document:
* its number of non-zeros is drawn from the empirical nnz distribution of the input rows;
* its tokens are drawn one at a time without repeats within the document (the sequential scheme of
  gen_corpus.py), with per-draw probabilities calibrated so that each token lands in the same share
  of documents as in the input (document frequency kept; unseen tokens never appear);
* each weight is drawn from that token's own observed weights (so "dog" keeps dog-like weights).
Queries come from ``--queries`` the same way, or, without it, from the document statistics.
Dependencies between tokens of one row (co-occurrence) are not modelled: documents are independent
draws from the marginals.

``--stream`` (for corpora larger than RAM, e.g. 10M docs of ~230 tokens = 18 GB): the same sampling
scheme run by a numba kernel that writes the documents straight into memory-mapped .npy files, one
block of rows at a time (2 threads; each block seeds its own generator, so the output does not depend
on the thread count). It is a different random stream from the in-memory path, so the two do not
produce the same rows for one seed.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from numba import njit, prange

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import run_record, write_json
from tokenspace.sparse import SparseBatch


class FittedSampler:
    """Token-frequency, nnz and per-token weight statistics of a SparseBatch, and a sampler of rows."""

    def __init__(self, batch: SparseBatch):
        if len(batch) == 0 or batch.nnz == 0:
            raise ValueError("need a non-empty batch with non-zeros to fit")
        self.dim = batch.dim
        self.nnz = batch.row_nnz()
        csc = batch.to_scipy().tocsc()  # weights grouped by token: the pool each token draws from
        csc.sort_indices()
        self.w_ptr = csc.indptr.astype(np.int64)
        self.w_pool = csc.data.astype(np.float32)
        df = np.diff(self.w_ptr).astype(np.float64)
        self.support = np.nonzero(df)[0]
        # a row cannot hold more distinct tokens than the input ever used
        self.max_nnz = min(int(self.nnz.max()), len(self.support))
        self.target = df[self.support] / len(batch)  # fraction of rows holding each token
        self._set_draw_probs(self.target)
        self._calibrate()

    def _set_draw_probs(self, p: np.ndarray) -> None:
        self.p = p / p.sum()
        self.cdf = np.cumsum(self.p)
        self.cdf[-1] = 1.0

    def _calibrate(self, rounds: int = 8, pilot: int = 20_000) -> None:
        """Fit the per-draw probabilities so each token's share of rows matches the input's.

        Drawing without repeats in proportion to document frequency under-represents head tokens
        (a token in every input row lands in only ~70% of rows of 6 draws). A few multiplicative
        fixed-point rounds on a pilot sample correct that.
        """
        rng = np.random.default_rng(12345)  # the pilot never touches the caller's random stream
        for _ in range(rounds):
            b = self._sample_chunk(pilot, rng)
            got = np.bincount(b.indices, minlength=self.dim)[self.support] / pilot
            self._set_draw_probs(self.p * self.target / np.maximum(got, 0.5 / pilot))

    def sample(self, n: int, rng: np.random.Generator, chunk: int = 20_000) -> SparseBatch:
        """``n`` rows (CSR, tokens sorted within rows)."""
        parts = [self._sample_chunk(min(chunk, n - s), rng) for s in range(0, n, chunk)]
        return SparseBatch.concat(parts) if parts else SparseBatch.empty(0, self.dim)

    def _sample_chunk(self, n: int, rng: np.random.Generator) -> SparseBatch:
        want = np.minimum(rng.choice(self.nnz, size=n), self.max_nnz).astype(np.int64)
        tok = np.zeros(0, np.int64)
        row = np.zeros(0, np.int64)
        todo = np.arange(n)
        have = np.zeros(n, np.int64)
        draws_per = 4
        # sequential draws with repeats discarded; rows still short get more draws (rare, head-heavy rows)
        while len(todo):
            draws = (want[todo] - have[todo]) * draws_per + 8
            r = np.repeat(todo, draws)
            t = self.support[np.searchsorted(self.cdf, rng.random(len(r)))]
            row, tok = np.concatenate([row, r]), np.concatenate([tok, t])
            key = row * self.dim + tok
            _, first = np.unique(key, return_index=True)
            first.sort()  # keep draw order within each row
            row, tok = row[first], tok[first]
            order = np.argsort(row, kind="stable")
            row, tok = row[order], tok[order]
            starts = np.searchsorted(row, np.arange(n))
            within = np.arange(len(row)) - starts[row]
            keep = within < want[row]
            row, tok = row[keep], tok[keep]
            have = np.bincount(row, minlength=n)
            todo = np.nonzero(have < want)[0]
            draws_per *= 2
        order = np.lexsort((tok, row))
        row, tok = row[order], tok[order]
        # each weight: a uniform draw from the observed weights of the same token
        lo, hi = self.w_ptr[tok], self.w_ptr[tok + 1]
        w = self.w_pool[lo + np.floor(rng.random(len(tok)) * (hi - lo)).astype(np.int64)]
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(have, out=indptr[1:])
        return SparseBatch(indptr, tok.astype(np.int32), w, self.dim)


def write_corpus(out: Path, docs: SparseBatch, queries: SparseBatch) -> None:
    """The file layout of gen_corpus.py (sparse part), read by benchmarks/search_speed.py."""
    out.mkdir(parents=True, exist_ok=True)
    for prefix, b in (("d", docs), ("q", queries)):
        np.save(out / f"{prefix}_indptr.npy", b.indptr)
        np.save(out / f"{prefix}_indices.npy", b.indices)
        np.save(out / f"{prefix}_data.npy", b.values)


@njit(parallel=True, cache=True)
def _stream_rows(indptr, row0, row1, cdf, support, w_ptr, w_pool, dim, seed, block, out_idx, out_val):
    """Rows [row0, row1) into out_idx/out_val (positions indptr[i] - indptr[row0]): per row, tokens
    drawn one at a time from cdf over support with repeats discarded until the row has its length,
    sorted; each weight a uniform pick from that token's observed weights."""
    n_blocks = (row1 - row0 + block - 1) // block
    off = indptr[row0]
    for b in prange(n_blocks):
        np.random.seed(seed + row0 // block + b)  # per block: independent of the thread that runs it
        stamp = np.full(dim, -1, np.int64)
        r0 = row0 + b * block
        r1 = min(row1, r0 + block)
        for i in range(r0, r1):
            a, e = indptr[i] - off, indptr[i + 1] - off
            m = 0
            while m < e - a:
                t = support[np.searchsorted(cdf, np.random.random())]
                if stamp[t] != i:
                    stamp[t] = i
                    out_idx[a + m] = t
                    m += 1
            out_idx[a:e] = np.sort(out_idx[a:e])
            for p in range(a, e):
                t = out_idx[p]
                lo, hi = w_ptr[t], w_ptr[t + 1]
                out_val[p] = w_pool[lo + np.int64(np.random.random() * (hi - lo))]


def generate_streaming(docs_npz, out, n, queries_npz=None, n_queries=1000, seed=0, rows_per_step=1_000_000):
    """--stream: n documents written into memory-mapped .npy files step by step (bounded memory);
    queries as fit_and_generate makes them. Returns (indptr of the docs, queries)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    src = SparseBatch.load(docs_npz)
    sampler = FittedSampler(src)
    want = np.minimum(rng.choice(sampler.nnz, size=n), sampler.max_nnz).astype(np.int64)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(want, out=indptr[1:])
    del want
    np.save(out / "d_indptr.npy", indptr)
    idx = np.lib.format.open_memmap(out / "d_indices.npy", mode="w+", dtype=np.int32, shape=(int(indptr[-1]),))
    val = np.lib.format.open_memmap(out / "d_data.npy", mode="w+", dtype=np.float32, shape=(int(indptr[-1]),))
    cdf, support = sampler.cdf, sampler.support.astype(np.int64)
    for r0 in range(0, n, rows_per_step):
        r1 = min(n, r0 + rows_per_step)
        a, b = indptr[r0], indptr[r1]
        _stream_rows(indptr, r0, r1, cdf, support, sampler.w_ptr, sampler.w_pool, sampler.dim, seed * 1_000_003,
                     10_000, idx[a:b], val[a:b])
        print(f"  rows {r1:,} / {n:,}", flush=True)
    idx.flush()
    val.flush()
    qsrc = SparseBatch.load(queries_npz) if queries_npz else src
    if qsrc.dim != src.dim:
        raise ValueError(f"queries have dim {qsrc.dim}, documents {src.dim}")
    queries = FittedSampler(qsrc).sample(n_queries, rng)
    for name, arr in (("q_indptr", queries.indptr), ("q_indices", queries.indices), ("q_data", queries.values)):
        np.save(out / f"{name}.npy", arr)
    # fidelity on the first step's rows: share of rows holding each token vs the input's
    m = min(n, rows_per_step)
    got = np.bincount(np.asarray(idx[:indptr[m]]), minlength=sampler.dim)[sampler.support] / m
    print(f"document frequency vs input (first {m:,} rows): max abs diff {np.abs(got - sampler.target).max():.4f}, "
          f"mean nnz {indptr[-1] / n:.1f} (input {sampler.nnz.mean():.1f})")
    return indptr, queries


def fit_and_generate(docs_npz, out, n, queries_npz=None, n_queries=1000, seed=0):
    rng = np.random.default_rng(seed)
    src = SparseBatch.load(docs_npz)
    docs = FittedSampler(src).sample(n, rng)
    qsrc = SparseBatch.load(queries_npz) if queries_npz else src
    if qsrc.dim != src.dim:
        raise ValueError(f"queries have dim {qsrc.dim}, documents {src.dim}")
    queries = FittedSampler(qsrc).sample(n_queries, rng)
    write_corpus(Path(out), docs, queries)
    return docs, queries


def cli(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("docs", type=Path, help="SparseBatch .npz of real document (image) vectors")
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--queries", type=Path, default=None, help="SparseBatch .npz of real query (text) vectors")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stream", action="store_true",
                    help="write the docs into memory-mapped files step by step (bounded memory; a different "
                         "random stream than without it)")
    a = ap.parse_args(argv)
    if a.stream:
        indptr, queries = generate_streaming(a.docs, a.out, a.n, a.queries, a.n_queries, a.seed)
        print(f"wrote {a.out}: {a.n:,} docs, nnz {int(indptr[-1]):,}; queries {queries.stats()}")
        write_json(a.out / "stats.json", {"docs": a.n, "docs_nnz": int(indptr[-1]), "source": str(a.docs)},
                   run_record(__file__, argv))
        return
    docs, queries = fit_and_generate(a.docs, a.out, a.n, a.queries, a.n_queries, a.seed)
    print(f"wrote {a.out}: docs {docs.stats()}, queries {queries.stats()}")
    write_json(a.out / "stats.json", {"docs": len(docs), "docs_nnz": int(docs.nnz), "source": str(a.docs)},
               run_record(__file__, argv))

