"""SearchService: everything the HTTP API does, as plain Python (no FastAPI here).

Route handlers only translate HTTP to calls of this class and its errors to status codes, so the
behaviour (validation, steering, filters, explanations, heatmaps) is testable and reusable without a
server. Results are plain dicts shaped like the response schemas in ``schemas.py``.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

import numpy as np

from tokenspace.data.images import ImageLoadError, load_image
from tokenspace.explain.heatmap import has_cell_scores, heatmap_png
from tokenspace.explain.ranking import Ranking
from tokenspace.query_table import FAMILY as TABLE_FAMILY  # a text query is a look-up in a stored table
from tokenspace.searcher import Results, Searcher, SearchError
from tokenspace.sparse import SparseBatch

# a text search of a table model runs on the event loop (app.py) while the recent searches' mean CPU stays
# at most this (seconds): Python's switch interval (sys.getswitchinterval()), for which a thread's search
# holds the interpreter lock, and so the loop, anyway; searches of a larger index (tens of ms each) go
# back to the thread pool
INLINE_CPU_S = 0.005
_MEAN_WEIGHT = 0.05  # each search's share in the running mean of their CPU


class ServiceError(Exception):
    """A request the service refuses; ``status`` is the HTTP status code that says why."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFound(ServiceError):
    status = 404


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


@functools.lru_cache(maxsize=65536)
def image_url(doc_id: str) -> str:
    """The URL of an indexed image, kept: quoting each hit's id was half the cost of building the hits' dicts."""
    return f"/image/{quote(doc_id, safe='')}"


class SearchService:
    """The HTTP API's calls over one search session (searcher.py: the model, the index, the collection's
    metadata, the dense half); this class only shapes requests and responses and names errors."""

    def __init__(self, searcher: Searcher, model_name: str | None = None):
        """The service over ``searcher`` (``Searcher.open``: the model, the index, the collection, the
        dense half, the default ranking; a request may change each lever of it). A searcher without a
        dense half refuses a request that asks for fusion."""
        if not isinstance(searcher, Searcher):
            raise TypeError(f"SearchService wraps a Searcher (Searcher.open), got {type(searcher).__name__}")
        self.searcher = searcher
        searcher.fast_text()  # a service answers many queries: the numpy text side, where it equals the model
        model = searcher.model
        self.model_name = model_name or getattr(getattr(model, "config", None), "name", None) or "model"
        self._nnz: int | None = None
        # text queries by a table look-up (an inference-free model): nothing of a search waits outside the
        # interpreter, so a thread only adds its hand-offs, and a look-up is no cheaper in batches
        self._table_text = getattr(searcher.queries, "family", None) == TABLE_FAMILY
        self._search_cpu = 0.0  # running mean of a text search's CPU seconds (thread time)

    @property
    def model(self):
        return self.searcher.model

    @property
    def index(self):
        return self.searcher.index

    @property
    def vocab(self):
        return self.searcher.vocab

    @property
    def ranking(self) -> Ranking:
        return self.searcher.ranking

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, ranking: Ranking | None = None) -> SparseBatch:
        """The query vector of a text (one row) shaped by ``ranking`` (default: the service's), cached."""
        try:
            return self.searcher.encode_text(text, ranking)
        except SearchError as e:
            raise ServiceError(str(e)) from None

    # ------------------------------------------------------------------ search
    def search_text(self, text: str, k: int = 10, must: Sequence[str] = (), must_not: Sequence[str] = (),
                    where: str | None = None, steer: Mapping[str, float] | None = None,
                    filter: Mapping | None = None, fusion: str | None = None, weight: float = 0.5,
                    **ranking) -> dict:
        """Images for a text query, each hit explained token by token (contributions sum to its score,
        less its hub penalty). ``filter``: a metadata filter (index/metadata.py), applied by the index
        before top-k. ``ranking``: fields of explain/ranking.py's Ranking that change the service's."""
        if fusion is not None and self.searcher.dense is None:
            raise ServiceError("fusion: this server has no dense index (start it with `tokenspace serve --dense-index DIR`)")
        t = time.thread_time()
        try:
            return self._response(lambda: self.searcher.search(text, k, must=must, must_not=must_not, where=where,
                                                               steer=steer, filter=filter, fusion=fusion,
                                                               weight=weight, **ranking))
        finally:
            if fusion is None:  # a fused search also runs the dense model: not what the mean is for
                self._search_cpu += _MEAN_WEIGHT * (time.thread_time() - t - self._search_cpu)

    def quick_text(self, fusion: str | None = None) -> bool:
        """Whether a text search (``fusion`` as in search_text) is known to be short: the session's text
        queries are table look-ups, the search has no dense half to encode with, and the recent text
        searches took at most INLINE_CPU_S of CPU on average. The HTTP layer then runs it on the event
        loop instead of the thread pool (serve/app.py: SearchRoute)."""
        return self._table_text and fusion is None and self._search_cpu <= INLINE_CPU_S

    def search_image(self, image, k: int = 10) -> dict:
        """Images similar to an uploaded image, explained by the tokens both images share."""
        return self._response(lambda: self.searcher.search(image, k))

    def _response(self, search) -> dict:
        try:
            res: Results = search()
        except SearchError as e:
            raise ServiceError(str(e)) from None
        return {"query": [{"token": t, "weight": w} for t, w in res.query],
                "hits": [self._hit(h) for h in res.hits], "took_ms": res.took_ms, "notes": list(res.notes)}

    def _hit(self, h) -> dict:
        return {
            "id": h.id,
            "score": float(h.score),
            "image_url": image_url(h.id) if h.item.get("image") else None,
            "text": h.item.get("text"),
            "label": h.item.get("label"),
            "tokens": [c.to_dict() for c in h.parts],
            "hub_penalty": float(h.penalty),
        }

    # ------------------------------------------------------------------ items
    def item(self, doc_id: str) -> Mapping:
        """The collection entry of an indexed id; NotFound for anything else."""
        item = self.searcher.item(doc_id)
        if item is None:
            raise NotFound(f"no indexed image has id {doc_id!r}")
        return item

    def image_path(self, doc_id: str) -> Path:
        """The file of an indexed image. Only ids in the collection resolve, and the path comes from the
        collection's own metadata, never from the request: no request can name a file."""
        self.item(doc_id)
        path = self.searcher.image_path(doc_id)
        if path is None:
            raise NotFound(f"id {doc_id!r} has no image file")
        if not path.is_file():
            raise NotFound(f"the image file of {doc_id!r} is missing")
        return path

    def explain(self, doc_id: str, top_k: int = 20) -> dict:
        """The top tokens of an indexed image (what the model sees in it)."""
        item = self.item(doc_id)
        try:
            nnz, tokens = self.searcher.tokens(doc_id, top_k)
        except KeyError:
            raise NotFound(f"id {doc_id!r} is not in the index") from None
        return {"id": doc_id, "text": item.get("text"), "label": item.get("label"), "nnz": nnz,
                "tokens": [{"token": t, "weight": w} for t, w in tokens]}

    def heatmap(self, doc_id: str, text: str, steer: Mapping[str, float] | None = None, size: int = 256) -> bytes:
        """PNG: where the query's tokens fire on the indexed image (STAIR models)."""
        if not has_cell_scores(self.model):
            raise ServiceError(f"{self.model.family} models have no per-cell token scores: heatmaps need STAIR")
        path = self.image_path(doc_id)
        try:
            query = self.searcher.steer(self.searcher.encode_text(text), steer)
        except SearchError as e:
            raise ServiceError(str(e)) from None
        try:
            image = load_image(path)
        except ImageLoadError as e:
            raise NotFound(f"the image of {doc_id!r} cannot be read: {e.reason}") from None
        with self.searcher.model_lock:
            return heatmap_png(self.model, image, query, size=size)

    # ------------------------------------------------------------------ stats
    def nnz(self) -> int:
        """Stored (doc, token) weights: from the index's stats, else counted once over the collection."""
        if self._nnz is None:
            n = self.index.stats().get("nnz")
            ids = self.searcher.collection.ids() if n is None else []
            if ids:
                n = sum(self.index.get(ids[s : s + 4096]).nnz for s in range(0, len(ids), 4096))
            self._nnz = int(n or 0)
        return self._nnz

    def stats(self) -> dict:
        dense = self.searcher.dense
        return {
            "model": self.model_name,
            "family": getattr(self.model, "family", ""),
            "vocab": self.vocab.name,
            "dim": len(self.vocab),
            "size": len(self.index),
            "nnz": self.nnz(),
            "collection": len(self.searcher.collection),
            # the engine's figures, without where its folder is on the server (not the client's business)
            "index": _jsonable({k: v for k, v in self.index.stats().items() if k != "path"}),
            "dense_index": None if dense is None else _jsonable(dense.index.stats()),
            "ranking": self.ranking.to_dict(),
        }
