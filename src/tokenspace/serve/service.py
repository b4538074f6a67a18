"""SearchService: everything the HTTP API does, as plain Python (no FastAPI here).

Route handlers only translate HTTP to calls of this class and its errors to status codes, so the
behaviour (validation, steering, filters, explanations, heatmaps) is testable and reusable without a
server. Results are plain dicts shaped like the response schemas in ``schemas.py``.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

import numpy as np

from tokenspace.data.images import ImageLoadError, load_image
from tokenspace.explain.heatmap import has_cell_scores, heatmap_png
from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.explain.search import explained_search, search_options
from tokenspace.explain.steer import steer
from tokenspace.index import InvertedIndex
from tokenspace.index.hybrid import hybrid_search
from tokenspace.pipeline import read_collection_meta
from tokenspace.sparse import SparseBatch


class ServiceError(Exception):
    """A request the service refuses; ``status`` is the HTTP status code that says why."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFound(ServiceError):
    status = 404


def open_index(index_dir):
    """The embedded InvertedIndex saved in ``index_dir`` (by `tokenspace index build` or the demo)."""
    return InvertedIndex.load(index_dir)


def _jsonable(value):
    """Index stats as JSON: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


class SearchService:
    """A model (to encode queries), an index (to search) and the collection's metadata (to show hits)."""

    def __init__(self, model, index, items: Mapping[str, Mapping] | None = None, base_dir=None,
                 model_name: str | None = None, cache_size: int = 1024, dense_model=None, dense_index=None,
                 ranking: Ranking | None = None):
        """``dense_model`` / ``dense_index``: a dense model and a DenseIndex of the same images, for
        hybrid search (``fusion``); without them a request that asks for fusion is refused. ``ranking``:
        the default ranking of a search (explain/ranking.py; a request may change each field)."""
        if not getattr(model, "sparse", True):
            raise TypeError(f"{model.family} models produce dense vectors: the token API needs a sparse model")
        self.model = model
        self.index = index
        self.vocab = model.vocab
        self.items = dict(items or {})
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.model_name = model_name or getattr(getattr(model, "config", None), "name", None) or "model"
        # one model call at a time: the CPU is the bottleneck, and torch's own threads already use every
        # core, so concurrent calls would only thrash (the index itself is read-only and lock-free)
        self._model_lock = threading.Lock()
        self.ranking = ranking or Ranking()
        if self.ranking.prior_weight is not None:  # a prior weight needs an index with a hub prior
            self.index.prior_weight(self.ranking.prior_weight)
        self._cache: OrderedDict[tuple, SparseBatch] = OrderedDict()  # repeated queries skip the model
        self._cache_size = cache_size
        self._nnz: int | None = None
        if (dense_model is None) != (dense_index is None):
            raise ValueError("hybrid search needs both a dense model and a dense index")
        if dense_index is not None and len(dense_index) != len(index):
            raise ValueError(f"the dense index holds {len(dense_index)} images and the index {len(index)}: "
                             "index the same collection with both models")
        self.dense_model, self.dense_index = dense_model, dense_index

    @classmethod
    def from_dir(cls, model, index_dir, **kwargs) -> SearchService:
        """Load the index and the collection metadata (``collection.json``) from an index folder
        (``kwargs``: the constructor's other options)."""
        meta = read_collection_meta(index_dir)
        kwargs.setdefault("ranking", Ranking.from_dict(meta.get("ranking")))
        return cls(model, open_index(index_dir), meta.get("items", {}), base_dir=index_dir, **kwargs)

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, ranking: Ranking | None = None) -> SparseBatch:
        """The query vector of a text (one row) shaped by ``ranking`` (default: the service's), cached
        by text and shaping."""
        text = text.strip()
        if not text:
            raise ServiceError("the query text is empty")
        ranking = ranking or self.ranking
        key = (text, ranking.expansion, ranking.expansion_floor)
        with self._model_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            try:
                q = encode_queries(self.model, [text], ranking).with_vocab(self.vocab)
            except ValueError as e:  # shaping a model whose dims are not its tokens
                raise ServiceError(f"expansion: {e}") from None
            self._cache[key] = q
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return q

    def encode_image(self, image) -> SparseBatch:
        with self._model_lock:
            return self.model.encode_image([image]).with_vocab(self.vocab)

    def steer(self, query: SparseBatch, weights: Mapping[str, float] | None) -> SparseBatch:
        try:
            return steer(query, weights or {}, self.vocab)
        except ValueError as e:
            raise ServiceError(f"steer: {e}") from None

    # ------------------------------------------------------------------ search
    def search_text(self, text: str, k: int = 10, must: Sequence[str] = (), must_not: Sequence[str] = (),
                    where: str | None = None, steer: Mapping[str, float] | None = None,
                    filter: Mapping | None = None, fusion: str | None = None, weight: float = 0.5,
                    **ranking) -> dict:
        """Images for a text query, each hit explained token by token (contributions sum to its score,
        less its hub penalty). ``filter``: a metadata filter (index/metadata.py), applied by the index
        before top-k. ``ranking``: fields of explain/ranking.py's Ranking that change the service's."""
        t0 = time.perf_counter()
        try:
            options = search_options(self.index, self.vocab, must=must, must_not=must_not, where=where, meta=filter)
            chosen = self.ranking.with_(**ranking)
            if chosen.prior_weight is not None:
                self.index.prior_weight(chosen.prior_weight)
        except (TypeError, ValueError) as e:
            raise ServiceError(str(e)) from None
        query = self.steer(self.encode_text(text, chosen), steer)
        if fusion is not None:  # hybrid search (index/hybrid.py): the scores are the fused ones
            return self._search(query, k, options, t0, self._hybrid_hits(text, query, k, options, fusion, weight))
        return self._search(query, k, {**options, "idf": chosen.idf, **chosen.index_options()}, t0)

    def _hybrid_hits(self, text: str, query: SparseBatch, k: int, options: dict, fusion: str, weight: float):
        if self.dense_index is None:
            raise ServiceError("fusion: this server has no dense index (start it with `tokenspace serve --dense-index DIR`)")
        if options:
            raise ServiceError(f"fusion: {', '.join(options)} filter on the sparse index's tokens or metadata, which the "
                               "dense index lacks; search without them, or without fusion")
        with self._model_lock:
            dense_query = self.dense_model.encode_text([text.strip()])
        try:
            return hybrid_search(self.index, query, self.dense_index, dense_query, k, fusion=fusion, weight=weight)[0]
        except ValueError as e:
            raise ServiceError(f"fusion: {e}") from None

    def search_image(self, image, k: int = 10) -> dict:
        """Images similar to an uploaded image, explained by the tokens both images share."""
        t0 = time.perf_counter()
        return self._search(self.encode_image(image), k, {}, t0)

    def _search(self, query: SparseBatch, k: int, options: dict, t0: float, hits=None) -> dict:
        # (a hybrid search brings its fused hits)
        found = explained_search(self.index, query, k, hits=hits, vocab=self.vocab, **options)
        shown = self.index.weigh(query, options["idf"]) if options.get("idf") else query  # as scored
        return {
            "query": [{"token": t, "weight": w} for t, w in self.vocab.decode(shown, top_k=None)[0]],
            "hits": [self._hit(h.id, h.score, h.parts, h.penalty) for h in found],
            "took_ms": (time.perf_counter() - t0) * 1000.0,
        }

    def _hit(self, doc_id: str, score: float, parts, penalty: float = 0.0) -> dict:
        item = self.items.get(doc_id, {})
        return {
            "id": doc_id,
            "score": float(score),
            "image_url": f"/image/{quote(doc_id, safe='')}" if doc_id in self.items else None,
            "text": item.get("text"),
            "label": item.get("label"),
            "tokens": [c.to_dict() for c in parts],
            "hub_penalty": float(penalty),
        }

    # ------------------------------------------------------------------ items
    def item(self, doc_id: str) -> Mapping:
        """The collection entry of an indexed id; NotFound for anything else."""
        item = self.items.get(doc_id)
        if item is None:
            raise NotFound(f"no indexed image has id {doc_id!r}")
        return item

    def image_path(self, doc_id: str) -> Path:
        """The file of an indexed image. Only ids in the collection resolve, and the path comes from the
        collection's own metadata, never from the request: no request can name a file."""
        image = self.item(doc_id).get("image")
        if not image:
            raise NotFound(f"id {doc_id!r} has no image file")
        path = Path(image)
        if not path.is_absolute() and self.base_dir is not None and (self.base_dir / path).exists():
            path = self.base_dir / path
        if not path.is_file():
            raise NotFound(f"the image file of {doc_id!r} is missing")
        return path

    def explain(self, doc_id: str, top_k: int = 20) -> dict:
        """The top tokens of an indexed image (what the model sees in it)."""
        item = self.item(doc_id)
        try:
            row = self.index.get([doc_id]).with_vocab(self.vocab)
        except (KeyError, IndexError, ValueError):
            raise NotFound(f"id {doc_id!r} is not in the index") from None
        idx, _ = row.row(0)
        return {"id": doc_id, "text": item.get("text"), "label": item.get("label"), "nnz": len(idx),
                "tokens": [{"token": t, "weight": w} for t, w in self.vocab.decode(row, top_k=top_k)[0]]}

    def heatmap(self, doc_id: str, text: str, steer: Mapping[str, float] | None = None, size: int = 256) -> bytes:
        """PNG: where the query's tokens fire on the indexed image (STAIR models)."""
        if not has_cell_scores(self.model):
            raise ServiceError(f"{self.model.family} models have no per-cell token scores: heatmaps need STAIR")
        path = self.image_path(doc_id)
        query = self.steer(self.encode_text(text), steer)
        try:
            image = load_image(path)
        except ImageLoadError as e:
            raise NotFound(f"the image of {doc_id!r} cannot be read: {e.reason}") from None
        with self._model_lock:
            return heatmap_png(self.model, image, query, size=size)

    # ------------------------------------------------------------------ stats
    def nnz(self) -> int:
        """Stored (doc, token) weights: from the index's stats, else counted once over the collection."""
        if self._nnz is None:
            stats = self.index.stats()
            n = stats.get("nnz")
            if n is None and self.items:
                ids = [i for i in self.items]
                n = sum(self.index.get(ids[s : s + 4096]).nnz for s in range(0, len(ids), 4096))
            self._nnz = int(n or 0)
        return self._nnz

    def stats(self) -> dict:
        return {
            "model": self.model_name,
            "family": getattr(self.model, "family", ""),
            "vocab": self.vocab.name,
            "dim": len(self.vocab),
            "size": len(self.index),
            "nnz": self.nnz(),
            "collection": len(self.items),
            # the engine's figures, without where its folder is on the server (not the client's business)
            "index": _jsonable({k: v for k, v in self.index.stats().items() if k != "path"}),
            "dense_index": None if self.dense_index is None else _jsonable(self.dense_index.stats()),
            "ranking": self.ranking.to_dict(),
        }
