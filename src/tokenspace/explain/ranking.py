"""How a search ranks beyond the plain dot product: the query-time levers, one object for the CLI, the
service and the demo.

    ranking = Ranking(idf=0.5, expansion=0.5, expansion_floor=0.1)       # prior_weight: the index's
    q = encode_queries(model, ["a black cat"], ranking)                   # shaped query rows
    hits = index.search(q, k=10, idf=ranking.idf, **ranking.index_options())

The levers (each 'off' at its default, so a Ranking() search is the model's own dot product):
- ``expansion``: the weight of a query's *expansion* tokens (the ones the text encoder adds, not the
  query's own content word pieces) against its own words, which always keep theirs. A learned expansion
  holds the recall (a query word no image carries still finds images through its neighbours) and the
  noise ("a black cat" -> x, code, co, brain...): it needs weighting, not removal.
- ``expansion_floor``: expansion tokens below this fraction of the query's largest weight are dropped.
- ``idf``: each query weight times BM25's idf ** idf over the index's live documents (search(idf=)): a
  token most images hold (def, sun, x on the demo's index) says little about any one of them.
- ``prior_weight``: the hub prior's weight (index.set_hub_prior; None: the weight stored with the index).
Shaped rows are L2-normalised again for a cosine model, so scores stay cosines and a prior's weight
means the same whatever the shaping. None of these is in the three papers: results label them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenspace.data.specs import load_data
from tokenspace.models.classwords import emitted
from tokenspace.models.registry import release_path
from tokenspace.sparse import SparseBatch

# In a model folder: the ranking chosen for it on validation data, {"search": Ranking fields, "hub_prior":
# HubBank fields or null, "generic_share": a share or null, ...notes}: what `index build` and the demo use
# unless told otherwise (ModelRanking)
RANKING_FILE = "ranking.json"


@dataclass(frozen=True)
class Ranking:
    idf: float = 0.0
    prior_weight: float | None = None
    expansion: float = 1.0
    expansion_floor: float = 0.0

    def __post_init__(self):
        for name, lo, hi in (("idf", 0, 4), ("expansion", 0, 10), ("expansion_floor", 0, 1)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi):
                raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
        w = self.prior_weight
        if w is not None and not (isinstance(w, (int, float)) and not isinstance(w, bool) and 0 <= w < math.inf):
            raise ValueError(f"prior_weight must be a finite number >= 0 (or null: the index's), got {w!r}")

    @classmethod
    def from_dict(cls, d: Mapping | None) -> "Ranking":
        """A Ranking from a JSON object (ranking.json, collection.json, an HTTP request); unknown keys are
        an error naming them."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"a ranking is an object of {', '.join(cls.fields())}, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.fields()))
        if unknown:
            raise ValueError(f"unknown ranking field {unknown[0]!r} (known: {', '.join(cls.fields())})")
        return cls(**d)

    @staticmethod
    def fields() -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(Ranking))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def with_(self, **changes) -> "Ranking":
        """This ranking with the given fields changed; a None value keeps the field as it is."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def index_options(self) -> dict:
        """The index's search keywords for the index-side levers (idf is applied by index.weigh)."""
        return {} if self.prior_weight is None else {"prior_weight": self.prior_weight}

    def shapes_queries(self) -> bool:
        return self.expansion != 1.0 or self.expansion_floor > 0


def own_tokens(model, texts: Sequence[str]) -> list[np.ndarray]:
    """Each text's own content word pieces (ids in the model's vocabulary): no stop words, specials or
    punctuation (classwords.emitted), as the fused model's lexical anchor reads them."""
    vocab = model.tokenizer.vocab
    out = []
    for text in texts:
        ids = sorted({i for i in model.tokenizer.token_ids(text) if emitted(vocab.token(i))})
        out.append(np.asarray(ids, np.int64))
    return out


def shape(queries: SparseBatch, own: Sequence[np.ndarray], expansion: float = 1.0, floor: float = 0.0,
          normalize: bool = True) -> SparseBatch:
    """Query rows with their expansion tokens (dims not in ``own[r]``) scaled by ``expansion`` and those
    below ``floor`` x the row's largest weight (after scaling) dropped; own tokens are kept as they are.
    ``normalize``: each row L2-normalised again."""
    if len(own) != len(queries):
        raise ValueError(f"{len(own)} own-token lists for {len(queries)} query rows")
    rows_i, rows_v = [], []
    for r in range(len(queries)):
        idx, val = queries.row(r)
        val = val.astype(np.float32).copy()
        is_own = np.isin(idx, own[r])
        val[~is_own] *= np.float32(expansion)
        if floor > 0 and len(val):
            keep = is_own | (val >= np.float32(floor) * val.max())
            idx, val = idx[keep], val[keep]
        keep = val > 0
        idx, val = idx[keep], val[keep]
        if normalize and len(val):
            val = val / np.float32(np.sqrt(np.sum(val.astype(np.float64) ** 2)))
        rows_i.append(idx)
        rows_v.append(val.astype(np.float32))
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in rows_i])])
    indices = np.concatenate(rows_i) if rows_i else np.zeros(0, np.int32)
    values = np.concatenate(rows_v) if rows_v else np.zeros(0, np.float32)
    return SparseBatch(indptr, indices, values, queries.dim, queries.vocab)


def encode_queries(model, texts: Sequence[str], ranking: Ranking | None = None) -> SparseBatch:
    """The model's text vectors shaped by ``ranking``'s expansion and floor (idf and the prior are the
    index's: index.weigh, ranking.index_options)."""
    queries = model.encode_text(list(texts))
    if ranking is None or not ranking.shapes_queries():
        return queries
    if model.vocab.tokens != model.tokenizer.vocab.tokens:
        raise ValueError(f"expansion / expansion_floor need a model whose dims are its tokenizer's tokens; "
                         f"{model.family}'s are learned features")
    return shape(queries, own_tokens(model, texts), ranking.expansion, ranking.expansion_floor,
                 normalize=getattr(model, "similarity_fn_name", "cosine") == "cosine")


@dataclass(frozen=True)
class HubBank:
    """Where an index's hub prior comes from: ``size`` captions drawn (seeded) from the data ``specs``
    (training captions, never test ones), encoded as queries are, each image's mean of its ``k`` best
    dot products with them (index/hubness.py), subtracted at ``weight``."""

    specs: tuple[str, ...]
    size: int = 8000
    k: int = 10
    weight: float = 0.5

    def __post_init__(self):
        if not self.specs or not all(isinstance(x, str) and x for x in self.specs):
            raise ValueError("a hub bank needs data specs of training captions, e.g. emoji:train")
        for name in ("size", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"hub bank {name} must be a positive int, got {v!r}")
        if not (isinstance(self.weight, (int, float)) and not isinstance(self.weight, bool)
                and 0 <= self.weight < math.inf):
            raise ValueError(f"hub bank weight must be a finite number >= 0, got {self.weight!r}")

    @classmethod
    def from_dict(cls, d: Mapping) -> "HubBank":
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown hub bank field {unknown[0]!r}")
        return cls(**{**d, "specs": tuple(d.get("specs", ()))})

    def texts(self, home=None) -> list[str]:
        """The bank's captions: distinct, non-empty, ``size`` of them drawn with a fixed seed."""
        texts = sorted({r.text.strip() for r in load_data(list(self.specs), home) if r.text and r.text.strip()})
        if not texts:
            raise ValueError(f"the hub bank's data ({', '.join(self.specs)}) holds no captions")
        keep = np.random.default_rng(0).choice(len(texts), size=min(self.size, len(texts)), replace=False)
        return [texts[i] for i in sorted(keep)]


def model_folder(ref) -> Path | None:
    """The folder of a model reference (a folder, or a release name), None for a config name."""
    p = Path(str(ref))
    return p if p.is_dir() else release_path(str(ref))


@dataclass(frozen=True)
class ModelRanking:
    """A model's ranking.json: the search-time Ranking and the index-time levers (a hub prior's bank,
    generic image tokens' share: InvertedIndex.build(generic_share=))."""

    search: Ranking = Ranking()
    hub: HubBank | None = None
    generic_share: float | None = None


def read_model_ranking(ref) -> ModelRanking:
    """The ranking stored with a model (its folder's ranking.json), or ModelRanking() (every lever off)."""
    folder = model_folder(ref) if ref is not None else None
    path = folder / RANKING_FILE if folder is not None else None
    if path is None or not path.is_file():
        return ModelRanking()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        hub, share = doc.get("hub_prior"), doc.get("generic_share")
        if share is not None and not (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1):
            raise ValueError(f"generic_share must be in (0, 1] or null, got {share!r}")
        return ModelRanking(Ranking.from_dict(doc.get("search")), HubBank.from_dict(hub) if hub else None, share)
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a ranking file ({e})") from None


def add_hub_prior(index, model, ranking: Ranking, bank: HubBank, home=None) -> None:
    """Give ``index`` a hub prior from ``bank``'s captions, encoded and shaped as ``ranking``'s queries."""
    queries = encode_queries(model, bank.texts(home), ranking)
    index.set_hub_prior(queries, k=bank.k, weight=bank.weight)
