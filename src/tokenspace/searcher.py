"""One search session over an index folder: the model, the index, the collection's metadata, the dense
half of a hybrid search and the explanations, in one object.

    from tokenspace import Searcher

    s = Searcher.open("indexes/emoji")                 # the model the index records, its ranking
    res = s.search("a red heart", k=5, filter={"source": "emoji"}, steer={"red": 2.0})
    for h in res.hits:
        print(h.id, h.score, h.item.get("text"), [(c.token, c.contribution) for c in h.parts[:3]])

`tokenspace search`, the HTTP service (serve/service.py) and the demo are callers of this class; none
of them assembles a search of its own.

What an index folder records about its collection is read here, in one place (``Collection``):
- an index written by `tokenspace index build` or `tokenspace encode` (manifest version 6) holds it all:
  the manifest's ``info`` names the model that encoded the rows and the default ranking, and each row's
  metadata carries its caption (``caption``), ``source``, ``label`` and image file (``image``);
- an older index keeps these in a ``collection.json`` beside it ({model, ranking, items: id -> {image,
  text, label, source}}), still read when the manifest records no info.

A dense index folder (`index build` with a dense model) has no manifest: its ``collection.json`` names
the model that encodes its queries (``dense_model_of``).
"""
from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenspace import atomic
from tokenspace.explain.hits import Contribution
from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.explain.search import explained_search, search_options
from tokenspace.explain.steer import steer as steer_query
from tokenspace.index import InvertedIndex
from tokenspace.index import manifest as _manifest
from tokenspace.index.dense import DenseIndex  # faiss itself loads only when a dense index is opened
from tokenspace.index.hybrid import DEPTH, hybrid_search
from tokenspace.index.storage import MANIFEST
from tokenspace.models import registry  # the explain modules above import the models already
from tokenspace.sparse import SparseBatch

COLLECTION_FILE = "collection.json"  # an older index's collection metadata, beside it
DENSE_IDS = "ids.json"  # what a DenseIndex folder holds beside flat.faiss (index/dense.py)


class SearchError(ValueError):
    """A search the session refuses, in one line that starts with the option it is about
    (``steer: ...``, ``must_not: ...``, ``fusion: ...``): the CLI prefixes ``--``, the service answers 400."""


# ------------------------------------------------------------------------------------------ collection
def row_fields(*, image=None, text=None, label=None, source=None) -> dict:
    """The metadata fields an index row carries about its item (the ones a search shows and filters on):
    ``caption`` (the text), ``source``, ``label``, ``image`` (its file), each only when it has a value."""
    return {k: v for k, v in (("source", source), ("caption", text), ("label", label), ("image", image))
            if v not in (None, "")}


def read_collection_json(index_dir) -> dict:
    """An older index folder's collection.json ({model, items: id -> {image, text, ...}, ranking}); an
    empty one when the folder has none. A damaged file is a ValueError naming it."""
    path = Path(index_dir) / COLLECTION_FILE
    if not path.exists():
        return {"model": None, "items": {}}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e}); write it again with `tokenspace index build`") from None
    items = meta.get("items", {}) if isinstance(meta, dict) else None
    if (not isinstance(items, dict) or not isinstance(meta.get("model"), (str, type(None)))
            or not all(isinstance(v, dict) for v in items.values())):
        shape = '{"model": a path or null, "items": {id: {"image": ..., "text": ...}}}'
        raise ValueError(f"{path}: expected {shape}; write it again with `tokenspace index build`")
    return {"model": None, **meta, "items": items}


def write_dense_collection(index_dir, model_ref) -> None:
    """A dense index folder's collection.json: the model that encodes its queries (it has no manifest)."""
    doc = {"model": str(model_ref) if model_ref else None, "items": {}}
    atomic.write_text(Path(index_dir) / COLLECTION_FILE, json.dumps(doc))


def index_model(index_dir) -> str | None:
    """The model reference an index folder records (its manifest's info, else its collection.json);
    None when it names none. Reads the manifest only: the index itself is not opened."""
    root = Path(index_dir)
    if (root / MANIFEST).exists():
        info = _manifest.read(root).info or {}
        if info:
            return info.get("model")
    return read_collection_json(root).get("model")


dense_model_of = index_model  # a dense index folder names its model in its collection.json


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
        self.ranking = Ranking.from_dict(src.get("ranking"))
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


@dataclass(frozen=True)
class DenseHalf:
    """The dense half of a hybrid search: a DenseIndex of the same images and the dense model that
    encodes its queries."""

    model: object
    index: object


# ------------------------------------------------------------------------------------------ session
class Searcher:
    """A search session: a sparse model (to encode queries), an index (to search), its Collection (to
    show hits), a default Ranking and optionally a dense half (hybrid search)."""

    def __init__(self, model, index, *, collection: Collection | None = None, base_dir=None,
                 dense: DenseHalf | None = None, ranking: Ranking | None = None, cache_size: int = 1024):
        if not getattr(model, "sparse", True):
            raise TypeError(f"{model.family} models produce dense vectors: a token search needs a sparse model")
        self.model, self.index, self.vocab = model, index, model.vocab
        self.collection = collection if collection is not None else Collection.of(index, base_dir)
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.ranking = ranking or self.collection.ranking
        if self.ranking.prior_weight is not None:  # a prior weight needs an index with a hub prior
            self.index.prior_weight(self.ranking.prior_weight)
        if dense is not None and len(dense.index) != len(index):
            raise ValueError(f"the dense index holds {len(dense.index)} images and the index {len(index)}: "
                             "index the same collection with both models")
        self.dense = dense
        # one model call at a time: the CPU is the bottleneck, and torch's own threads already use every
        # core, so concurrent calls would only thrash (the index itself is read-only and lock-free)
        self.model_lock = threading.Lock()
        self._cache: OrderedDict[tuple, SparseBatch] = OrderedDict()  # repeated queries skip the model
        self._cache_size = cache_size

    @classmethod
    def open(cls, index_dir, model=None, dense_index=None, *, dense_model=None, device: str = "cpu",
             ranking: Ranking | None = None, verify: bool = True, **kwargs) -> Searcher:
        """The session over the index saved in ``index_dir``. ``model``: a model, or a folder or release
        name (default: the model the index records). ``dense_index``: a DenseIndex, or the folder of one
        (`index build` with a dense model), for hybrid search; ``dense_model``: its model (default: the one
        its folder records). ``ranking``: the default ranking (default: the index's)."""
        index = InvertedIndex.load(index_dir, verify=verify)
        collection = Collection.of(index, index_dir)
        if model is None:
            model = collection.model
            if not model:
                raise SearchError(f"model: the index at {index_dir} does not name its model; give one")
        model = _load(model, device)
        dense = None
        if dense_index is not None:
            if isinstance(dense_index, (str, Path)):
                if dense_model is None:
                    dense_model = dense_model_of(dense_index)
                    if not dense_model:
                        raise SearchError(f"dense_model: the dense index at {dense_index} does not name its model")
                dense_index = load_dense_index(dense_index)
            if dense_model is None:
                raise SearchError("dense_model: a dense index given in code needs its dense model")
            dense_model = _load(dense_model, device)
            if getattr(dense_model, "sparse", True):
                raise SearchError(f"dense_model: a sparse model ({dense_model.family}); the dense index needs its "
                                  "dense model")
            dense = DenseHalf(dense_model, dense_index)
        return cls(model, index, collection=collection, base_dir=index_dir, dense=dense, ranking=ranking, **kwargs)

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, ranking: Ranking | None = None) -> SparseBatch:
        """The query vector of a text (one row) shaped by ``ranking`` (default: the session's), cached by
        text and shaping."""
        text = text.strip()
        if not text:
            raise SearchError("the query text is empty")
        ranking = ranking or self.ranking
        key = (text, ranking.expansion, ranking.expansion_floor)
        with self.model_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            try:
                q = encode_queries(self.model, [text], ranking).with_vocab(self.vocab)
            except ValueError as e:  # shaping a model whose dims are not its tokens
                raise SearchError(f"expansion: {e}") from None
            self._cache[key] = q
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return q

    def encode_image(self, image) -> SparseBatch:
        """The query vector of an image (a PIL image or a ``pathlib.Path``)."""
        with self.model_lock:
            return self.model.encode_image([image]).with_vocab(self.vocab)

    def steer(self, query: SparseBatch, weights: Mapping[str, float] | None) -> SparseBatch:
        try:
            return steer_query(query, dict(weights or {}), self.vocab)
        except ValueError as e:
            raise SearchError(f"steer: {e}") from None

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
        session's ranking for this search (None keeps it). ``fusion`` ("rrf" or "weighted") fuses the
        dense half's ranking in (``weight``: the sparse side's share); the tokens then explain the sparse
        side's dot product. ``explain=False``: no contributions (the hits' ``parts`` are empty).
        SearchError (one line naming the option) for anything it refuses."""
        t0 = time.perf_counter()
        is_text = isinstance(query, str)
        try:
            options = search_options(self.index, self.vocab, must=must, must_not=must_not, where=where, meta=filter)
            chosen = self.ranking.with_(idf=idf, prior_weight=prior_weight, expansion=expansion,
                                        expansion_floor=expansion_floor)
            if chosen.prior_weight is not None:
                self.index.prior_weight(chosen.prior_weight)  # refused when the index has no hub prior
        except (TypeError, ValueError) as e:
            raise SearchError(str(e)) from None
        if is_text:
            q = self.steer(self.encode_text(query, chosen), steer)
        else:
            if steer:
                raise SearchError("steer: reweighs a text query's tokens; give a text, not an image")
            q = self.encode_image(query)
        if fusion is not None:  # hybrid search (index/hybrid.py): the scores are the fused ones
            fused = self._fused(query, q, k, options, fusion, weight)
            hits = self._explained(q, k, hits=fused, explain=explain)
            shown = q
        else:
            ranked = {"idf": chosen.idf, **chosen.index_options()}
            hits = self._explained(q, k, explain=explain, **ranked, **options)
            shown = self.index.weigh(q, chosen.idf) if chosen.idf else q  # the weights the hits were scored with
        return Results(self.vocab.decode(shown, top_k=None)[0], hits, fusion, (time.perf_counter() - t0) * 1000.0)

    def _fused(self, query, q: SparseBatch, k: int, options: dict, fusion: str, weight: float):
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
                                 depth=DEPTH)[0]
        except ValueError as e:
            raise SearchError(f"fusion: {e}") from None

    def _explained(self, q: SparseBatch, k: int, *, explain: bool, hits=None, **options) -> list[Hit]:
        if explain:
            found = explained_search(self.index, q, k, hits=hits, vocab=self.vocab, **options)
            return [Hit(h.id, h.score, h.parts, h.penalty, self.item(h.id) or {}) for h in found]
        if hits is None:
            idf = options.pop("idf", 0.0)
            qq = self.index.weigh(q, idf) if idf else q
            hits = self.index.search(qq, k=k, **options)[0] if qq.nnz else []
        return [Hit(h.id, float(h.score), [], 0.0, self.item(h.id) or {}) for h in hits]

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


def _load(model, device: str):
    """A model object as given; a folder or release name loaded (on ``device``)."""
    if not isinstance(model, (str, Path)):
        return model
    loaded = registry.load(model)
    return loaded.to(device) if device != "cpu" else loaded


def load_dense_index(path):
    """The DenseIndex saved at ``path`` (by `tokenspace index build --model DENSE_MODEL`); SearchError when
    the folder holds none."""
    p = Path(path)
    if not (p / DENSE_IDS).exists():
        what = "no dense index in the folder" if p.is_dir() else "a file, not a folder" if p.exists() else "no such folder"
        raise SearchError(f"no dense index at {path} ({what}; build one with `tokenspace index build --model DENSE_MODEL`)")
    try:
        return DenseIndex.load(p)
    except (ImportError, ValueError, RuntimeError) as e:
        raise SearchError(f"dense_index {path}: {' '.join(str(e).split())}") from None
