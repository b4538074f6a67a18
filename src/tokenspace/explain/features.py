"""Feature naming for latent sparse features (Sparse CLIP Sec. 3.2, Fig. 4/9): what activates each feature.

Sparse CLIP's dimensions are learned, not tokens. They keep stable ids (``f00012``, from
``Vocabulary.latent``) and get a *naming table*: for every feature, the words of a concept
vocabulary and the images of a collection that activate it most.

* Ranking uses the **raw** activations (the ReLU outputs before the L2 normalisation that scoring
  applies), as the paper's Fig. 9 shows them ("un-normalized activation values"): a row's norm says
  how strongly the input fires overall, and dividing by it would promote inputs that fire weakly but on
  few features.
* The word list (``concept_vocabulary``) follows the paper: the first lemma of every WordNet synset
  (Debian ``wordnet-base``, asset ``wordnet``: 86,571 distinct lemmas) merged with the 20K most common
  English words (the paper uses Oikarinen & Weng's list; ours is ``wordfreq``'s ``top_n_list("en",
  20000)``, 19,963 after dropping entries without a letter): 95,137 words here against the paper's 98,619.

A feature is **multimodal** when its two lists agree: with captions for the images, when at least
``min_agreement`` of its top images have a caption that contains one of its top words. Without
captions, agreement cannot be judged from the lists alone; the fallback is the paper's modality score
(share of the feature's activation mass from images, vs the word list) inside [band, 1 - band],
computed on L2-normalised rows so that the two towers' different output scales do not decide it.

Works on any activations (STAIR tokens too); ``name_model_features`` encodes them.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tokenspace import assets
from tokenspace.atomic import write_text
from tokenspace.sparse import SparseBatch

WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_WORD = re.compile(r"[a-z]+")


# ------------------------------------------------------------------------------------ word lists
def wordnet_lemmas(root: str | os.PathLike | None = None) -> list[str]:
    """The first lemma of every WordNet synset (paper: "the first word from each synonym set"),
    lowercased, underscores as spaces, adjective markers like ``(p)`` removed, deduplicated in file
    order. ``root`` defaults to the ``wordnet`` asset (a link to /usr/share/wordnet)."""
    if root is None:
        root = assets.path("wordnet")
    root = Path(root)
    missing = [f for f in WORDNET_FILES if not (root / f).exists()]
    if missing:
        raise FileNotFoundError(f"{root}: no WordNet data files {missing} (make system-packages, or as root: apt-get install -y wordnet-base)")
    seen: dict[str, None] = {}
    for name in WORDNET_FILES:
        with open(root / name, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                parts = line.split(" ", 5)
                if len(parts) < 5:
                    continue
                word = re.sub(r"\(.*\)$", "", parts[4]).replace("_", " ").lower()
                if word:
                    seen.setdefault(word, None)
    return list(seen)


def common_words(vocab, limit: int | None = 20000, min_len: int = 2) -> list[str]:
    """Whole-word alphabetic entries of a WordPiece vocabulary, in vocabulary (≈ frequency) order: a
    fallback common-word list when ``wordfreq`` is not installed."""
    out = [t for t in vocab.tokens if len(t) >= min_len and t.isascii() and t.isalpha()]
    return out[:limit] if limit else out


def frequent_words(n: int = 20000) -> list[str]:
    """The ``n`` most frequent English words of ``wordfreq`` (its data ships in the package: no
    download), entries without a letter (digits, symbols, emoji) dropped."""
    try:
        from wordfreq import top_n_list  # optional: wordfreq (the explain extra)
    except ImportError:
        raise ImportError("the common-word list needs wordfreq: pip install 'tokenspace[explain]'") from None
    return [w for w in top_n_list("en", n) if any(c.isalpha() for c in w)]


def concept_vocabulary(common: Sequence[str] | None = None, wordnet_root=None, wordnet: bool = True,
                       common_limit: int = 20000) -> list[str]:
    """The naming word list: common words first, then WordNet lemmas, deduplicated (Sec. 3.2).

    ``common`` defaults to ``frequent_words(common_limit)``; pass another list (e.g. ``common_words``
    of a tokenizer vocabulary) to replace it. Without WordNet installed the list is the common words
    alone only when ``wordnet=False`` is asked for: a silently smaller vocabulary would change every name."""
    words = dict.fromkeys(frequent_words(common_limit) if common is None else common)
    if wordnet:
        words.update(dict.fromkeys(wordnet_lemmas(wordnet_root)))
    if not words:
        raise ValueError("no words: the common-word list is empty and WordNet is off")
    return list(words)


# ------------------------------------------------------------------------------------ the table
@dataclass
class FeatureName:
    feature: str  # stable id, e.g. f00012
    index: int
    name: str  # the top word ("" when no word activates the feature)
    words: list[tuple[str, float]]  # top words, heaviest first
    images: list[tuple[str, float]]  # top images (id, activation), heaviest first
    agreement: float | None  # share of top images whose caption contains a top word (None: no captions)
    modality: float  # image share of activation mass vs the word list (NaN: dead feature)
    multimodal: bool
    image_texts: list[str] = field(default_factory=list)  # captions of the top images, when known

    @property
    def label(self) -> str:
        return f"{self.feature} ({self.name})" if self.name else self.feature


@dataclass
class FeatureTable:
    features: list[FeatureName]
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, key: int | str) -> FeatureName:
        """By dimension index or by stable id (``f00012``)."""
        for f in self.features:
            if f.index == key or f.feature == key:
                return f
        raise KeyError(f"feature {key!r} not in the naming table (dead features are left out)")

    def names(self) -> dict[str, str]:
        """Stable id -> name: what a UI shows next to a SparseBatch dimension."""
        return {f.feature: f.name for f in self.features}

    def summary(self) -> dict[str, float]:
        n = len(self.features)
        judged = [f for f in self.features if f.agreement is not None]
        return {"features_named": float(n),
                "multimodal_frac": float(np.mean([f.multimodal for f in self.features])) if n else float("nan"),
                "agreement_mean": float(np.mean([f.agreement for f in judged])) if judged else float("nan")}

    # ---------------------------------------------------------------- persistence
    def to_json(self) -> str:
        def clean(x):
            return None if isinstance(x, float) and math.isnan(x) else x

        rows = [{k: clean(v) for k, v in asdict(f).items()} for f in self.features]
        return json.dumps({"meta": self.meta, "summary": self.summary(), "features": rows}, indent=1)

    def to_markdown(self, max_rows: int | None = 50, top_words: int = 5, top_images: int = 3) -> str:
        """The most agreeing (then most active) features first."""
        order = sorted(self.features, key=lambda f: (-(f.agreement or 0.0), -(f.words[0][1] if f.words else 0.0)))
        lines = ["| feature | name | top words | top images | agreement | multimodal |", "|---|---|---|---|---:|---|"]
        for f in order[:max_rows]:
            words = ", ".join(w for w, _ in f.words[:top_words])
            imgs = ", ".join(f.image_texts[:top_images] or [i for i, _ in f.images[:top_images]])
            agree = "—" if f.agreement is None else f"{f.agreement:.2f}"
            cells = [f.feature, f.name, words, imgs, agree, "yes" if f.multimodal else "no"]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(lines) + "\n"

    def save(self, folder: str | os.PathLike) -> tuple[Path, Path]:
        """features.json (everything) and features.md (the readable head), written atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = []
        for name, text in (("features.json", self.to_json()), ("features.md", self.to_markdown())):
            write_text(folder / name, text)
            out.append(folder / name)
        return out[0], out[1]

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureTable:
        doc = json.loads(Path(path).read_text())
        feats = []
        for r in doc["features"]:
            r["words"] = [tuple(x) for x in r["words"]]
            r["images"] = [tuple(x) for x in r["images"]]
            r["modality"] = float("nan") if r["modality"] is None else r["modality"]
            feats.append(FeatureName(**r))
        return cls(feats, doc.get("meta", {}))


# ------------------------------------------------------------------------------------ naming
class TopActivations:
    """Running top-k rows of every feature over row blocks of activations, and each feature's mass.

    Fed one [rows, F] block at a time, memory stays O(k x F) whatever the number of rows (95K words x
    4,096 features as one sparse matrix would take ~1.5 GB). ``mass`` sums the L2-normalised rows
    (the modality score's input); the ranking uses the raw values it is given."""

    def __init__(self, n_features: int, k: int):
        self.k = k
        self.rows = np.zeros((0, n_features), np.int64)
        self.vals = np.zeros((0, n_features), np.float32)
        self.mass = np.zeros(n_features, np.float64)
        self.n = 0

    def add(self, block) -> None:
        block = np.clip(np.asarray(block, np.float32), 0, None)  # [b, F]; signed features: their positive part
        if block.ndim != 2 or block.shape[1] != self.vals.shape[1]:
            raise ValueError(f"expected [rows, {self.vals.shape[1]}] activations, got {block.shape}")
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        self.mass += (block / np.maximum(norms, 1e-12)).sum(0)
        new_rows = np.broadcast_to(np.arange(self.n, self.n + len(block))[:, None], block.shape)
        rows, vals = np.concatenate([self.rows, new_rows]), np.concatenate([self.vals, block])
        order = np.lexsort((rows, -vals), axis=0)[: self.k]  # per feature: heaviest first, ties by row
        self.rows, self.vals = np.take_along_axis(rows, order, 0), np.take_along_axis(vals, order, 0)
        self.n += len(block)

    def top(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, values) of feature ``f``, heaviest first, zeros left out."""
        keep = self.vals[:, f] > 0
        return self.rows[keep, f], self.vals[keep, f]

    def mean_mass(self) -> np.ndarray:
        return self.mass / max(self.n, 1)


def _blocks(acts, size: int = 4096) -> Iterator[np.ndarray]:
    """Dense row blocks of a SparseBatch / scipy matrix / array."""
    m = acts.to_scipy() if isinstance(acts, SparseBatch) else acts
    for s in range(0, m.shape[0], size):
        blk = m[s : s + size]
        yield blk.toarray() if sp.issparse(blk) else np.asarray(blk, np.float32)


def _n_features(acts) -> int:
    return acts.dim if isinstance(acts, SparseBatch) else acts.shape[1]


def _norm_words(text: str) -> str:
    """' dog cat ' with a crude plural strip, so 'dogs' in a caption matches the word 'dog'."""
    return " " + " ".join(w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(text.lower())) + " "


def caption_agreement(top_words: Sequence[str], captions: Sequence[str]) -> float:
    """Share of captions that contain at least one of the words (whole words or phrases)."""
    if not captions:
        return 0.0
    keys = [k for k in (_norm_words(w) for w in top_words) if k.strip()]
    return float(np.mean([any(k in _norm_words(c) for k in keys) for c in captions]))


def name_features(word_acts, words: Sequence[str], image_acts, image_ids: Sequence[str],
                  image_texts: Sequence[str] | None = None, feature_ids: Sequence[str] | None = None,
                  top_k: int = 10, agreement_k: int = 5, min_agreement: float = 0.5,
                  band: float = 0.1) -> FeatureTable:
    """The naming table from activations: ``word_acts`` [W, F] of the word list, ``image_acts`` [N, F]
    (SparseBatch or arrays), ranked by the values given (pass raw activations: ``name_model_features``).

    ``agreement_k`` top images and top words are compared (the paper shows ~5 of each); features that
    no word and no image activates are left out. ``feature_ids`` default to the activations' vocabulary
    (``f00012`` for Sparse CLIP) or ``f{index:05d}``."""
    words, image_ids = list(words), list(image_ids)
    n_feat = _n_features(word_acts)
    if _n_features(image_acts) != n_feat:
        raise ValueError(f"word activations have {n_feat} features, image activations {_n_features(image_acts)}")
    wtop, itop = TopActivations(n_feat, top_k), TopActivations(n_feat, top_k)
    for blk in _blocks(word_acts):
        wtop.add(blk)
    for blk in _blocks(image_acts):
        itop.add(blk)
    if feature_ids is None:
        vocab = getattr(image_acts, "vocab", None) or getattr(word_acts, "vocab", None)
        feature_ids = vocab.tokens if vocab is not None else None
    return _table(wtop, words, itop, image_ids, image_texts, feature_ids, agreement_k, min_agreement, band)


def _table(wtop: TopActivations, words: list[str], itop: TopActivations, image_ids: list[str],
           image_texts, feature_ids, agreement_k: int, min_agreement: float, band: float) -> FeatureTable:
    if wtop.n != len(words) or itop.n != len(image_ids):
        raise ValueError("one activation row per word and per image is required")
    if image_texts is not None and len(image_texts) != len(image_ids):
        raise ValueError("image_texts needs one caption per image")
    n_feat = wtop.vals.shape[1]
    if feature_ids is None:
        feature_ids = [f"f{i:05d}" for i in range(n_feat)]
    mi, mt = itop.mean_mass(), wtop.mean_mass()
    modality = np.divide(mi, mi + mt, out=np.full(n_feat, np.nan), where=(mi + mt) > 0)
    out = []
    for f in range(n_feat):
        wr, wv = wtop.top(f)
        ir, iv = itop.top(f)
        if not len(wr) and not len(ir):
            continue  # dead feature: nothing to name
        top_words = [(words[i], float(v)) for i, v in zip(wr, wv)]
        top_images = [(image_ids[i], float(v)) for i, v in zip(ir, iv)]
        caps = [image_texts[i] for i in ir] if image_texts is not None else []
        if image_texts is not None:
            agreement = caption_agreement([w for w, _ in top_words[:agreement_k]], caps[:agreement_k]) \
                if top_words and top_images else 0.0
            multimodal = bool(top_words and top_images and agreement >= min_agreement)
        else:
            agreement = None
            m = float(modality[f])
            multimodal = bool(top_words and top_images and band <= m <= 1 - band)
        out.append(FeatureName(str(feature_ids[f]), f, top_words[0][0] if top_words else "", top_words,
                               top_images, agreement, float(modality[f]), multimodal, caps))
    meta = {"words": len(words), "images": len(image_ids), "features": n_feat, "top_k": wtop.k,
            "agreement_k": agreement_k, "min_agreement": min_agreement, "activations": "raw"}
    return FeatureTable(out, meta)


# ------------------------------------------------------------------------------------ raw activations
def raw_text_blocks(model, texts: Sequence[str], batch_size: int = 256) -> Iterator[np.ndarray]:
    """[b, F] raw text activations per batch: the model's ``text_embed`` output (after the ReLU, before
    the L2 normalisation ``encode_text`` applies)."""
    import torch  # start-up: explain/ stays torch-free to import (the server uses it)

    model.eval()
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            ids, mask = model.tokenize(list(texts[s : s + batch_size]))
            yield model.text_embed(ids, mask).float().numpy()


def raw_image_blocks(model, grids, batch_size: int = 256) -> Iterator[np.ndarray]:
    """[b, F] raw image activations per batch of cached backbone grids (``image_embed``, unnormalised)."""
    import torch  # start-up: explain/ stays torch-free to import (the server uses it)

    model.eval()
    with torch.no_grad():
        for s in range(0, len(grids), batch_size):
            g = torch.as_tensor(np.asarray(grids[s : s + batch_size]), dtype=torch.float32)
            yield model.image_embed(g).float().numpy()


def name_model_features(model, words: Sequence[str], grids, image_ids: Sequence[str],
                        image_texts: Sequence[str] | None = None, top_k: int = 10, agreement_k: int = 5,
                        min_agreement: float = 0.5, band: float = 0.1, batch_size: int = 256) -> FeatureTable:
    """Name ``model``'s features from the raw activations of the word list and of cached image grids
    (paper Fig. 9), streamed in batches."""
    words, image_ids = list(words), list(image_ids)
    n_feat = len(model.vocab)
    wtop, itop = TopActivations(n_feat, top_k), TopActivations(n_feat, top_k)
    for blk in raw_text_blocks(model, words, batch_size):
        wtop.add(blk)
    for blk in raw_image_blocks(model, grids, batch_size):
        itop.add(blk)
    return _table(wtop, words, itop, image_ids, image_texts, model.vocab.tokens, agreement_k, min_agreement, band)
