"""InvertedIndex: the embedded engine (numba), exact top-k with block-max pruning and an approximate mode.

    index = InvertedIndex.build(docs, ids)                 # docs: SparseBatch, ids: list[str]
    hits = index.search(queries, k=10)                     # list (one per query) of Hits (Hit, best first)
    hits = index.search(queries, k=10, where="dog AND (beach OR sand) NOT cat")
    index.set_hub_prior(bank)                                # CSLS: scores minus 0.5 x each doc's hubness
    hits = index.search(queries, k=10, idf=0.5)              # query weights x BM25 idf ** 0.5
    index.save("idx/"); index = InvertedIndex.load("idx/")  # memory-mapped, checksummed

An index is a list of immutable segments (segment.py; ``add`` appends one) plus per-segment tombstones
(``delete``). Documents get internal numbers in insertion order; equal scores are broken by the smaller
internal number, so results are reproducible. Only documents with a positive score (sharing at least
one dim with the query) are returned, hence a hit list may be shorter than k.

The kernels (numba) run every search, except that a process that has not loaded them answers a small
index's one-query exact search in numpy, with the same answers (road.py: numba's load costs a
one-query command more than its whole search; _plan picks the road).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from operator import is_
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace.index import filters, hubness, manifest, numpy_search, road, storage
from tokenspace.index import metadata as _metadata
from tokenspace.index.base import Hits, hits_of
from tokenspace.index.layout import BAD_QUERY, BLOCK, HEAD_CODES, QUERY_OUT_OF_RANGE
from tokenspace.index.manifest import BANK_ARRAYS, FileEntry, HubPrior, Manifest, SegmentEntry
from tokenspace.index.metadata import MetaFilter
from tokenspace.index.query import Node
from tokenspace.index.reorder import cluster_order
from tokenspace.index.segment import (
    ARRAYS,
    BANDS,
    HEADS,
    RESIDUAL,
    Segment,
    duplicate,
    fwd_index_dtype,
    n_chunks,
    with_bands,
)
from tokenspace.index.storage import IndexCorruptError
from tokenspace.index.token_filter import TokenFilter
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

MODES = ("exact", "approx")
# approximate-mode defaults (rerank None = RERANK_PER_K * k); tuning history: docs/history.md
APPROX_DEFAULTS = {"query_mass": 0.9, "alpha": 0.9, "rerank": None, "impact_floor": 0.0}
RERANK_PER_K = 5
_PLANS_KEPT = 256  # search_arrays' plans an index keeps (a bound for a caller that never repeats a setting)


class InvertedIndex:
    """Embedded sparse inverted index over a fixed dim; implements the SparseIndex protocol."""

    def __init__(self, dim: int, vocab: Vocabulary | None = None, *, dense_fraction: float = 0.125,
                 approx_top_n: int | None = None, deny: Sequence | None = None, allow: Sequence | None = None,
                 impact_heads: bool = True, approx_mass: float | None = None, residual_lists: bool = True):
        if vocab is not None and len(vocab) != dim:
            raise ValueError(f"vocabulary has {len(vocab)} entries but dim is {dim}")
        if not (isinstance(dense_fraction, (int, float)) and dense_fraction > 0):
            raise ValueError(f"dense_fraction must be > 0 (> 1 disables dense columns), got {dense_fraction!r}")
        if approx_top_n is not None and (not isinstance(approx_top_n, (int, np.integer)) or approx_top_n < 1):
            raise ValueError(f"approx_top_n must be a positive int or None, got {approx_top_n!r}")
        self.dim = int(dim)
        self.vocab = vocab
        self.dense_fraction = float(dense_fraction)
        self.approx_top_n = int(approx_top_n) if approx_top_n else 0  # 0: approx reads every term
        if approx_mass is not None and (not isinstance(approx_mass, (int, float)) or isinstance(approx_mass, bool)
                                        or not 0 < approx_mass < 1):
            raise ValueError(f"approx_mass must be in (0, 1) or None, got {approx_mass!r}")
        self.approx_mass = float(approx_mass) if approx_mass is not None else None  # None: no mass cut
        if not isinstance(impact_heads, (bool, np.bool_)):
            raise ValueError(f"impact_heads must be True or False, got {impact_heads!r}")
        self.impact_heads = bool(impact_heads)  # for the segments added from now on
        if not isinstance(residual_lists, (bool, np.bool_)):
            raise ValueError(f"residual_lists must be True or False, got {residual_lists!r}")
        self.residual_lists = bool(residual_lists)  # likewise
        # index-side token blacklist / whitelist (STAIR App. D), applied to every document added
        self.token_filter = TokenFilter.resolve(self.dim, vocab, deny, allow)
        self._segments: list[Segment] = []
        self._deleted: list[np.ndarray | None] = []  # uint8[n] per segment, 1 = deleted
        self._live: list[np.ndarray | None] = []  # cached 1 - deleted, the kernels' mask
        self._id_map: dict[str, int] | None = None  # id -> global doc number, built lazily
        self._plans: dict[tuple, list[tuple]] = {}  # search_arrays' checked arguments (_plan); see _changed
        self._last_plan: tuple | None = None  # (arguments, plan) of the last kernel-road _cached_plan
        self._path: Path | None = None  # folder this index was loaded from / saved to
        self._seg_names: list[str | None] = []  # committed folder name of each segment at _path
        self._del_files: list[dict | None] = []  # committed tombstone entry of each segment
        self._next_seg = 1
        self._generation = 0
        # the hub prior (set_hub_prior): the query bank, K, the default weight; each segment's r_D
        self._hub: dict | None = None
        self._priors: list[np.ndarray | None] = []
        self._prior_files: list[FileEntry | None] = []
        self._hub_files: dict[str, FileEntry] | None = None  # the bank's committed files
        self._vocab_file: FileEntry | None = None  # the vocabulary's committed file at _path
        self._df: np.ndarray | None = None  # live document frequencies (doc_freq), cached
        self._idf_pow: tuple[float, np.ndarray] | None = None  # (power, idf ** power) of the cached df
        # what the index records about its collection (manifest.INFO_FIELDS: the model that encoded the
        # rows, the default ranking), saved with it, so a search session opens from the folder alone
        self.info: dict = {}

    # ----------------------------------------------------------------- build / add / delete
    @classmethod
    def build(cls, batch: SparseBatch, ids: Sequence[str], *, dense_fraction: float = 0.125,
              approx_top_n: int | None = None, vocab: Vocabulary | None = None, deny: Sequence | None = None,
              allow: Sequence | None = None, metadata: Sequence[dict] | None = None,
              reorder: bool = False, impact_heads: bool = True, generic_share: float | None = None,
              approx_mass: float | None = None, residual_lists: bool = True) -> "InvertedIndex":
        """Index ``batch`` (non-negative weights, sorted unique dims per row) under string ``ids``.

        dense_fraction: terms in at least this fraction of a segment's docs are stored as dense uint8
            columns (faster to scan, n bytes each); > 1 disables them.
        approx_top_n: VisualSparta-style index-time pruning for the approximate mode only: approx
            search reads each document's approx_top_n heaviest terms; every term is still stored
            (in separate lists) and exact search reads them all, so exact results are unchanged.
            None: approx reads every term too. (To drop terms for good, prune the batch:
            SparseBatch.prune_topk.)
        approx_mass: the same pruning by weight instead of count (SINDI's document pruning; its
            doc_prune_ratio is 1 - approx_mass): approx search reads each document's heaviest terms
            until they hold this fraction of its weight, so a document with a few heavy terms keeps
            few and a flat one many. Exact search still reads every term. In (0, 1), or None; with
            approx_top_n too, a term must pass both. Stored with the index (format version 7).
        residual_lists: keep and save the residual lists (the postings approx_top_n / approx_mass leave
            out of the approximate lists; only exact search and the dim filters ``must``, ``must_not``
            and ``where`` read them). False leaves them out of the index (a sixth of it on
            real-text-100K with approx_mass 0.8, docs/benchmarks.md): approximate search is unchanged,
            and the first exact search (or dim filter) of each segment derives them from the stored
            rows, O(postings), and keeps them in memory; the answers are the same. Format version 9;
            every later ``add`` and ``compact`` follows the choice.
        vocab: names of the dims (defaults to batch.vocab); stored with the index, used by ``where=``.
        deny / allow: index-side token blacklist / whitelist (STAIR App. D; dims or token names): denied
            dims are dropped from every document before indexing, and with ``allow`` only those dims
            are kept. Stored with the index; every later ``add`` applies it too (token_filter.py).
        metadata: one dict of fields per document (source, caption, any JSON), stored with the index
            and filtered on by ``search(meta=...)`` (metadata.py).
        reorder: add the documents cluster by cluster (reorder.cluster_order) instead of in the given
            order: block skipping then prunes more (measured: docs/history.md). Results are the same
            top-k; only ties between equal scores follow the new order, as "earlier insertion" does.
        impact_heads: split each term's postings into impact bands (those of at least 1/2, 1/4 and 1/8 of
            its largest weight, taken out of its list; a dense term's copied beside its column), so that
            search's ``impact_floor`` reads a term only down to the band its floor needs. They cost
            their pointers and the dense terms' copies (real-text-100K: 71.5 MB against 67.9 MB without);
            False refuses ``impact_floor``, and every other search returns the same. Every later ``add``
            and ``compact`` follows the choice.
        generic_share: down-weight generic image tokens: a token held by more than this share of the
            documents keeps share / (its share) of its weight and each row is L2-normalised again
            (hubness.generic_factors). The factors are computed from ``batch``, stored with the index
            (its token filter) and applied to every later ``add`` too.
        """
        if not isinstance(batch, SparseBatch):
            raise TypeError(f"build takes a SparseBatch, got {type(batch).__name__}")
        if reorder and len(batch) > 1:
            ids = _check_ids(ids, len(batch))
            metadata = _metadata.check_rows(metadata, len(batch))
            order = cluster_order(batch)
            batch, ids = batch[order], [ids[i] for i in order]
            metadata = None if metadata is None else [metadata[i] for i in order]
        index = cls(batch.dim, vocab if vocab is not None else batch.vocab,
                    dense_fraction=dense_fraction, deny=deny, allow=allow,
                    approx_top_n=approx_top_n, impact_heads=impact_heads, approx_mass=approx_mass,
                    residual_lists=residual_lists)
        if generic_share is not None:
            index.token_filter = TokenFilter.generic(batch, generic_share, index.token_filter)
        index.add(batch, ids, metadata=metadata)
        return index

    def add(self, batch: SparseBatch, ids: Sequence[str], metadata: Sequence[dict] | None = None, *,
            prior: np.ndarray | None = None) -> None:
        """Append documents as a new segment (persisted by the next ``save``); ``metadata``: one dict of
        fields per document, or None. With a hub prior the new documents' r_D is computed from the
        stored bank (``prior``: given instead, float32 per document, as compact carries it)."""
        if not isinstance(batch, SparseBatch):
            raise TypeError(f"add takes a SparseBatch, got {type(batch).__name__}")
        if batch.dim != self.dim:
            raise ValueError(f"documents have dim {batch.dim}, the index has dim {self.dim}")
        ids = _check_ids(ids, len(batch))
        rows = _metadata.check_rows(metadata, len(batch))
        # the first segment leaves the id map to _ids(), built on first use (get, delete, a later add): a
        # search needs none, and building it was ~15 ms of a 100K-document build
        first = not self._segments
        id_map = {} if first else self._ids()
        clash = [i for i in ids if i in id_map] if id_map else []
        if clash:
            raise ValueError(f"{len(clash)} id(s) already in the index, e.g. {clash[0]!r} (ids must be unique)")
        if len(batch) == 0:
            return
        if self.token_filter is not None:
            batch = self.token_filter.apply(batch)
        if prior is not None:
            if self._hub is None:
                raise ValueError("prior= is for an index with a hub prior (set_hub_prior)")
            prior = _check_prior(prior, len(batch))
        elif self._hub is not None:
            prior = hubness.csls_hubness(batch, self._hub["bank"], self._hub["k"])
        if prior is not None and self._hub["ordered"] and len(batch) > 1:  # the segment in hubness order
            perm = np.argsort(prior, kind="stable")
            batch, ids, prior = batch[perm], [ids[i] for i in perm], prior[perm]
            rows = None if rows is None else [rows[i] for i in perm]
        seg = Segment.build(batch, ids, dense_fraction=self.dense_fraction, approx_top_n=self.approx_top_n,
                            impact_heads=self.impact_heads, metadata=rows, approx_mass=self.approx_mass or 0.0,
                            residual_lists=self.residual_lists)
        base = self._total()
        self._segments.append(seg)
        self._deleted.append(None)
        self._live.append(None)
        self._seg_names.append(None)
        self._del_files.append(None)
        self._priors.append(prior)
        self._prior_files.append(None)
        self._df = self._idf_pow = None
        self._changed()
        if first:
            self._id_map = None
        else:
            id_map.update(zip(ids, range(base, base + len(ids))))

    def delete(self, ids: Sequence[str]) -> int:
        """Tombstone documents by id; unknown ids are ignored. Returns how many were deleted."""
        id_map = self._ids()
        count = 0
        for s in _check_ids(ids, None):
            g = id_map.pop(s, None)
            if g is None:
                continue
            si, local = self._locate(g)
            if self._deleted[si] is None:
                self._deleted[si] = np.zeros(self._segments[si].n, np.uint8)
            elif not self._deleted[si].flags.writeable:
                self._deleted[si] = self._deleted[si].copy()
            self._deleted[si][local] = 1
            self._live[si] = None
            self._del_files[si] = None
            count += 1
        if count:
            self._df = self._idf_pow = None
            self._changed()
        return count

    def compact(self) -> None:
        """Merge all segments into one without the deleted documents (internal order is kept, or with an
        ordered hub prior the documents are in hubness order again)."""
        self._rebuild()

    def _rebuild(self) -> None:
        """One segment of the live documents in internal order (their stored rows, metadata, prior),
        gathered segment by segment (get() by id costs ~0.1 ms a document: minutes at 1M)."""
        rows, ids, meta, prior = [], [], [], []
        for si, seg in enumerate(self._segments):
            dele = self._deleted[si]
            live = np.arange(seg.n) if dele is None else np.nonzero(dele == 0)[0]
            if not len(live):
                continue
            rows.append(seg.rows(live))
            ids += seg.ids_of(live.tolist())
            seg_meta = seg.metadata()
            meta += [seg_meta[i] for i in live]
            if self._priors[si] is not None:
                prior.append(self._priors[si][live])
        fresh = InvertedIndex(self.dim, self.vocab, dense_fraction=self.dense_fraction,
                              approx_top_n=self.approx_top_n or None, impact_heads=self.impact_heads,
                              approx_mass=self.approx_mass, residual_lists=self.residual_lists)
        fresh._hub, fresh.info = self._hub, self.info
        if ids:  # the stored rows are already filtered: not again (scaling is not idempotent)
            fresh.add(SparseBatch.concat(rows).with_vocab(self.vocab), ids, metadata=meta,
                      prior=np.concatenate(prior) if self._hub is not None else None)
        fresh.token_filter = self.token_filter
        path, nxt, gen, hub_files = self._path, self._next_seg, self._generation, self._hub_files
        self.__dict__.update(fresh.__dict__)
        self._path, self._next_seg, self._generation, self._hub_files = path, nxt, gen, hub_files

    # ----------------------------------------------------------------- ranking: hub prior, idf
    def set_hub_prior(self, bank: SparseBatch, k: int = hubness.DEFAULT_K,
                      weight: float = hubness.CSLS_WEIGHT, order: bool = True) -> None:
        """Store a hub prior (CSLS, hubness.py): each document's r_D, the mean of its ``k`` largest dot
        products with the rows of ``bank`` (query vectors of training captions or prompts, never test
        queries), is computed now and for every later ``add``; search ranks by dot product -
        ``weight`` x r_D (``prior_weight=`` changes the weight per search, 0 switches it off). The bank
        is stored with the index (persisted by the next ``save``), so later adds need nothing else.

        order: keep the documents in hubness order (the index is rebuilt now, as ``compact`` does, and
        every later ``add`` writes its segment in that order), so that neighbouring documents have
        alike penalties and the kernels' per-run penalty bounds stay tight: exact search with the prior
        then costs about what it costs without (real-text-100K: 1.50x the time in insertion order, about
        1.0x in hubness order; docs/benchmarks.md). Results are the same top-k; only ties between equal
        scores follow the new order, as ``build(reorder=True)``'s do."""
        if not isinstance(bank, SparseBatch):
            raise TypeError(f"the bank must be a SparseBatch of query vectors, got {type(bank).__name__}")
        weight = _check_weight(weight, "weight")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if len(bank) == 0:
            raise ValueError("the query bank is empty: give it training captions or prompts")
        if bank.dim != self.dim:
            raise ValueError(f"the bank has dim {bank.dim}, the index has dim {self.dim}")
        bad = road.check_rows(bank.indptr, bank.indices, bank.values)
        if bad >= 0:
            raise ValueError(f"bank row {bad} must have strictly increasing dims and finite weights >= 0")
        bank = SparseBatch(bank.indptr, bank.indices, bank.values, bank.dim)  # stored without its vocabulary
        priors = [hubness.csls_hubness(seg.rows(np.arange(seg.n)), bank, k) for seg in self._segments]
        self._hub = {"bank": bank, "k": int(k), "weight": weight, "ordered": bool(order)}
        self._priors = priors
        self._prior_files = [None] * len(self._segments)
        self._hub_files = None
        self._changed()
        if order and self._segments:
            self._rebuild()

    def clear_hub_prior(self) -> None:
        """Drop the hub prior (the next ``save`` stores the index without it)."""
        self._hub, self._hub_files = None, None
        self._priors = [None] * len(self._segments)
        self._prior_files = [None] * len(self._segments)
        self._changed()

    @property
    def hub_prior(self) -> dict | None:
        """{"k", "weight", "bank_size", "ordered"} of the stored hub prior, or None."""
        if self._hub is None:
            return None
        return {"k": self._hub["k"], "weight": self._hub["weight"], "bank_size": len(self._hub["bank"]),
                "ordered": self._hub["ordered"]}

    def hubness(self, ids: Sequence[str]) -> np.ndarray:
        """r_D of these documents (float32, in order); zeros without a hub prior."""
        if self._hub is None:
            return np.zeros(len(_check_ids(ids, None)), np.float32)
        id_map = self._ids()
        out = np.empty(len(ids), np.float32)
        for j, s in enumerate(ids):
            if s not in id_map:
                raise KeyError(f"unknown id {s!r}")
            si, local = self._locate(id_map[s])
            out[j] = self._priors[si][local]
        return out

    def prior_weight(self, weight: float | None = None) -> float:
        """The weight a search subtracts r_D with: ``weight`` when given (checked), else the stored one
        (0 without a hub prior)."""
        if weight is None:
            return 0.0 if self._hub is None else self._hub["weight"]
        weight = _check_weight(weight, "prior_weight")
        if weight > 0 and self._hub is None:
            raise ValueError("prior_weight: this index has no hub prior (set_hub_prior, or `tokenspace index "
                             "build --hub-bank`)")
        return weight

    def doc_freq(self) -> np.ndarray:
        """int64[dim]: how many live documents hold each dim (deleted ones not counted), kept current
        under add, delete and compact."""
        if self._df is None:
            df = np.zeros(self.dim, np.int64)
            for seg, dele in zip(self._segments, self._deleted):
                df += seg.df
                if dele is not None and dele.any():
                    gone = seg.rows(np.nonzero(dele)[0])
                    df -= np.bincount(gone.indices[gone.values > 0], minlength=self.dim)
            self._df = df
        return self._df

    def idf(self) -> np.ndarray:
        """float32[dim]: BM25's idf of each dim over the live documents (hubness.bm25_idf)."""
        return hubness.bm25_idf(self.doc_freq(), len(self))

    def weigh(self, queries: SparseBatch, idf: float = 0.0) -> SparseBatch:
        """The queries with each weight times idf(dim) ** ``idf`` (0: unchanged): what search(idf=)
        scores with, and what an explanation's query weights are."""
        table = self._idf_table(idf)
        return queries if table is None else hubness.weigh_queries(queries, table)

    def _idf_table(self, idf) -> np.ndarray | None:
        """float32[dim] of idf ** ``idf`` (None for 0), one per power until the postings change."""
        if not (isinstance(idf, (int, float, np.floating)) and not isinstance(idf, bool) and 0 <= idf <= 4):
            raise ValueError(f"idf must be a number in [0, 4] (the power of BM25's idf), got {idf!r}")
        if not idf:
            return None
        if self._idf_pow is None or self._idf_pow[0] != idf:
            self._idf_pow = (idf, np.power(self.idf().astype(np.float64), idf).astype(np.float32))
        return self._idf_pow[1]

    # ----------------------------------------------------------------- search
    def search(self, queries: SparseBatch, k: int = 10, *, mode: str = "exact",
               must: Sequence | None = None, must_not: Sequence | None = None,
               where: "str | Node | None" = None, subset: Sequence[str] | None = None,
               meta: "dict | MetaFilter | None" = None,
               query_mass: float | None = None, alpha: float | None = None, rerank: int | None = None,
               impact_floor: float | None = None, threads: int = 1, idf: float = 0.0,
               prior_weight: float | None = None) -> list[Hits]:
        """Top-k documents by dot product for each query row, best first (ties: earlier insertion).

        mode: "exact" returns the exact top-k (candidates from uint8-quantised scores within a proven
            error window, rescored with the stored float32 vectors). "approx" trades recall for speed
            with the knobs below (defaults in APPROX_DEFAULTS; they are rejected in exact mode): it
            scores the docs with a cut query (in 16-bit integers when the cut query has dense-column
            terms and at most kernels.U16_MAX_TERMS terms, else as exact mode does), keeps the
            `rerank` best of those quantised scores and ranks them by their exact score with the
            full query.
        query_mass (approx, in (0, 1], default 0.9): query-time term cut; candidates are scored with each
            query's heaviest terms that together carry this fraction of its L1 weight (1 = no cut).
            Lower is faster (fewer posting lists and dense columns read) and loses docs whose score
            comes from the dropped light terms. Reported scores still use the full query.
        alpha (approx, in (0, 1], default 0.9): block skipping; a 64-doc block is skipped when its
            upper bound is below threshold / alpha (1 = no approximation from this knob). Blocks are
            skipped from a segment's second 65,536 documents on: the first set the threshold.
        rerank (approx, int >= k, default 5 * k): how many best quantised (cut-query) scores per
            segment are rescored exactly; the result is the exact top-k of those. More = higher recall
            (a true top-k doc is lost only if its cut-query score is not among the rerank best) and
            about 1-2 us per extra doc at 1M docs. With query_mass=1, alpha=1 and rerank >= the
            number of docs, approx equals exact.
        impact_floor (approx, in [0, 1), default 0): postings whose impact (query weight x doc weight)
            is below this fraction of the query's largest possible impact are not read: each term reads
            the smallest of its impact heads (postings with at least 1/2, 1/4 or 1/8 of the term's
            largest weight, kernels.HEAD_CODES) holding every posting above the floor, or nothing
            when its heaviest posting is below it. Higher is faster and scores docs on fewer of their
            terms, so pair it with a larger rerank (real-text-967K: docs/history.md, "impact heads").
        Also in approx mode only each document's ``approx_top_n`` heaviest terms (and with ``approx_mass``
        its heaviest until they hold that share of its weight) are read (see build).
        must / must_not: dims (ints, or tokens when the index has a vocabulary) that a document must
            all have / must have none of (weight > 0).
        where: boolean query tree (query.Node) or string parsed with parse_query over the index vocab.
        subset: only these document ids are searched (unknown ids are an error).
        meta: a filter on the rows' metadata (metadata.py: {"source": "emoji"}, {"f": {"in": [...]}},
            {"caption": {"word": "dog"}}), applied with the others before top-k.
        threads: queries are split over this many threads (numba kernels release the GIL).
        idf: each query weight is multiplied by BM25's idf of its dim ** idf over the live documents
            (0, the default: off; 1: BM25's idf; ``weigh`` gives the weighted queries).
        prior_weight: with a hub prior (set_hub_prior), the score is dot product - prior_weight x r_D,
            inside the kernels (exact mode returns the exact top-k of that score). None: the stored
            weight; 0: the plain dot product.
        Returns one Hits per query row (a sequence of Hit, best first); documents with dot product 0 are
        never returned.
        """
        if not isinstance(queries, SparseBatch):
            raise TypeError(f"search takes a SparseBatch of queries, got {type(queries).__name__}")
        if queries.dim != self.dim:
            raise ValueError(f"queries have dim {queries.dim}, the index has dim {self.dim}")
        if type(threads) is not int or threads < 1:  # the common case (a plain int) in one test
            if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
                raise ValueError(f"threads must be a positive int, got {threads!r}")
        one = len(queries.indptr) == 2
        if must is None and must_not is None and where is None and subset is None and meta is None:
            plan = self._cached_plan(mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf, one)
        else:  # a filter's masks belong to this search: worked out each time, never kept
            plan = self._plan(mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf,
                              (must, must_not, where, subset, meta), one)
        k = int(k)
        if one:
            # one query (a SparseBatch's single row is all of its arrays, already int32 / float32 and in
            # range): search_arrays' road, one jitted call per segment that checks, cuts and searches it
            per_seg = self._query(plan, queries.indices, queries.values, "query row 0", k)
            if len(per_seg) == 1:
                _, seg, od, os_, m = per_seg[0]
                return [hits_of(os_[:m].tolist(), seg.ids_of(od[:m].tolist()))]
            return [self._merge([(b, seg, od[None], os_[None], (m,)) for b, seg, od, os_, m in per_seg], 0, k)]
        bad = road.kernels().check_rows(queries.indptr, queries.indices, queries.values)
        if bad >= 0:
            raise ValueError(f"query row {bad} must have strictly increasing dims and finite weights >= 0")
        per_seg = self._score(queries, plan, threads)
        return [self._merge(per_seg, r, k) for r in range(len(queries))]

    def search_arrays(self, indices, values, k: int = 10, *, mode: str = "exact", query_mass: float | None = None,
                      alpha: float | None = None, rerank: int | None = None, impact_floor: float | None = None,
                      prior_weight: float | None = None) -> tuple[list[str], np.ndarray]:
        """One query given as its dims and weights (sorted unique dims, weights >= 0): the same top-k as
        ``search`` (same knobs, no filters or idf), as (ids best first, float32 scores), for callers
        that hold one query as arrays. ``search`` with a one-row SparseBatch takes the same road (the
        checked arguments kept per setting, one jitted call per segment) and costs about as much."""
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        values = np.ascontiguousarray(values, dtype=np.float32)
        if indices.ndim != 1 or indices.shape != values.shape:
            raise ValueError(f"indices and values must be 1-D and alike, got shapes {indices.shape} and {values.shape}")
        plan = self._cached_plan(mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, 0.0, True)
        per_seg = self._query(plan, indices, values, "the query", int(k))
        if len(per_seg) == 1:
            _, seg, od, os_, m = per_seg[0]
            return seg.ids_of(od[:m].tolist()), os_[:m].copy()
        hits = self._merge([(b, seg, od[None], os_[None], (m,)) for b, seg, od, os_, m in per_seg], 0, int(k))
        return list(hits.ids), np.array(hits.scores, np.float32)

    def _cached_plan(self, mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf,
                     one: bool) -> list[tuple]:
        """_plan's answer for an unfiltered search, kept per argument combination until the index changes
        (_changed): working it out was ~2 us of a one-query search. The key also holds whether the kernels
        are loaded: a plan of the numpy road (road.py) is not kept past their loading."""
        # A caller repeating a setting passes the very same objects (its literals, its settings dict): the
        # last kernel-road plan is given back when every argument and default is the same object as then,
        # without building and hashing the key below (3-5 us of a one-query search right after the kernels,
        # whose work leaves the process's own memory cold; 0.3-1.3 us this way; 200K sample, in-process).
        args = (mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf, one, *APPROX_DEFAULTS.values())
        last = self._last_plan
        if last is not None and len(last[0]) == len(args) and all(map(is_, args, last[0])):
            return last[1]
        numpy_one = one and not road.use_kernels(0)
        key = (*args[:8], numpy_one)
        try:  # the key holds each argument's type (1, 1.0 and True are equal keys) and the defaults a None takes
            key = (*key, *map(type, key), *args[9:])
            plan = self._plans.get(key)
        except TypeError:  # an unhashable argument: checked (and refused) by _plan
            key = plan = None
        if plan is None:
            plan = self._plan(mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf, None, one)
            if key is not None and len(self._plans) < _PLANS_KEPT:
                self._plans[key] = plan
        if not numpy_one:  # a numpy-road plan is not kept past the kernels' loading (see the key)
            self._last_plan = (args, plan)
        return plan

    def _query(self, plan, indices, values, what: str, k: int) -> list[tuple]:
        """One query (int32 dims, float32 weights) over every segment of ``plan`` (k: the search's k, at
        least each segment's hit count): per segment (first doc number, segment, local docs, scores, hit
        count). The docs and scores are this thread's buffers (kernels.query_scratch): read them out before
        its next search. ``what`` names the query in an error.

        A segment's plan says its road (_plan): the kernels (kt, its kernel arrays), or numpy's exact search
        (kt None: numpy_search.py, the same answers) in a process that has not loaded the kernels."""
        # one road per search (_plan): the kernels' when the first segment has kernel arrays
        kernels = road.kernels() if plan and plan[0][2] is not None else None
        if kernels is not None:
            work, outs = kernels.query_scratch(self.dim, len(plan), k)
        else:
            outs = [(np.empty(k, np.int64), np.empty(k, np.float32)) for _ in plan]
        per_seg, checked = [], False
        for (base, seg, kt, opt, kk), (out_docs, out_scores) in zip(plan, outs):
            m = 0
            if opt is not None and kt is None:
                m = road.on_numpy(numpy_search.search_query, seg.fwd_views(), opt, indices, values, self.dim,
                                  out_docs, out_scores)
            elif opt is not None:
                try:
                    m = kernels.search_query(kt.table, kt.fwd_indices, opt, indices, values, self.dim, work, out_docs,
                                             out_scores)
                except BaseException:  # the buffers may be left dirty: the next search gets fresh ones
                    kernels.drop_scratch()
                    raise
            if opt is not None:
                if m == QUERY_OUT_OF_RANGE:
                    raise ValueError(f"indices out of range [0, {self.dim})")
                if m == BAD_QUERY:
                    raise ValueError(f"{what} must have strictly increasing dims and finite weights >= 0")
                checked = True
            per_seg.append((base, seg, out_docs, out_scores, m))
        if not checked:  # no segment searched (none yet, or every doc filtered out): the query is still checked
            if len(indices) and indices.view(np.uint32).max() >= self.dim:  # a negative dim reads as >= 2**31
                raise ValueError(f"indices out of range [0, {self.dim})")
            if road.check_rows(np.array([0, len(indices)], np.int64), indices, values) >= 0:
                raise ValueError(f"{what} must have strictly increasing dims and finite weights >= 0")
        return per_seg

    def _plan(self, mode, k, query_mass, alpha, rerank, impact_floor, prior_weight, idf=0.0,
              filters: tuple | None = None, one: bool = False) -> list[tuple]:
        """What a search runs for these arguments, checked: per segment (first doc number, segment, its
        kernel arrays, tuple(SearchOptions) or None when no document of it may be returned, its hit
        count). filters: (must, must_not, where, subset, meta), or None for none (deleted documents are
        left out either way).

        one: the plan of a one-query search (_query). An exact one in a process that has not loaded the
        kernels, on an index of at most road.NUMPY_MAX_ENTRIES stored entries, takes numpy's road instead:
        per segment kernel arrays None and numpy_search.ExactOptions (the same answers; road.py says why).
        This is the one place a search picks its road; approximate search and batches keep the kernels."""
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        k = int(k)
        qm, al, rr, fl = self._knobs(mode, k, query_mass, alpha, rerank, impact_floor)
        weights = self._idf_table(idf)  # applied inside the kernels (weigh() gives the same weighted rows)
        pw = self.prior_weight(prior_weight)
        if fl > 0 and not all(seg.has_heads for seg in self._segments):
            raise ValueError("impact_floor needs impact heads, and this index was built with "
                             "impact_heads=False")
        masks = self._masks(*(filters or (None, None, None, None)))
        numpy_road = one and mode == "exact" and not road.use_kernels(self._entries())
        plan, base = [], 0
        for si, seg in enumerate(self._segments):
            kk = min(k, seg.n)
            mask = masks[si]
            opt = None
            if numpy_road:
                if mask is None or mask.any():
                    opt = numpy_search.ExactOptions(kk, mask, self._penalty_array(si, pw) if pw > 0 else None, weights)
                plan.append((base, seg, None, opt, kk))
            else:
                if mask is None or mask.any():
                    opt = self._options(si, kk, min(rr, seg.n), mode == "exact", al, qm, mask, fl, pw, weights)
                plan.append((base, seg, seg.kernel_segment(mode == "exact"), opt, kk))
            base += seg.n
        return plan

    def _entries(self) -> int:
        """Stored entries (forward-store terms) of every segment: what numpy's exact search reads a query."""
        return sum(int(seg.fwd_indptr[-1]) for seg in self._segments)

    def load_kernels(self) -> None:
        """Load the numba kernels now and the compiled search of this index's queries (its first call
        loads it from numba's cache), so that a session that answers many queries (the service: its
        Searcher.fast_text) pays that at start and searches with the kernels from its first query; a
        process that answers one query leaves them unloaded on a small index (road.py)."""
        road.kernels()
        if self._segments:
            self.search_arrays(np.empty(0, np.int32), np.empty(0, np.float32), k=1)

    def _changed(self) -> None:
        """The segments, tombstones, document frequencies, hub prior or arrays changed: the kept plans
        are out of date."""
        self._plans.clear()
        self._last_plan = None

    def _options(self, si, k, rerank, exact, alpha, query_mass, mask, impact_floor, pw, weights=None) -> tuple:
        """tuple(SearchOptions) of segment si for one query, as search_query takes it; the unfiltered ones
        without a prior or idf kept per segment (a sweep has a few), since building one cost ~1 us a query."""
        if mask is not None or pw > 0 or weights is not None:
            penalty, pmax, minima = self._penalty(si, pw) if pw > 0 else (None, None, None)
            return tuple(road.kernels().search_options(k, rerank, exact, alpha, query_mass, mask, impact_floor,
                                                       penalty, pmax, minima, weights))
        cache = self._segments[si].__dict__.setdefault("_options", {})
        key = (k, rerank, exact, alpha, query_mass, impact_floor)
        opt = cache.get(key)
        if opt is None:
            opt = cache[key] = tuple(road.kernels().search_options(k, rerank, exact, alpha, query_mass,
                                                                   impact_floor=impact_floor))
        return opt

    def _score(self, queries, plan, threads) -> list[tuple]:
        """Every segment's top-k of every query row: (first doc number, segment, docs, scores, counts)."""
        nq = len(queries)
        per_seg = []
        for base, seg, kt, opt, kk in plan:
            # only the first out_count[r] entries of a row are written and read: empty is enough there
            out_docs = np.empty((nq, kk), np.int64)
            out_scores = np.empty((nq, kk), np.float32)
            out_count = np.zeros(nq, np.int64)
            if opt is not None:
                _run(kt, opt, queries, out_docs, out_scores, out_count, threads, self.dim)
            per_seg.append((base, seg, out_docs, out_scores, out_count))
        return per_seg

    def _knobs(self, mode, k, query_mass, alpha, rerank, impact_floor):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        given = {"query_mass": query_mass, "alpha": alpha, "rerank": rerank, "impact_floor": impact_floor}
        if mode == "exact":
            extra = [n for n, v in given.items() if v is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} only apply to mode='approx'")
            return 1.0, 1.0, int(k), 0.0  # the heap holds k; the proof's 2 err window adds the rest
        knobs = {n: (APPROX_DEFAULTS[n] if v is None else v) for n, v in given.items()}
        qm, al, rr = knobs["query_mass"], knobs["alpha"], knobs["rerank"]
        if not (isinstance(qm, (int, float)) and 0 < qm <= 1):
            raise ValueError(f"query_mass must be in (0, 1], got {qm!r}")
        if not (isinstance(al, (int, float)) and 0 < al <= 1):
            raise ValueError(f"alpha must be in (0, 1], got {al!r}")
        rr = RERANK_PER_K * int(k) if rr is None else rr
        if not isinstance(rr, (int, np.integer)) or rr < k:
            raise ValueError(f"rerank must be an int >= k ({k}), got {rr!r}")
        fl = knobs["impact_floor"]
        if not (isinstance(fl, (int, float)) and not isinstance(fl, bool) and 0 <= fl < 1):
            raise ValueError(f"impact_floor must be in [0, 1), got {fl!r}")
        return float(qm), float(al), int(rr), float(fl)

    def _penalty(self, si: int, weight: float) -> tuple:
        """Segment si's weight x r_D as the kernels read it, its largest value and its run minima
        (kernels.penalty_minima), cached per weight (a sweep changes it)."""
        seg = self._segments[si]
        cached = getattr(seg, "_penalty", None)
        if cached is None or cached[0] != weight or cached[1] is not self._priors[si]:
            pen = self._penalty_array(si, weight)
            cached = (weight, self._priors[si], pen, float(pen.max(initial=0.0)), road.kernels().penalty_minima(pen))
            seg.__dict__["_penalty"] = cached
        return cached[2], cached[3], cached[4]

    def _penalty_array(self, si: int, weight: float) -> np.ndarray:
        """Segment si's weight x r_D (float32), what both roads subtract."""
        return (np.float32(weight) * self._priors[si]).astype(np.float32)

    @staticmethod
    def _merge(per_seg, r, k) -> Hits:
        if not per_seg:  # an index with no segment yet
            return Hits()
        if len(per_seg) == 1:
            _, seg, od, os_, oc = per_seg[0]
            m = int(oc[r])
            # tolist: python floats/ints at once, cheaper than per-element numpy scalars
            return hits_of(os_[r, :m].tolist(), seg.ids_of(od[r, :m].tolist()))
        d = np.concatenate([od[r, :int(oc[r])] + base for base, _, od, _, oc in per_seg])
        s = np.concatenate([os_[r, :int(oc[r])] for _, _, _, os_, oc in per_seg])
        order = np.lexsort((d, -s))[:k]
        # a hit's segment: the last one starting at or before it (an empty segment shares its base with
        # the next one, which then wins)
        bases = np.array([base for base, *_ in per_seg])
        which = np.searchsorted(bases, d[order], side="right") - 1
        return hits_of(s[order].tolist(), [per_seg[w][1].ids_of([g - per_seg[w][0]])[0]
                                           for g, w in zip(d[order].tolist(), which.tolist())])

    # ----------------------------------------------------------------- filters
    def _masks(self, must, must_not, where, subset, meta=None) -> list[np.ndarray | None]:
        """Per segment uint8 mask of searchable docs (None = all): live AND subset AND filters."""
        if must is None and must_not is None and where is None and subset is None and meta is None \
                and all(d is None for d in self._deleted):
            return [None] * len(self._segments)  # the common unfiltered search: ~1 us of a one-query call
        trees = filters.token_tree(self.dim, self.vocab, must, must_not, where)
        meta = MetaFilter.resolve(meta)
        allowed = None
        if subset is not None:
            id_map = self._ids()
            sub = _check_ids(subset, None)
            missing = [s for s in sub if s not in id_map]
            if missing:
                raise ValueError(f"subset: {len(missing)} unknown id(s), e.g. {missing[0]!r}")
            allowed = np.fromiter((id_map[s] for s in sub), np.int64, len(sub))
        masks, base = [], 0
        for si, seg in enumerate(self._segments):
            m = None
            if self._deleted[si] is not None:
                if self._live[si] is None:
                    self._live[si] = (1 - self._deleted[si]).astype(np.uint8)
                m = self._live[si].astype(bool)
            if allowed is not None:
                part = np.zeros(seg.n, bool)
                local = allowed[(allowed >= base) & (allowed < base + seg.n)] - base
                part[local] = True
                m = part if m is None else m & part
            for tree in trees:
                cache: dict[int, np.ndarray] = {}
                leaf = lambda d, seg=seg, cache=cache: cache.setdefault(d, seg.has_dim(d))  # noqa: E731
                t = tree.evaluate(leaf)
                m = t if m is None else m & t
            if meta is not None:
                t = meta.mask(seg.metadata_index())
                m = t if m is None else m & t
            masks.append(None if m is None else m.view(np.uint8) if m.dtype == bool else m)
            base += seg.n
        return masks

    # ----------------------------------------------------------------- access
    def get(self, ids: Sequence[str]) -> SparseBatch:
        """The stored (exact, float32) vectors of these documents, in the given order."""
        id_map = self._ids()
        ids = _check_ids(ids, None)
        seg_of, local = np.empty(len(ids), np.int64), np.empty(len(ids), np.int64)
        for i, s in enumerate(ids):
            if s not in id_map:
                raise KeyError(f"unknown id {s!r}")
            seg_of[i], local[i] = self._locate(id_map[s])
        if not len(ids):
            return SparseBatch.empty(0, self.dim, self.vocab)
        # one gather per segment, not per row (a page's hits: 10 rows one at a time cost ~10x one gather)
        segs = np.unique(seg_of)
        if len(segs) == 1:
            return self._segments[int(segs[0])].rows(local).with_vocab(self.vocab)
        picks = [np.flatnonzero(seg_of == si) for si in segs]
        batch = SparseBatch.concat([self._segments[int(si)].rows(local[p]) for si, p in zip(segs, picks)])
        where = np.empty(len(ids), np.int64)  # the batch row of each id asked for
        where[np.concatenate(picks)] = np.arange(len(ids))
        return batch[where].with_vocab(self.vocab)

    def metadata(self, ids: Sequence[str]) -> list[dict]:
        """The stored metadata dicts of these documents ({} for a document without fields), in order."""
        id_map = self._ids()
        out = []
        for s in _check_ids(ids, None):
            if s not in id_map:
                raise KeyError(f"unknown id {s!r}")
            si, local = self._locate(id_map[s])
            out.append(self._segments[si].metadata()[local])
        return out

    def has_metadata(self) -> bool:
        """Whether any row carries metadata fields (an index built without them answers every metadata
        filter with no hits: callers that take a user's filter refuse it instead)."""
        return any(seg.has_metadata() for seg in self._segments)

    def ids(self) -> list[str]:
        """Ids of the live documents, in internal (insertion) order."""
        return [s for s, _ in sorted(self._ids().items(), key=lambda kv: kv[1])]

    def __len__(self) -> int:
        return sum(seg.n - (0 if d is None else int(d.sum())) for seg, d in zip(self._segments, self._deleted))

    def stats(self) -> dict:
        """Sizes and layout: docs, deleted, segments, nnz, index bytes vs the raw CSR, dense terms, ..."""
        nnz = sum(int(seg.fwd_indptr[-1]) for seg in self._segments)
        n = self._total()
        raw = nnz * 8 + (n + 1) * 8  # int32 dims + float32 weights + int64 row pointers
        size = sum(seg.nbytes() for seg in self._segments)
        return {
            "docs": len(self), "deleted": n - len(self), "segments": len(self._segments), "dim": self.dim,
            "nnz": nnz, "index_bytes": size, "raw_csr_bytes": raw, "size_vs_raw_csr": size / raw if raw else 0.0,
            "dense_terms": [int(seg.dense.shape[0]) for seg in self._segments],
            "dense_fraction": self.dense_fraction, "approx_top_n": self.approx_top_n or None,
            "approx_mass": self.approx_mass,
            "impact_heads": all(seg.has_heads for seg in self._segments),
            "residual_lists": all(seg.stores_residual for seg in self._segments),
            "token_filter": self.token_filter.to_dict() if self.token_filter else None,
            "hub_prior": self.hub_prior,
            "path": str(self._path) if self._path else None,
        }

    def _total(self) -> int:
        return sum(seg.n for seg in self._segments)

    def _ids(self) -> dict[str, int]:
        if self._id_map is None:
            id_map, base = {}, 0
            for seg, dele in zip(self._segments, self._deleted):
                for j, s in enumerate(seg.ids):
                    if dele is None or not dele[j]:
                        id_map[s] = base + j
                base += seg.n
            self._id_map = id_map
        return self._id_map

    def _locate(self, g: int) -> tuple[int, int]:
        base = 0
        for si, seg in enumerate(self._segments):
            if g < base + seg.n:
                return si, g - base
            base += seg.n
        raise IndexError(g)

    # ----------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike, *, remap: bool = False) -> None:
        """Commit the index to a folder (see storage.py); saving again to the same folder only
        writes new segments and tombstones, then atomically swaps the manifest.

        remap: afterwards the newly written segments read their arrays memory-mapped from the saved
        files, so the memory of the built arrays is freed: ``add`` part by part, each followed by
        ``save(path, remap=True)``, builds an index larger than RAM (benchmarks/cost_curve.py: 10M docs).
        """
        info = manifest.check_info(self.info)  # before any file is written
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        same = self._path is not None and root.resolve() == self._path.resolve()
        if not same:
            # names above every one in the folder, whatever it holds (another index, one this code cannot
            # read): no file of the old state is replaced before the manifest's rename commits the new one
            seg_used, gen_used = storage.numbers_in_use(root)
            self._next_seg = max(self._next_seg, seg_used + 1)
            self._generation = max(self._generation, gen_used)
            names = [None] * len(self._segments)
            del_files = [None] * len(self._segments)
            prior_files, hub_files = [None] * len(self._segments), None
        else:
            names, del_files = list(self._seg_names), list(self._del_files)
            prior_files, hub_files = list(self._prior_files), self._hub_files
        gen = self._generation + 1
        segments = []
        for si, seg in enumerate(self._segments):
            if names[si] is None:
                names[si] = f"seg-{self._next_seg:06d}"
                self._next_seg += 1
                texts = {manifest.META_FILE: _metadata.dumps(seg.metadata())} if seg.has_metadata() else None
                files = storage.write_segment(root, names[si], {a: seg.arrays[a] for a in ARRAYS if a in seg.arrays},
                                              texts)
                seg.files = {f"{names[si]}/{rel}": FileEntry(f"{names[si]}/{rel}", meta["bytes"], meta["crc32"])
                             for rel, meta in files.items()}
                if remap:  # the files were just written from these arrays: no checks needed
                    seg.arrays = {a: storage.load_array(root / names[si] / f"{a}.npy", mmap=True) for a in ARRAYS
                                  if a in seg.arrays}
                    # views of the in-memory arrays would keep them alive: a remap is there to free them
                    seg._kernel_arrays = seg._id_views = seg._fwd_views = None
                    if texts:  # the rows' dicts too: read back from the file on first use
                        seg._meta, seg._meta_index = None, None
                        seg.meta_file = root / names[si] / manifest.META_FILE
            if self._deleted[si] is not None and del_files[si] is None:
                rel = f"{names[si]}.del-{gen:06d}.npy"
                written = storage.write_array(root / rel, self._deleted[si])
                del_files[si] = FileEntry(rel, written["bytes"], written["crc32"])
            if self._priors[si] is not None and prior_files[si] is None:
                rel = f"{names[si]}.prior-{gen:06d}.npy"
                written = storage.write_array(root / rel, self._priors[si])
                prior_files[si] = FileEntry(rel, written["bytes"], written["crc32"])
            segments.append(SegmentEntry(names[si], seg.n, seg.approx_top_n, seg.files, del_files[si],
                                         prior_files[si] if self._hub is not None else None))
        hub = None
        if self._hub is not None:
            if hub_files is None:
                bank = self._hub["bank"]
                hub_files = {}
                for a in BANK_ARRAYS:
                    rel = f"hub-{gen:06d}.{a}.npy"
                    written = storage.write_array(root / rel, getattr(bank, a))
                    hub_files[a] = FileEntry(rel, written["bytes"], written["crc32"])
            hub = HubPrior(self._hub["k"], self._hub["weight"], hub_files, self._hub["ordered"])
        vocab = self._vocab_file if same else None  # the index's vocabulary never changes: kept in place
        if self.vocab is not None and vocab is None:
            rel = storage.vocab_file(gen)  # a new name: the committed one stays until the manifest swaps
            written = storage.write_text(root / rel, "\n".join(self.vocab.tokens) + "\n")
            vocab = FileEntry(rel, written["bytes"], written["crc32"])
        body = Manifest(
            dim=self.dim, n=self._total(), dense_fraction=self.dense_fraction, top_n=self.approx_top_n,
            generation=gen, next_segment=self._next_seg, segments=tuple(segments), vocab=vocab,
            vocab_name=self.vocab.name if self.vocab is not None else None,
            token_filter=self.token_filter.to_dict() if self.token_filter else None, hub_prior=hub,
            info=info, approx_mass=self.approx_mass)
        storage.write_manifest(root, body.to_dict())
        keep = {s.name for s in segments} | {s.tombstones.file for s in segments if s.tombstones} | {
            s.prior.file for s in segments if s.prior} | ({vocab.file} if vocab else set())
        storage.remove_unreferenced(root, keep)
        for p in root.glob("hub-*.npy"):  # an earlier bank (set_hub_prior again, or cleared)
            if hub is None or p.name not in {e.file for e in hub.bank.values()}:
                p.unlink(missing_ok=True)
        self._path, self._seg_names, self._del_files, self._generation = root, names, del_files, gen
        self._prior_files, self._hub_files, self._vocab_file = prior_files, hub_files, vocab
        self._changed()  # remap: the segments read other arrays

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, verify: bool = True) -> "InvertedIndex":
        """Open a saved index; arrays are memory-mapped when ``mmap``.

        Both modes check the manifest's schema (manifest.py), every file's size, every array's dtype
        and shape, every value the kernels index by (segment.check), tombstones (0 or 1), code steps
        (non-zero where a term is used) and that ids are unique. verify=True also checks the crc32 of
        every file (reads the whole index once); verify=False skips that, so a changed weight, code or
        metadata byte that stays in range goes unnoticed (docs/usage.md lists what each mode checks).
        Raises IndexCorruptError for a damaged index, FileNotFoundError when there is none.
        """
        root = Path(path)
        man = manifest.read(root)
        storage.sweep_temporary(root)  # what a killed save left behind (never the files the manifest names)
        storage.check_files(root, man.files(), verify)
        vocab = None
        if man.vocab is not None:
            vocab_file = root / man.vocab.file
            tokens = storage.read_lines(vocab_file)
            try:
                vocab = Vocabulary(tokens, name=man.vocab_name)
            except ValueError as e:  # e.g. a flipped byte made two tokens equal
                raise IndexCorruptError(f"{vocab_file}: {e}") from None
            if len(vocab) != man.dim:
                raise IndexCorruptError(f"{vocab_file}: {len(vocab)} tokens for dim {man.dim}")
        index = cls(man.dim, vocab, dense_fraction=man.dense_fraction, approx_top_n=man.top_n or None,
                    approx_mass=man.approx_mass)
        index.token_filter = TokenFilter.from_dict(index.dim, man.token_filter)
        index.info = dict(man.info or {})
        if man.hub_prior is not None:
            index._hub = {"bank": _load_bank(root, man.hub_prior.bank, man.dim), "k": man.hub_prior.k,
                          "weight": man.hub_prior.weight, "ordered": man.hub_prior.ordered}
            index._hub_files = man.hub_prior.bank
        index._vocab_file = man.vocab
        for s in man.segments:
            arrays = {a: storage.load_array(root / f"{s.name}/{a}.npy", mmap) for a in ARRAYS + HEADS
                      if f"{s.name}/{a}.npy" in s.files}
            seg = Segment(s.n, index.dim, s.top_n, arrays)
            _check_segment(seg, root / s.name)
            seg.check(root / s.name)  # the values the kernels index by (bounds, order), unique ids: O(size)
            seg.arrays = with_bands(arrays, s.n)  # an older version's segment: bands from its checked lists
            seg.files = s.files
            if s.metadata is not None:
                seg.meta_file = root / s.metadata.file  # parsed on first use (metadata.loads checks it)
            index._segments.append(seg)
            index.impact_heads = index.impact_heads and seg.has_heads  # later adds follow the built ones
            index.residual_lists = index.residual_lists and seg.stores_residual
            dele = None
            if s.tombstones:
                tomb = root / s.tombstones.file
                dele = storage.load_array(tomb, mmap=False)
                if dele.shape != (seg.n,) or dele.dtype != np.uint8:
                    raise IndexCorruptError(f"{tomb}: bad tombstone array")
                if int(dele.max(initial=0)) > 1:  # 2 would count as deleted in one place, live in another
                    raise IndexCorruptError(f"{tomb}: tombstone values must be 0 or 1")
            index._deleted.append(dele)
            index._live.append(None)
            index._seg_names.append(s.name)
            index._del_files.append(s.tombstones)
            index._priors.append(None if s.prior is None else _load_prior(root / s.prior.file, s.n))
            index._prior_files.append(s.prior)
        index._check_live_ids(root)
        index._path, index._next_seg, index._generation = root, man.next_segment, man.generation
        return index

    def _check_live_ids(self, root: Path) -> None:
        """Each segment's ids are unique (segment.check); across segments only live ids must be (an id
        deleted in one segment may be added again in a later one)."""
        if len(self._segments) < 2:
            return
        hashes = np.concatenate([seg.id_hashes() if d is None else seg.id_hashes()[d == 0]
                                 for seg, d in zip(self._segments, self._deleted)])
        ordered = np.sort(hashes)  # the common case, no equal hashes, costs one sort
        if not bool(np.any(ordered[1:] == ordered[:-1])):
            return
        lives = [np.nonzero(np.ones(seg.n, bool) if d is None else d == 0)[0] for seg, d in zip(self._segments, self._deleted)]
        seg_of = np.concatenate([np.full(len(live), si) for si, live in enumerate(lives)])
        local = np.concatenate(lives)
        dup = duplicate(hashes, lambda r: self._segments[seg_of[r]].id_of(int(local[r])))
        if dup is not None:
            raise IndexCorruptError(f"{root}: id {dup!r} is live in two segments (a tombstone lost?)")


    def __repr__(self) -> str:
        return f"InvertedIndex(docs={len(self)}, dim={self.dim}, segments={len(self._segments)})"


def _run(kt, opt, queries, out_docs, out_scores, out_count, threads: int, dim: int) -> None:
    """kernels.search_batch over every row of ``queries`` (kt, opt: a plan's kernel arrays and options),
    split over ``threads`` threads (the kernels release the GIL)."""
    rows = np.arange(len(queries), dtype=np.int64)
    if threads == 1 or len(rows) < 2:
        _rows(kt, opt, queries, rows, out_docs, out_scores, out_count, dim)
        return
    parts = [p for p in np.array_split(rows, min(threads, len(rows))) if len(p)]
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        list(pool.map(lambda p: _rows(kt, opt, queries, p, out_docs, out_scores, out_count, dim), parts))


def _rows(kt, opt, queries, rows, out_docs, out_scores, out_count, dim: int) -> None:
    kernels = road.kernels()
    try:
        kernels.search_batch(kt, opt, queries.indptr, queries.indices, queries.values, rows, out_docs, out_scores,
                             out_count, dim)
    except BaseException:  # the buffers may be left dirty: the next search gets fresh ones
        kernels.drop_scratch()
        raise


def _check_weight(weight, name: str) -> float:
    if not (isinstance(weight, (int, float, np.floating)) and not isinstance(weight, bool)
            and 0 <= weight < float("inf")):
        raise ValueError(f"{name} must be a finite number >= 0, got {weight!r}")
    return float(weight)


def _check_prior(prior, n: int) -> np.ndarray:
    prior = np.asarray(prior, np.float32)
    if prior.shape != (n,) or not bool(np.all(np.isfinite(prior))) or (n and prior.min() < 0):
        raise ValueError(f"prior must hold {n} finite values >= 0 (one per document)")
    return prior


def _load_prior(path: Path, n: int) -> np.ndarray:
    """A segment's r_D: float32[n], finite, >= 0 (a negative one would break the kernels' bounds)."""
    prior = storage.load_array(path, mmap=False)
    if prior.dtype != np.float32 or prior.shape != (n,):
        raise IndexCorruptError(f"{path}: dtype {prior.dtype} shape {prior.shape}, expected float32 ({n},)")
    if not bool(np.all(np.isfinite(prior))) or (n and float(prior.min()) < 0):
        raise IndexCorruptError(f"{path}: prior values must be finite and >= 0")
    return prior


def _load_bank(root: Path, files: dict[str, FileEntry], dim: int) -> SparseBatch:
    arrays = {a: storage.load_array(root / e.file, mmap=False) for a, e in files.items()}
    try:
        bank = SparseBatch(arrays["indptr"], arrays["indices"], arrays["values"], dim)
    except ValueError as e:
        raise IndexCorruptError(f"{root / files['indptr'].file}: the hub bank is damaged ({e})") from None
    if road.check_rows(bank.indptr, bank.indices, bank.values) >= 0 or len(bank) == 0:
        raise IndexCorruptError(f"{root / files['values'].file}: the hub bank is damaged (bad or no rows)")
    return bank


def _check_ids(ids, n: int | None) -> list[str]:
    if isinstance(ids, str):
        raise TypeError("ids must be a sequence of strings, not one string")
    ids = list(ids)
    if set(map(type, ids)) - {str}:  # one C-level pass for the common case: all plain str (~5 ms at 100K)
        for s in ids:
            if not isinstance(s, str):
                raise TypeError(f"ids must be strings, got {type(s).__name__} ({s!r})")
    if n is not None:
        if len(ids) != n:
            raise ValueError(f"got {len(ids)} ids for {n} documents")
        if len(set(ids)) != len(ids):
            seen, dup = set(), None
            for s in ids:
                if s in seen:
                    dup = s
                    break
                seen.add(s)
            raise ValueError(f"duplicate id {dup!r} (ids must be unique)")
    return ids


_DTYPES = {  # fwd_indices: segment.fwd_index_dtype(dim)
    "fwd_indptr": np.int64, "fwd_values": np.float32, "df": np.int32,
    "wmax": np.float32, "scale": np.float32, "dense_slot": np.int32, "dense": np.uint8, "bmax": np.uint8,
    "main_ptr": np.int64, "main_docs": np.uint16, "main_codes": np.uint8, "res_ptr": np.int64,
    "res_docs": np.uint16, "res_codes": np.uint8, "band_ptr": np.int64, "band_docs": np.uint16,
    "band_codes": np.uint8, "head_ptr": np.int64, "head_docs": np.uint16, "head_codes": np.uint8,
    "ids_ptr": np.int64, "ids_blob": np.uint8,
}


def _check_segment(seg: Segment, where: Path) -> None:
    """Cheap structural checks, so even verify=False never hands the kernels inconsistent arrays."""
    a, n, dim = seg.arrays, seg.n, seg.dim
    nd = a["dense"].shape[0] if a["dense"].ndim == 2 else -1
    cells = dim * n_chunks(n) + 1
    expect = {
        "fwd_indptr": (n + 1,), "df": (dim,), "wmax": (dim,), "scale": (dim,), "dense_slot": (dim,),
        "dense": (nd, n), "bmax": (nd, (n + BLOCK - 1) // BLOCK), "main_ptr": (cells,),
        "res_ptr": (cells,), "ids_ptr": (n + 1,),
        # every band's (or older nested head level's) cells, or one pointer: built without heads (segment.no_heads)
        **{ptr: (1,) if ptr in a and len(a[ptr]) == 1 else (len(HEAD_CODES) * (cells - 1) + 1,)
           for ptr in ("band_ptr", "head_ptr")},
        "fwd_indices": (int(a["fwd_indptr"][-1]) if len(a["fwd_indptr"]) else -1,),
        "fwd_values": a["fwd_indices"].shape, "main_docs": (int(a["main_ptr"][-1]),),
        "main_codes": a["main_docs"].shape, "ids_blob": (int(a["ids_ptr"][-1]),),
    }
    if "res_ptr" in a:  # absent in a segment built with residual_lists=False (the manifest has checked: all three)
        expect.update(res_docs=(int(a["res_ptr"][-1]),), res_codes=a["res_docs"].shape)
    for ptr, docs, codes in (BANDS, HEADS):  # one of the two (segment.with_bands), or neither before version 4
        if ptr in a:
            expect.update({docs: (int(a[ptr][-1]),), codes: a[docs].shape})
    for name, dt in dict(_DTYPES, fwd_indices=fwd_index_dtype(dim)).items():
        if (name in BANDS or name in HEADS or name in RESIDUAL) and name not in a:
            continue
        if a[name].dtype != dt or a[name].shape != expect[name]:
            raise IndexCorruptError(f"{where}/{name}.npy: dtype {a[name].dtype} shape {a[name].shape}, "
                                    f"expected {np.dtype(dt)} {expect[name]}")
