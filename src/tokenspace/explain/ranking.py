"""How a search ranks beyond the plain dot product: the query-time levers, one object for the CLI, the
service and the demo.

    ranking = Ranking(idf=0.5, prior_weight=0.5, expansion=0.5, expansion_floor=0.1)
    q = index.weigh(encode_queries(model, ["a black cat"], ranking), ranking.idf)   # the scored query
    hits = index.search(q, k=10, **ranking.index_options())

A Ranking is resolved: every lever is a number and 0 (1 for ``expansion``) means off. What a user leaves
out is resolved where the input arrives (``with_``: None keeps a field), against the defaults an index
stores (``from_dict``: a stored null ``prior_weight`` is the index's own weight), so nothing below the
search session sees "not given". The levers (each 'off' at its default, so a Ranking() search is the
model's own dot product):
- ``expansion``: the weight of a query's *expansion* tokens (the ones the text encoder adds, not the
  query's own content word pieces) against its own words, which always keep theirs. A learned expansion
  holds the recall (a query word no image carries still finds images through its neighbours) and the
  noise ("a black cat" -> x, code, co, brain...): it needs weighting, not removal.
- ``expansion_floor``: expansion tokens below this fraction of the query's largest weight are dropped.
- ``idf``: each query weight times BM25's idf ** idf over the index's live documents (index.weigh): a
  token most images hold (def, sun, x on the demo's index) says little about any one of them.
- ``prior_weight``: the hub prior's weight (index.set_hub_prior): the score is the dot product minus
  prior_weight x the image's hubness; 0 is the plain dot product.
Shaped rows are L2-normalised again for a cosine model, so scores stay cosines and a prior's weight
means the same whatever the shaping. None of these is in the three papers: results label them.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenspace.data.specs import load_data
from tokenspace.models.classwords import emitted
from tokenspace.models.releases import release_path
from tokenspace.sparse import SparseBatch

# In a model folder: the ranking chosen for it on validation data, {"search": Ranking fields, "hub_prior":
# HubBank fields or null, "generic_share": a share or null, ...notes}: what `index build` and the demo use
# unless told otherwise (ModelRanking)
RANKING_FILE = "ranking.json"


@dataclass(frozen=True)
class Ranking:
    idf: float = 0.0
    prior_weight: float = 0.0
    expansion: float = 1.0
    expansion_floor: float = 0.0

    def __post_init__(self):
        for name, lo, hi in (("idf", 0, 4), ("prior_weight", 0, math.inf), ("expansion", 0, 10),
                             ("expansion_floor", 0, 1)):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and lo <= v <= hi
                    and math.isfinite(v)):
                bound = "a finite number >= 0" if hi == math.inf else f"a number in [{lo}, {hi}]"
                raise ValueError(f"{name} must be {bound}, got {v!r}")
            object.__setattr__(self, name, float(v))  # 0 and 0.0 are one ranking (equality, JSON, cache keys)

    @classmethod
    def from_dict(cls, d: Mapping | None, prior_weight: float = 0.0) -> "Ranking":
        """A Ranking from a JSON object (ranking.json, an index's info, collection.json, an HTTP
        request); unknown keys are an error naming them. ``prior_weight``: what an absent or null
        ``prior_weight`` means there (the weight the index stores with its hub prior; rankings written
        before every lever was a number used null for it)."""
        if d is None:
            return cls(prior_weight=prior_weight)
        if not isinstance(d, Mapping):
            raise ValueError(f"a ranking is an object of {', '.join(cls.fields())}, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.fields()))
        if unknown:
            raise ValueError(f"unknown ranking field {unknown[0]!r} (known: {', '.join(cls.fields())})")
        return cls(**{**d, "prior_weight": prior_weight if d.get("prior_weight") is None else d["prior_weight"]})

    @staticmethod
    def fields() -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(Ranking))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def with_(self, **changes) -> "Ranking":
        """This ranking with the given fields changed; a None value keeps the field as it is (a flag, an
        HTTP field or a page input the user left out)."""
        unknown = sorted(set(changes) - set(self.fields()))
        if unknown:
            raise ValueError(f"unknown ranking field {unknown[0]!r} (known: {', '.join(self.fields())})")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def index_options(self) -> dict:
        """The index's search keyword for the index-side lever the kernels apply (the prior; idf is
        applied to the query by index.weigh, once, so the explanation shows the weights it scored)."""
        return {"prior_weight": self.prior_weight}

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
    dims, pieces = model.vocab.tokens, model.tokenizer.vocab.tokens
    if dims is not pieces and dims != pieces:  # usually one list: comparing 30,522 strings cost 0.1 ms a call
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
        return list(_bank_texts(self.specs, self.size, None if home is None else str(home)))


@functools.lru_cache(maxsize=4)
def _bank_texts(specs: tuple[str, ...], size: int, home: str | None) -> tuple[str, ...]:
    # kept for the process: an ingestion command reads them to check the specs before it encodes, and
    # again to build the prior (a release bank's four data sets take ~8 s to read)
    texts = sorted({r.text.strip() for r in load_data(list(specs), home) if r.text and r.text.strip()})
    if not texts:
        raise ValueError(f"the hub bank's data ({', '.join(specs)}) holds no captions")
    keep = np.random.default_rng(0).choice(len(texts), size=min(size, len(texts)), replace=False)
    return tuple(texts[i] for i in sorted(keep))


def model_folder(ref) -> Path | None:
    """The folder of a model reference (a folder, or a release name), None for a config name."""
    p = Path(str(ref))
    if p.is_dir():
        return p
    return release_path(str(ref))


@dataclass(frozen=True)
class ModelRanking:
    """A model's ranking.json: the search-time Ranking and the index-time levers (a hub prior's bank,
    generic image tokens' share: InvertedIndex.build(generic_share=)). Resolved as a Ranking is: the
    search's ``prior_weight`` is the bank's weight with a bank, 0 without one."""

    search: Ranking = Ranking()
    hub: HubBank | None = None
    generic_share: float | None = None

    def __post_init__(self):
        if self.hub is not None and self.search.prior_weight != self.hub.weight:
            raise ValueError(f"prior_weight {self.search.prior_weight:g} differs from the hub bank's weight "
                             f"{self.hub.weight:g}: one weight, stored with the index's hub prior")
        if self.hub is None and self.search.prior_weight:
            raise ValueError("prior_weight: give a hub bank (training captions) for a hub prior")

    def changed(self, *, ranking: Mapping | None = None, hub_bank: Sequence[str] | None = None,
                hub_k: int | None = None, no_hub_prior: bool = False,
                generic_share: float | None = None) -> "ModelRanking":
        """This ranking changed by what a user gave an ingestion command (`index build`, `encode`): the
        search levers (``ranking``: field -> value, None keeps), a hub bank of other captions
        (``hub_bank``: data specs) or its k, none at all (``no_hub_prior``), a generic share (1: off).
        ValueError naming the flag for a contradiction."""
        search = self.search.with_(**dict(ranking or {}))
        share = generic_share if generic_share is not None else self.generic_share
        if share is not None and not 0 < share <= 1:
            raise ValueError(f"--generic-share must be in (0, 1], got {share:g}")
        share = None if share == 1 else share
        hub = self.hub
        if no_hub_prior:
            if hub_bank or hub_k:
                raise ValueError("--no-hub-prior: not with --hub-bank or --hub-k")
            return ModelRanking(search.with_(prior_weight=0.0), None, share)
        if hub_bank or (hub is not None and hub_k):
            hub = dataclasses.replace(hub or HubBank(tuple(hub_bank)), specs=tuple(hub_bank or hub.specs),
                                      k=hub_k or (hub.k if hub else HubBank.k))
        elif hub_k:
            raise ValueError("--hub-k: give --hub-bank (this model's ranking has no hub bank)")
        if hub is None:
            if search.prior_weight:
                raise ValueError("--prior-weight: give --hub-bank SPEC (training captions) for a hub prior")
            return ModelRanking(search, None, share)
        given = (ranking or {}).get("prior_weight")
        if given is not None:  # the weight stored with the index's hub prior (a new bank's: CSLS's 0.5)
            hub = dataclasses.replace(hub, weight=float(given))
        return ModelRanking(search.with_(prior_weight=hub.weight), hub, share)


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
        hub = HubBank.from_dict(hub) if hub else None
        search = doc.get("search") or {}
        if hub is not None and search.get("prior_weight") is not None:  # one weight: the search's
            hub = dataclasses.replace(hub, weight=float(search["prior_weight"]))
        elif hub is None and search.get("prior_weight"):
            raise ValueError("search.prior_weight needs a hub_prior bank")
        return ModelRanking(Ranking.from_dict(search, prior_weight=hub.weight if hub else 0.0), hub, share)
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a ranking file ({e})") from None


def encode_bank(model, texts: Sequence[str], ranking: Ranking, batch_size: int = 256,
                progress: bool = False) -> SparseBatch:
    """A hub bank's captions encoded and shaped as ``ranking``'s queries are, in batches (with a progress
    bar: a release model's 8,000 captions take minutes on a CPU; encode.hub_bank_queries keeps them)."""
    from tqdm.auto import tqdm  # start-up: tqdm only where a bank is encoded

    starts = range(0, len(texts), batch_size)
    return SparseBatch.concat([encode_queries(model, texts[s:s + batch_size], ranking)
                               for s in tqdm(starts, desc="hub bank captions", unit="batch", disable=not progress)])


def add_hub_prior(index, model, ranking: Ranking, bank: HubBank, home=None, queries: SparseBatch | None = None) -> None:
    """Give ``index`` a hub prior from ``bank``'s captions, encoded and shaped as ``ranking``'s queries
    (``queries``: already encoded, e.g. by encode.hub_bank_queries), at the bank's weight."""
    if queries is None:
        queries = encode_bank(model, bank.texts(home), ranking)
    index.set_hub_prior(queries, k=bank.k, weight=bank.weight)
