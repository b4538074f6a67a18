"""Inference-free queries: a model whose query side is the tokenizer and a stored weight per token.

    query(text) = n(w[t] for each distinct word piece t of the text)           n = the base's normalisation
    image       = the base model's image vector, unchanged

What OpenSearch's neural-sparse "doc-only" models do for text search: the documents are encoded by the
network once, at indexing time, and a query costs a tokenization and a table look-up, no text network
(users pick them for query latency and cost). Here the documents are images: the base model's image side
(STAIR, the fused release model, ...) is kept as it is, so an index built with the base model is searched
with this model's queries as it is, and only the query side changes. Every hit still explains itself:
the query holds the text's own tokens, each with its stored weight.

``w`` (``query_weights``, [V], saved with the model) comes from one of (``fit_weights``):

* ``idf``: BM25's idf of each token over training captions, ln(1 + (N - df + 0.5) / (df + 0.5)) (the
  idf OpenSearch's doc-only models ship, and Qdrant's IDF modifier);
* ``index-idf``: the same over an index's image vectors (``InvertedIndex.idf()``): how rare a token is
  among the documents searched;
* ``model``: the mean weight the base's full text side gives each token in the training captions that
  contain it (its own word pieces only): the network's query weights distilled into a table.

Tokens that are not content words (stop words, specials, punctuation: classwords.emitted) weigh 0 in
every table, as in the fused model's lexical anchor. ``encode_text`` (and so ``encode_query``) builds the
rows in numpy from the token ids, without torch; ``text_embed`` is the same in torch, for code that
scores through the training-time steps (it is not trained: the table is fitted, not learned).

The base model is ``self.base`` (registry.inner_model: a folder or release name when a config is built,
its portable config in a saved folder, its weights in this folder's model.safetensors under ``base.``).
The config names the towers ``{"type": "from-base"}``; in memory they are the base's specs, so the
feature cache serves both models with the same grids. Not a paper model (docs label it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from tokenspace.index.hubness import bm25_idf
from tokenspace.models.classwords import emitted
from tokenspace.models.config import ModelConfig
from tokenspace.models.dual import DualEncoder
from tokenspace.models.options import FAMILY_OPTIONS, FamilyOptions, _top_n
from tokenspace.models.registry import build_model, inner_model, load
from tokenspace.models.texts import as_texts
from tokenspace.sparse import SparseBatch

FROM_BASE = {"type": "from-base"}  # an inference-free config's towers: the base model's own
SOURCES = ("idf", "index-idf", "model")


@dataclass(frozen=True)
class InferenceFreeOptions(FamilyOptions):
    """``base``: the model whose image side the documents use (a trained folder or release name when a
    config is built, its portable config in a saved folder). ``weights``: where ``query_weights`` came
    from (one of SOURCES) and ``source``: its data specs or index folder (a record for the card; the
    table itself is in the weights). ``text_top_n``: each query keeps its n heaviest tokens (None: all)."""

    family: ClassVar[str] = "inference-free"
    base: str | dict | None = None
    weights: str = "model"
    source: str | None = None
    text_top_n: int | None = None

    def __post_init__(self):
        if self.base is not None and (not isinstance(self.base, (str, dict)) or not self.base):
            raise ValueError(f"option base must be a model folder or release name, not {self.base!r}")
        if self.weights not in SOURCES:
            raise ValueError(f"option weights must be one of {SOURCES}, not {self.weights!r}")
        if self.source is not None and not isinstance(self.source, str):
            raise ValueError(f"option source must be a string (data specs or an index folder), not {self.source!r}")
        self._set("text_top_n", _top_n(self.text_top_n, "text_top_n"))


# a family outside options.py registers its options itself (what registry.register_family does), so a
# config of this family parses once this module is imported (registry.family_class imports it)
FAMILY_OPTIONS.setdefault(InferenceFreeOptions.family, InferenceFreeOptions)


class InferenceFreeModel(DualEncoder):
    family = "inference-free"
    Options = InferenceFreeOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        opts = config.options
        if opts.base is None:
            raise ValueError("an inference-free model needs extra.base: the model whose image side it keeps "
                             "(tokenspace sparsify --inference-free MODEL)")
        for side in ("image_tower", "text_tower"):
            if getattr(config, side) != FROM_BASE:
                raise ValueError(f"an inference-free model uses the base model's towers: its {side} must be "
                                 f"{FROM_BASE}, not {getattr(config, side)}")
        base = inner_model(opts.base, tokenizer_vocab or vocab)
        if not base.sparse or base.vocab.tokens != vocab.tokens:
            raise ValueError(f"the base of an inference-free model must be a sparse model over the config's "
                             f"vocabulary ({len(vocab)} tokens); {opts.base if isinstance(opts.base, str) else 'extra.base'}"
                             f" is a {base.family} model" + ("" if base.sparse else " with dense rows"))
        if base.vocab.tokens != base.tokenizer.vocab.tokens:
            raise ValueError(f"an inference-free query holds the text's own tokens: the base's dimensions must be "
                             f"its tokenizer's tokens, {base.family}'s are learned features")
        # the base's tower specs (the feature cache's key) and text length, in memory (see the module doc)
        config = ModelConfig.from_dict({**config.to_dict(), "image_tower": base.config.image_tower,
                                        "text_tower": base.config.text_tower,
                                        "max_text_len": base.config.max_text_len})
        super().__init__(config, vocab, tokenizer_vocab, build_towers=False)
        self.tokenizer = base.tokenizer
        self.base = base.eval()
        self.similarity_fn_name = base.similarity_fn_name  # the documents' rows are the base's
        self.image_top_n, self.text_top_n = base.image_top_n, opts.text_top_n
        self.query_weights = nn.Parameter(torch.zeros(len(vocab)), requires_grad=False)
        self._table: np.ndarray | None = None  # query_weights as numpy, for encode_text (see _weights)

    # ------------------------------------------------------------------ the base's image side
    @property
    def image_tower(self) -> nn.Module:
        return self.base.image_tower

    @property
    def text_tower(self) -> nn.Module:
        return self.base.text_tower

    @property
    def packed_sizes(self) -> tuple[int, ...]:
        return self.base.packed_sizes

    def image_grid(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.base.image_grid(pixels)

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        return self.base.image_embed(grid)

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """The base's per-cell scores (heatmaps), when it has them."""
        scores = getattr(self.base, "image_scores", None)
        if scores is None:
            raise TypeError(f"the base {self.base.family} model has no per-cell scores")
        return scores(grid)

    def preprocess(self, images) -> torch.Tensor:
        return self.base.preprocess(images)

    # ------------------------------------------------------------------ the query side: a table
    def set_weights(self, weights) -> None:
        """Store the per-token query weights ([V], finite, >= 0); non-content tokens are set to 0."""
        w = np.asarray(weights, np.float32)
        if w.shape != (len(self.vocab),):
            raise ValueError(f"query weights must have one entry per token ({len(self.vocab)}), got shape {w.shape}")
        if not np.all(np.isfinite(w)) or (w < 0).any():
            raise ValueError("query weights must be finite and >= 0")
        w = np.where(content_mask(self.tokenizer.vocab.tokens), w, np.float32(0))
        with torch.no_grad():
            self.query_weights.copy_(torch.from_numpy(w))
        self._table = None

    def _weights(self) -> np.ndarray:
        # cached: a table read per query would copy 30,522 floats out of torch each time. Cleared by
        # set_weights; a loaded folder fills the parameter before the first encode
        if self._table is None:
            self._table = self.query_weights.detach().cpu().numpy().astype(np.float32)
        return self._table

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, V]: each distinct token of the text at its stored weight (0 elsewhere)."""
        w = self.query_weights[input_ids] * attention_mask.to(self.query_weights.dtype)
        out = torch.zeros(input_ids.shape[0], len(self.vocab), dtype=w.dtype, device=w.device)
        return out.scatter_reduce(1, input_ids, w, reduce="amax", include_self=True)

    def encode_text(self, texts: str | Sequence[str], batch_size: int = 256, progress: bool = False,
                    convert_to_sparse_tensor: bool = False):
        """One text or a list -> SparseBatch (``encode_text``'s contract) with no network: tokenize, look up
        each distinct token's weight, keep the ``text_top_n`` heaviest, normalise (cosine bases)."""
        texts, single = as_texts(texts)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        table, cosine = self._weights(), self.similarity_fn_name == "cosine"
        outs = []
        for s in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="encode texts"):
            ids, mask = self.tokenizer.encode(texts[s : s + batch_size])
            indptr, indices, values = [0], [], []
            for row, m in zip(ids, mask):
                dims = np.unique(row[m > 0])  # sorted, distinct
                w = table[dims]
                keep = w > 0
                dims, w = dims[keep], w[keep]
                if self.text_top_n and len(w) > self.text_top_n:  # heaviest first; equal: lower id first
                    top = np.sort(np.argsort(-w, kind="stable")[: self.text_top_n])
                    dims, w = dims[top], w[top]
                if cosine and len(w):
                    w = w / np.float32(max(float(np.sqrt(np.dot(w, w))), 1e-12))
                indices.append(dims)
                values.append(w)
                indptr.append(indptr[-1] + len(dims))
            outs.append(SparseBatch(np.asarray(indptr), np.concatenate(indices) if indices else np.zeros(0),
                                    np.concatenate(values) if values else np.zeros(0), len(self.vocab), self.vocab))
        return self._finish(outs, len(texts), single, convert_to_sparse_tensor)

    def encode_query(self, texts, **kwargs):
        """Queries: the table's rows (``encode_text``), no text network."""
        return self.encode_text(texts, **kwargs)

    # ------------------------------------------------------------------ persistence
    def portable_config(self) -> ModelConfig:
        """The base travels as its portable config in extra.base (its weights are in this folder's own
        model.safetensors, under base.*): the folder loads without the base's folder."""
        cfg = super().portable_config()
        cfg.image_tower, cfg.text_tower = dict(FROM_BASE), dict(FROM_BASE)
        cfg.extra = {**cfg.extra, "base": self.base.portable_config().to_dict()}
        return cfg

    def _load_from_state_dict(self, *args, **kwargs):
        self._table = None  # the loaded weights replace the cached table
        return super()._load_from_state_dict(*args, **kwargs)


def content_mask(tokens: Sequence[str]) -> np.ndarray:
    """bool[V]: the tokens a query keeps (content word pieces: classwords.emitted)."""
    return np.array([emitted(t) for t in tokens], bool)


def caption_idf(tokenizer, texts: Sequence[str], batch_size: int = 1024) -> np.ndarray:
    """float32[V]: BM25's idf of each token over ``texts`` (each text counts a token once)."""
    if not texts:
        raise ValueError("no captions to count tokens in")
    df = np.zeros(len(tokenizer.vocab), np.int64)
    for s in range(0, len(texts), batch_size):
        ids, mask = tokenizer.encode(list(texts[s : s + batch_size]))
        for row, m in zip(ids, mask):
            df[np.unique(row[m > 0])] += 1
    return bm25_idf(df, len(texts))


def mean_text_weights(model: DualEncoder, texts: Sequence[str], batch_size: int = 256,
                      progress: bool = False) -> np.ndarray:
    """float32[V]: the mean weight ``model.encode_text`` gives each token over the ``texts`` that contain
    it (its own word pieces; 0 where none does). Tokens the captions never hold get the median of the
    others: a query may use words no caption had."""
    if not texts:
        raise ValueError("no captions to average token weights over")
    total = np.zeros(len(model.vocab), np.float64)
    count = np.zeros(len(model.vocab), np.int64)
    for s in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="mean token weights"):
        chunk = list(texts[s : s + batch_size])
        dense = model.encode_text(chunk).to_dense()
        ids, mask = model.tokenizer.encode(chunk)
        for r, (row, m) in enumerate(zip(ids, mask)):
            own = np.unique(row[m > 0])
            total[own] += dense[r, own]
            count[own] += 1
    seen = count > 0
    out = np.zeros(len(model.vocab), np.float32)
    out[seen] = total[seen] / count[seen]
    positive = out[seen & (out > 0)]
    out[~seen] = np.median(positive) if len(positive) else 0.0
    return out


def make_inference_free(base: str, weights: str = "model", captions: Sequence[str] | None = None, index=None,
                        text_top_n: int | None = None, source: str | None = None,
                        progress: bool = False) -> InferenceFreeModel:
    """An inference-free model over ``base`` (a trained model folder or release name), its query weights
    fitted: ``idf`` and ``model`` from ``captions`` (training captions, never test ones), ``index-idf`` from
    ``index`` (an InvertedIndex of the base's image vectors). ``source`` is recorded in the config."""
    if weights not in SOURCES:
        raise ValueError(f"weights must be one of {SOURCES}, got {weights!r}")
    if weights == "index-idf" and index is None:
        raise ValueError("weights 'index-idf' need an index of the base model's image vectors")
    if weights != "index-idf" and not captions:
        raise ValueError(f"weights {weights!r} need training captions")
    base_model = load(base)
    name = f"{base_model.config.name}-inference-free"
    model = build_model(inference_free_config(str(base), weights, source, text_top_n, name=name),
                        vocab=base_model.tokenizer.vocab)
    if weights == "idf":
        table = caption_idf(model.tokenizer, captions)
    elif weights == "model":
        table = mean_text_weights(base_model, captions, progress=progress)
    else:
        if index.dim != len(model.vocab):
            raise ValueError(f"the index has {index.dim} dimensions, the model {len(model.vocab)}")
        table = index.idf()
    model.set_weights(table)
    return model.eval()


def inference_free_config(base: str | dict, weights: str = "model", source: str | None = None,
                          text_top_n: int | None = None, vocab: str | None = None,
                          name: str = "inference-free") -> ModelConfig:
    """The config of an inference-free model over ``base`` (a trained folder or release name)."""
    return ModelConfig.from_dict({
        "name": name, "family": "inference-free", "vocab": vocab, "image_tower": dict(FROM_BASE),
        "text_tower": dict(FROM_BASE),
        "extra": {"base": base, "weights": weights, "source": source, "text_top_n": text_top_n}})
