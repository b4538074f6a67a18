"""One search session over an index folder: the model, the index, the collection's metadata, the dense
half of a hybrid search and the ranking, in one object.

    from tokenspace import Searcher

    s = Searcher.open("indexes/emoji")                 # the model the index records, its ranking
    res = s.search("a red heart", k=5, filter={"source": "emoji"}, steer={"red": 2.0}, prior_weight=0)
    for h in res.hits:
        print(h.id, h.score, h.item.get("text"), [(c.token, c.contribution) for c in h.parts[:3]])

``Searcher.open`` is the one way a session starts: `tokenspace search`, `tokenspace serve` (the HTTP
service wraps the Searcher it is given), the demo and the library call it; none of them assembles a
search of its own.

The ranking is resolved here, once: the index's stored ranking (its manifest's info; a stored null
prior weight is the weight of the index's hub prior) changed by what the caller gives (flags, HTTP
fields, the page's inputs: None keeps a lever) becomes one Ranking whose every lever is a number (0:
off). The query is then encoded and shaped (expansion, floor), steered and weighed by idf (index.weigh,
the one place idf is applied), and that one vector is what the index scores, the explanation splits and
the results show; the prior's weight goes to the index's kernels as given, 0 included.

What an index folder records about its collection is read here, in one place (``Collection``); where
each file is, is index/folder.py's.
"""
from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import tokenspace
from tokenspace.explain.hits import Contribution
from tokenspace.explain.notes import has_content, query_notes
from tokenspace.explain.ranking import Ranking, encode_queries, model_folder
from tokenspace.explain.search import explained_search, search_options
from tokenspace.explain.steer import steer as steer_query
from tokenspace.index import InvertedIndex
from tokenspace.index.dense import DenseIndex  # faiss itself loads only when a dense index is opened
from tokenspace.index.folder import COLLECTION_FILE, DENSE_IDS, MANIFEST, index_model, read_collection_json
from tokenspace.index.hybrid import DEPTH, hybrid_search
from tokenspace.models.capabilities import MissingCapability, require_vectors
from tokenspace.models.fused_queries import FusedQueries, Unsupported
from tokenspace.query_table import FAMILY as TABLE_FAMILY
from tokenspace.query_table import MODELS_EXTRA, NeedsModelsExtra, TableQueries
from tokenspace.sparse import SparseBatch

log = logging.getLogger(__name__)
# why an image query is refused where the model is a text side alone (a lean install): the command line
# says it before the index loads, the session when asked
IMAGE_NEEDS_TORCH = f"searching by an image runs the model's image tower: that needs torch ({MODELS_EXTRA})"
dense_model_of = index_model  # a dense index folder names its model in its collection.json


class SearchError(ValueError):
    """A search the session refuses, in one line that starts with the option it is about
    (``steer: ...``, ``must_not: ...``, ``fusion: ...``): the CLI prefixes ``--``, the service answers 400."""


# ------------------------------------------------------------------------------------------ collection
class Collection:
    """What an index records about its collection: the model that encoded it (``model``), its default
    ranking (``ranking``) and each row's item ({image, text, label, source}) to show beside a hit. From
    the index itself (manifest info + row metadata), or from an older index's collection.json
    (``legacy``: its document; ``items`` alone when given in code)."""

    def __init__(self, index, legacy: Mapping | None = None, items: Mapping | None = None):
        self.index = index
        info = dict(getattr(index, "info", None) or {})
        self.legacy = None if info or legacy is None else dict(legacy)
        src = info if self.legacy is None else self.legacy
        self.model: str | None = src.get("model")
        # a stored null prior weight (indexes written before every lever was a number) is the weight
        # the index keeps with its hub prior (0 without one)
        stored = index.prior_weight() if hasattr(index, "prior_weight") else 0.0
        self.ranking = Ranking.from_dict(src.get("ranking"), prior_weight=stored)
        if items is None and self.legacy is not None:
            items = self.legacy.get("items") or {}
        self._items = None if items is None else dict(items)

    @classmethod
    def of(cls, index, index_dir=None, items: Mapping | None = None) -> Collection:
        """The collection of ``index`` (saved in ``index_dir``, if known): its own info and rows, else an
        older index's collection.json; ``items``: id -> {image, text, ...} given in code, shown instead of
        what the rows carry."""
        legacy = None
        if index_dir is not None and not getattr(index, "info", None) and (Path(index_dir) / COLLECTION_FILE).exists():
            legacy = read_collection_json(index_dir)
        return cls(index, legacy, items)

    def item(self, doc_id: str) -> dict | None:
        """{image, text, label, source} of an indexed id (the fields it has); None for an unknown id."""
        if self._items is not None:
            return self._items.get(doc_id)
        try:
            row = self.index.metadata([doc_id])[0]
        except (KeyError, IndexError, ValueError):
            return None
        return {k: row[f] for k, f in (("image", "image"), ("text", "caption"), ("label", "label"),
                                       ("source", "source")) if f in row}

    def has_items(self) -> bool:
        """Whether hits can be shown with anything beside their id."""
        return bool(self._items) if self._items is not None else self.index.has_metadata()

    def ids(self) -> list[str]:
        return list(self._items) if self._items is not None else (self.index.ids() if self.has_items() else [])

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else (len(self.index) if self.has_items() else 0)


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Hit:
    """A hit: its id and score, the shared tokens that make the score (``parts``, largest first; they
    sum to ``score`` + ``penalty``, empty with ``explain=False``), the hub prior's part and the item."""

    id: str
    score: float
    parts: list[Contribution] = field(default_factory=list)
    penalty: float = 0.0
    item: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class Results:
    """One search: the query's tokens as the hits were scored with them (heaviest first), the hits,
    the fusion (None: the sparse index alone) and the time it took."""

    query: list[tuple[str, float]]
    hits: list[Hit]
    fusion: str | None = None
    took_ms: float = 0.0
    notes: tuple[str, ...] = ()  # how the query text was read, when the user should know (explain/notes.py)


@dataclass(frozen=True)
class DenseHalf:
    """The dense half of a hybrid search: a DenseIndex of the same images and the dense model that
    encodes its queries. ``DenseHalf.open`` makes one."""

    model: object
    index: object

    @classmethod
    def open(cls, index, model=None, device: str = "cpu", torch_threads: int | None = None) -> DenseHalf:
        """The dense half of a DenseIndex folder (`index build` with a dense model), or of a DenseIndex
        given in code; ``model``: its dense model, a model or a folder or release name (default: the one
        the folder records). ``torch_threads``: as Searcher.open's. SearchError (``dense_index: ...`` /
        ``dense_model: ...``) for a folder without a dense index or a model that is not dense."""
        folder = index if isinstance(index, (str, Path)) else None
        if folder is not None:
            index = load_dense_index(folder)
            if model is None:
                model = dense_model_of(folder)
                if not model:
                    raise SearchError(f"dense_model: the dense index at {folder} does not name its model; give one")
        if model is None:
            raise SearchError("dense_model: a dense index given in code needs its dense model")
        ref = model if isinstance(model, (str, Path)) else None
        model = _load(model, device, torch_threads=torch_threads)
        try:
            require_vectors(model, False, f"dense_model {ref}" if ref is not None else "dense_model")
        except MissingCapability as e:
            raise SearchError(str(e)) from None
        return DenseHalf(model, index)


# ------------------------------------------------------------------------------------------ session
class Searcher:
    """A search session: a sparse model (to encode queries), an index (to search), its Collection (to
    show hits), the session's Ranking (resolved: every lever a number) and optionally a dense half
    (hybrid search). Start one with ``Searcher.open``."""

    def __init__(self, model, index, collection: Collection, ranking: Ranking, *, dense: DenseHalf | None = None,
                 base_dir=None, cache_size: int = 1024, text_only: bool = False):
        # the parts as Searcher.open checked them: the one constructor callers use is open
        self.model, self.index, self.vocab = model, index, model.vocab
        self.text_only = text_only  # opened for text queries alone: an image query is refused in words
        self.collection, self.ranking, self.dense = collection, ranking, dense
        self.base_dir = Path(base_dir) if base_dir is not None else None
        # one model call at a time: the CPU is the bottleneck, and torch's own threads already use every
        # core, so concurrent calls would only thrash (the index itself is read-only and lock-free)
        self.model_lock = threading.Lock()
        # what encodes text queries: the model, or its text side in numpy (fast_text)
        self.queries = model
        self._cache: OrderedDict[tuple, SparseBatch] = OrderedDict()  # repeated queries skip the model
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._batches = _Batches(self._encode_texts)

    @classmethod
    def open(cls, index, model=None, dense=None, ranking: Ranking | Mapping | None = None, *, device: str = "cpu",
             verify: bool = True, items: Mapping | None = None, cache_size: int = 1024,
             text_only: bool = False, torch_threads: int | None = None) -> Searcher:
        """The session over ``index``: an index folder (`tokenspace index build` / `encode`), or an
        index opened in code. ``model``: a model, or a folder or release name (default: the model the
        index records). ``dense``: the dense half of a hybrid search: a DenseHalf, or the folder of a
        dense index of the same images (its model: the one the folder records). ``ranking``: the
        session's ranking, a Ranking, or {lever: value} changing the index's stored one (None keeps a
        lever). ``items``: id -> {image, text, label, source} shown beside hits instead of what the
        index records. ``text_only``: the session answers text queries alone (`tokenspace search` with a
        query text), so a model named by folder or release name loads as its text side without torch
        where it has one (see ``_load``), torch installed or not; its image queries are refused.
        ``torch_threads``: torch's threads, set before a model loads in torch (None: torch's own; 1 for a
        process that encodes a few short texts, where a second thread gains nothing and, on a busy
        machine, waits for a core). Checked in the order a user's wait asks for: the index and the
        ranking, the dense half, then the model; SearchError (``<option>: ...``) for what it refuses."""
        base_dir = None
        if isinstance(index, (str, Path)):
            base_dir, index = index, _load_index(index, verify)
        try:
            collection = Collection.of(index, base_dir, items)
            resolved = ranking if isinstance(ranking, Ranking) else collection.ranking.with_(**dict(ranking or {}))
            _check_prior(index, resolved.prior_weight)
        except SearchError:
            raise
        except (TypeError, ValueError) as e:
            raise SearchError(str(e)) from None
        if dense is not None:
            if not isinstance(dense, DenseHalf):
                dense = DenseHalf.open(dense, device=device, torch_threads=torch_threads)
            if len(dense.index) != len(index):
                raise SearchError(f"dense_index: it holds {len(dense.index)} images and the index {len(index)}: "
                                  "index the same collection with the sparse and the dense model")
        if model is None:
            model = collection.model
            if not model:
                where = f"the index at {base_dir}" if base_dir is not None else "the index"
                raise SearchError(f"model: {where} does not name its model; give one")
        ref = model if isinstance(model, (str, Path)) else None
        model = _load(model, device, text_only, torch_threads)
        try:
            require_vectors(model, True, f"model {ref}" if ref is not None else "model",
                            "search with a sparse model (a dense one is the dense half of a hybrid search: "
                            "--dense-model with --dense-index)")
        except MissingCapability as e:
            raise SearchError(str(e)) from None
        return cls(model, index, collection, resolved, dense=dense, base_dir=base_dir, cache_size=cache_size,
                   text_only=text_only)

    # ------------------------------------------------------------------ ranking
    def resolve(self, **changes) -> Ranking:
        """The session's ranking changed by a search's levers (None keeps one): checked, every lever a
        number. SearchError naming the lever."""
        try:
            chosen = self.ranking.with_(**changes)
            _check_prior(self.index, chosen.prior_weight)
        except (TypeError, ValueError) as e:
            raise SearchError(str(e)) from None
        return chosen

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, ranking: Ranking | None = None) -> SparseBatch:
        """The model's vector of a text (one row) shaped by ``ranking``'s expansion and floor (default:
        the session's), cached by text and shaping. Texts asked for at once from several threads (a
        service under load) are encoded together, in one batch: the same rows, one model call."""
        text = text.strip()
        if not text:
            raise SearchError("the query text is empty")
        ranking = ranking or self.ranking
        key = (text, ranking.expansion, ranking.expansion_floor)
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        q = self._batches.encode(text, ranking)
        with self._cache_lock:
            self._cache[key] = q
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return q

    def fast_text(self) -> bool:
        """Encode text queries with the model's text side in numpy where it equals the model
        (models/fused_queries.py: the release model's queries for a tenth of the CPU, and batches of them
        cheaper still), checked on a few texts against the model; True when it does. Its set-up (the
        weights copied, the check: 0.1-0.4 s) pays for itself in a session that answers many queries, as
        the service does; a command that answers one does not call it. Such a session searches with the
        index's numba kernels too, loaded here (InvertedIndex.load_kernels: ~0.8 s once), where a
        one-query command on a small index searches in numpy without loading numba (index/road.py)."""
        if isinstance(self.index, InvertedIndex):  # an index opened in code may be another SparseIndex
            self.index.load_kernels()
        self.queries = text_queries(self.model)
        return self.queries is not self.model

    def _encode_texts(self, texts: list[str], ranking: Ranking) -> SparseBatch:
        """One model call for several texts, shaped by one ranking (SearchError for a shaping the model
        cannot take)."""
        with self.model_lock:
            try:
                return encode_queries(self.queries, texts, ranking).with_vocab(self.vocab)
            except ValueError as e:  # shaping a model whose dims are not its tokens
                raise SearchError(f"expansion: {e}") from None

    def encode_image(self, image) -> SparseBatch:
        """The query vector of an image (a PIL image or a ``pathlib.Path``). SearchError (``image: ...``)
        from a session whose model is a text side alone (``text_only``, or a lean install)."""
        if self.text_only:
            raise SearchError("image: this session was opened for text queries alone (text_only=True); open one "
                              "without it to search by an image")
        if not hasattr(self.model, "encode_image"):  # a numpy text side (a lean install): no image tower
            raise SearchError(f"image: {IMAGE_NEEDS_TORCH}")
        try:
            with self.model_lock:
                return self.model.encode_image([image]).with_vocab(self.vocab)
        except NeedsModelsExtra as e:  # an inference-free model's table, in a lean install
            raise SearchError(f"image: {e}") from None

    def steer(self, query: SparseBatch, weights: Mapping[str, float] | None) -> SparseBatch:
        try:
            return steer_query(query, dict(weights or {}), self.vocab)
        except ValueError as e:
            raise SearchError(f"steer: {e}") from None

    def query_vector(self, query, ranking: Ranking | None = None, steer: Mapping[str, float] | None = None) -> SparseBatch:
        """The vector the index scores for ``query`` (a text, or an image: PIL or a ``pathlib.Path``):
        encoded, shaped, steered and weighed by ``ranking``'s idf (default: the session's ranking). What
        an engine outside tokenspace is given to rank as this session does (index/qdrant.py)."""
        ranking = ranking or self.ranking
        if isinstance(query, str):
            q = self.steer(self.encode_text(query, ranking), steer)
        else:
            if steer:
                raise SearchError("steer: reweighs a text query's tokens; give a text, not an image")
            q = self.encode_image(query)
        return self.index.weigh(q, ranking.idf) if ranking.idf else q  # idf: here, and nowhere else

    # ------------------------------------------------------------------ search
    def search(self, query, k: int = 10, *, filter: Mapping | None = None, where: str | None = None,
               must: Sequence[str] = (), must_not: Sequence[str] = (), steer: Mapping[str, float] | None = None,
               idf: float | None = None, prior_weight: float | None = None, expansion: float | None = None,
               expansion_floor: float | None = None, fusion: str | None = None, weight: float = 0.5,
               explain: bool = True) -> Results:
        """The top ``k`` images for ``query`` (a text ``str``, or an image: PIL or a ``pathlib.Path``), each explained token
        by token. ``filter``: on the rows' metadata (index/metadata.py), ``where`` / ``must`` /
        ``must_not``: on their tokens, all applied by the index before top-k. ``steer``: {token: factor}
        reweighs a text query. ``idf``, ``prior_weight``, ``expansion``, ``expansion_floor``: change the
        session's ranking for this search (None keeps a lever; 0 turns it off). ``fusion`` ("rrf" or
        "weighted") fuses the dense half's ranking in (``weight``: the sparse side's share); the tokens
        then explain the sparse side's score. ``explain=False``: no contributions (the hits' ``parts`` are
        empty). SearchError (one line naming the option) for anything it refuses."""
        t0 = time.perf_counter()
        chosen = self.resolve(idf=idf, prior_weight=prior_weight, expansion=expansion, expansion_floor=expansion_floor)
        try:
            options = search_options(self.index, self.vocab, must=must, must_not=must_not, where=where, meta=filter)
        except (TypeError, ValueError) as e:
            raise SearchError(str(e)) from None
        q = self.query_vector(query, chosen, steer)
        fused = self._fused(query, q, k, options, fusion, weight, chosen) if fusion is not None else None
        if explain:
            found = explained_search(self.index, q, k, hits=fused, vocab=self.vocab,
                                     prior_weight=chosen.prior_weight, **options)
            hits = [Hit(h.id, h.score, h.parts, h.penalty, self.item(h.id) or {}) for h in found]
        else:
            if fused is None:
                fused = self.index.search(q, k=k, **_prior(self.index, chosen), **options)[0] if q.nnz else []
            hits = [Hit(h.id, float(h.score), [], 0.0, self.item(h.id) or {}) for h in fused]
        tokens = self.vocab.decode(q, top_k=None)[0]  # heaviest first
        notes = tuple(query_notes(self.model, query)) if isinstance(query, str) else ()
        if isinstance(query, str) and not has_content(self.model, query):
            hits = []  # confident hits for "the" would answer nothing the user asked (explain/notes.py)
        elif not hits and tokens and len(self.index):  # an empty page with no word of why reads as a fault
            words = ", ".join(t for t, _ in tokens[:5])
            notes += (f"no indexed image holds any of the query's tokens ({words})"
                      + (" and passes the filters" if options else "") + ": try other or broader words",)
        return Results(tokens, hits, fusion, (time.perf_counter() - t0) * 1000.0, notes)

    def _fused(self, query, q: SparseBatch, k: int, options: dict, fusion: str, weight: float, ranking: Ranking):
        if self.dense is None:
            raise SearchError("fusion: this search has no dense index (open it with a dense index of the same images)")
        if options:
            raise SearchError(f"fusion: {', '.join(options)} filter on the sparse index's tokens or metadata, which "
                              "the dense index lacks; search without them, or without fusion")
        with self.model_lock:
            dense_q = (self.dense.model.encode_text([query.strip()]) if isinstance(query, str)
                       else self.dense.model.encode_image([query]))
        try:
            return hybrid_search(self.index, q, self.dense.index, dense_q, k, fusion=fusion, weight=weight,
                                 depth=DEPTH, sparse_options=_prior(self.index, ranking))[0]
        except ValueError as e:
            raise SearchError(f"fusion: {e}") from None

    # ------------------------------------------------------------------ items
    def item(self, doc_id: str) -> dict | None:
        """The collection's entry for an indexed id ({image, text, label, source}); None when unknown."""
        return self.collection.item(doc_id)

    def image_path(self, doc_id: str) -> Path | None:
        """The file of an indexed image, from the collection's own metadata (never from a caller's path):
        relative paths resolve against the index folder first. None when the id has none."""
        image = (self.item(doc_id) or {}).get("image")
        if not image:
            return None
        path = Path(image)
        if not path.is_absolute() and self.base_dir is not None and (self.base_dir / path).exists():
            path = self.base_dir / path
        return path

    def tokens(self, doc_id: str, top_k: int | None = 20) -> tuple[int, list[tuple[str, float]]]:
        """(non-zero count, top tokens) of an indexed image's row: what the model sees in it. KeyError for
        an id the index does not hold."""
        try:
            row = self.index.get([doc_id]).with_vocab(self.vocab)
        except (KeyError, IndexError, ValueError):
            raise KeyError(doc_id) from None
        idx, _ = row.row(0)
        return len(idx), self.vocab.decode(row, top_k=top_k)[0]


class _Batches:
    """Texts asked for by several threads at once, encoded together. A thread queues its text; if no batch
    is running it leads: it takes every queued text, encodes them in one call, wakes the threads whose rows
    are ready and hands the lead to the first thread still queued (or ends the run). A text alone is
    encoded at once (no waiting for company), and a thread whose row is ready returns at once (never behind
    the next batch, and no other thread is woken for nothing). Why batches: a model call costs per call (the
    release model's text side reads its 15.6 MB of word embeddings once per call, whatever the number of
    texts), so under load a batch of 16 costs little more than one text."""

    def __init__(self, encode, max_batch: int = 64):
        self.encode_many, self.max_batch = encode, max_batch
        self._queue: list[_Slot] = []
        self._lock = threading.Lock()  # guards the queue and ``_running``
        self._running = False

    def encode(self, text: str, ranking: Ranking) -> SparseBatch:
        slot = _Slot(text, ranking)
        with self._lock:
            self._queue.append(slot)
            slot.lead = not self._running
            self._running = True
        if not slot.lead:
            slot.woken.wait()  # its row is ready, or the lead was handed to it
        while not slot.done:  # leading: a batch that holds this text (the queue is first come, first served)
            with self._lock:
                batch, self._queue[:] = self._queue[: self.max_batch], self._queue[self.max_batch:]
            try:
                self._run(batch)
            finally:
                for s in batch:
                    if s.row is None and s.error is None:  # the leader was interrupted (Ctrl-C) mid-batch
                        s.error = RuntimeError("the batch that encoded this text was interrupted")
                    s.done = True
                    if s is not slot:
                        s.woken.set()
                with self._lock:
                    if not self._queue:
                        self._running = False
                    elif slot.done:  # the next batch is another thread's to lead
                        self._queue[0].lead = True
                        self._queue[0].woken.set()
        if slot.error is not None:
            raise slot.error
        return slot.row

    def _run(self, batch: list[_Slot]) -> None:
        groups: dict[Ranking, list[_Slot]] = {}
        for slot in batch:
            groups.setdefault(slot.ranking, []).append(slot)
        for ranking, slots in groups.items():
            texts = list(dict.fromkeys(s.text for s in slots))  # each distinct text once
            try:
                rows = self.encode_many(texts, ranking)
                for s in slots:
                    s.row = rows[texts.index(s.text)]
            except Exception as e:  # noqa: BLE001 - handed to the waiting threads, raised in each
                for s in slots:
                    s.error = e
                if len(texts) > 1:  # one text's error must not fail the others: each alone
                    for s in slots:
                        try:
                            s.row, s.error = self.encode_many([s.text], ranking)[0], None
                        except Exception as alone:  # noqa: BLE001
                            s.error = alone
            finally:
                for s in slots:
                    s.done = True


class _Slot:
    """One thread's text in a batch: filled with its row or its error, then done; ``woken`` when done or
    when it is to lead the next batch."""

    __slots__ = ("text", "ranking", "row", "error", "done", "lead", "woken")

    def __init__(self, text: str, ranking: Ranking):
        self.text, self.ranking = text, ranking
        self.row: SparseBatch | None = None
        self.error: BaseException | None = None
        self.done = self.lead = False
        self.woken = threading.Event()


def text_queries(model):
    """What encodes a session's text queries: the model's text side in numpy (models/fused_queries.py; an
    inference-free model's table: query_table.py) where it reproduces this model, checked on a few texts
    against the model itself; else the model."""
    family = getattr(model, "family", None)
    if isinstance(model, (FusedQueries, TableQueries)) or family not in ("fused", "stair", TABLE_FAMILY):
        return model
    try:
        fast = TableQueries.from_model(model) if family == TABLE_FAMILY else FusedQueries.from_model(model)
    except (Unsupported, AttributeError, TypeError, KeyError):
        return model
    probe = ["a red car on the street", "the", "two dogs and a cat playing with a ball 42"]
    want, got = model.encode_text(probe), fast.encode_text(probe)
    same = (np.array_equal(want.indptr, got.indptr) and np.array_equal(want.indices, got.indices)
            and np.allclose(want.values, got.values, rtol=0, atol=1e-5))
    if not same:  # model code this copy does not know: the model itself, slower but right
        log.warning("the numpy text side of %s differs from the model's: text queries run the model",
                    getattr(getattr(model, "config", None), "name", model.family))
        return model
    return fast


def _check_prior(index, weight: float) -> None:
    """A prior weight above 0 needs an index with a hub prior (ValueError ``prior_weight: ...``)."""
    if hasattr(index, "prior_weight"):
        index.prior_weight(weight)
    elif weight:
        raise ValueError(f"prior_weight: a {type(index).__name__} has no hub prior")


def _prior(index, ranking: Ranking) -> dict:
    """The prior's keyword for the index's search, 0 included (an engine without hub priors takes none)."""
    return ranking.index_options() if hasattr(index, "prior_weight") else {}


def _load(model, device: str, text_only: bool = False, torch_threads: int | None = None):
    """A model object as given; a folder or release name loaded (on ``device``). The one place that
    decides whether torch loads: not for a session of text queries alone (``text_only``), nor in a lean
    install (no torch), where the model's text side without a network (a fused or STAIR model's in
    numpy, equal to the model's to 1e-5: tests/models/test_fused_queries.py; an inference-free model's
    stored table) answers them; importing torch alone costs a one-query process 2-3 s. Else the model
    itself, torch and all, on ``torch_threads`` threads when given."""
    if not isinstance(model, (str, Path)):
        return model
    lean = importlib.util.find_spec("torch") is None
    if text_only or lean:
        folder = model_folder(model) or Path(model)
        try:
            return FusedQueries.from_folder(folder)  # a fused or STAIR model's text side, in numpy
        except (Unsupported, OSError):
            pass
        try:
            return TableQueries(folder)  # an inference-free model's stored table
        except (NeedsModelsExtra, OSError) as e:
            if lean:
                raise SearchError(f"model: {e}") from None
        # with torch: a model whose queries need its network (a dense model, a config name) loads below
    if torch_threads is not None:
        import torch  # third-party, here: the model's load below imports it anyway; set before the load

        torch.set_num_threads(torch_threads)
    loaded = tokenspace.load(model)  # torch loads here (absent from a lean install)
    return loaded.to(device) if device != "cpu" else loaded


def _load_index(path, verify: bool) -> InvertedIndex:
    """The InvertedIndex saved at ``path``; SearchError (``index: no index at ...``) when there is none."""
    p = Path(path)
    if not (p / MANIFEST).exists():
        what = "the folder holds no index" if p.is_dir() else "a file, not a folder" if p.exists() else "no such folder"
        raise SearchError(f"index: no index at {path} ({what}; build one with `tokenspace index build`)")
    return InvertedIndex.load(p, verify=verify)


def load_dense_index(path):
    """The DenseIndex saved at ``path`` (by `tokenspace index build --model DENSE_MODEL`); SearchError when
    the folder holds none."""
    p = Path(path)
    if not (p / DENSE_IDS).exists():
        what = "no dense index in the folder" if p.is_dir() else "a file, not a folder" if p.exists() else "no such folder"
        raise SearchError(f"dense_index: no dense index at {path} ({what}; build one with `tokenspace index build "
                          "--model DENSE_MODEL`)")
    try:
        return DenseIndex.load(p)
    except (ImportError, ValueError, RuntimeError) as e:
        raise SearchError(f"dense_index {path}: {' '.join(str(e).split())}") from None


__all__ = ["COLLECTION_FILE", "Collection", "DenseHalf", "Hit", "Results", "SearchError", "Searcher",
           "read_collection_json"]
