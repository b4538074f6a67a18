"""Feature naming for latent sparse features (Sparse CLIP Sec. 3.2, Fig. 4): what activates each feature.

Sparse CLIP's dimensions are learned, not tokens. They keep stable ids (``f00012``, from
``Vocabulary.latent``) and get a *naming table*: for every feature, the words of a concept
vocabulary and the images of a collection that activate it most. The paper builds the vocabulary from
the first lemma of every WordNet synset plus common English words; here that is the Debian
``wordnet-base`` package (asset ``wordnet``) plus the whole-word entries of the BERT vocabulary, which
is frequency-ordered after its special and single-character entries.

A feature is **multimodal** when its two lists agree: with captions for the images, when at least
``min_agreement`` of its top images have a caption that contains one of its top words. Without
captions, agreement cannot be judged from the lists alone; the fallback is the paper's modality score
(share of the feature's activation mass from images, vs the word list) inside [band, 1 - band].

Works on any SparseBatch activations (STAIR tokens too); ``name_model_features`` encodes them.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tokenspace.sparse import SparseBatch

WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_WORD = re.compile(r"[a-z]+")


# ------------------------------------------------------------------------------------ word lists
def wordnet_lemmas(root: str | os.PathLike | None = None) -> list[str]:
    """The first lemma of every WordNet synset (paper: "the first word from each synonym set"),
    lowercased, underscores as spaces, adjective markers like ``(p)`` removed, deduplicated in file
    order. ``root`` defaults to the ``wordnet`` asset (a link to /usr/share/wordnet)."""
    if root is None:
        from tokenspace import assets

        root = assets.path("wordnet")
    root = Path(root)
    missing = [f for f in WORDNET_FILES if not (root / f).exists()]
    if missing:
        raise FileNotFoundError(f"{root}: no WordNet data files {missing} (apt-get install wordnet-base)")
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
    """Whole-word alphabetic entries of a WordPiece vocabulary, in vocabulary (≈ frequency) order."""
    out = [t for t in vocab.tokens if len(t) >= min_len and t.isascii() and t.isalpha()]
    return out[:limit] if limit else out


def concept_vocabulary(tokenizer_vocab=None, wordnet_root=None, common_limit: int | None = 20000,
                       wordnet: bool = True) -> list[str]:
    """Common words first, then WordNet lemmas (when installed), deduplicated: the naming word list."""
    words: dict[str, None] = {}
    if tokenizer_vocab is not None:
        words.update(dict.fromkeys(common_words(tokenizer_vocab, common_limit)))
    if wordnet:
        try:
            words.update(dict.fromkeys(wordnet_lemmas(wordnet_root)))
        except FileNotFoundError:
            if not words:
                raise
    if not words:
        raise ValueError("no word source: pass a tokenizer vocabulary or install WordNet")
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
            tmp = folder / (name + ".tmp")
            tmp.write_text(text)
            os.replace(tmp, folder / name)
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
def _columns(acts) -> sp.csc_matrix:
    """[rows, features] activations (SparseBatch or array) -> CSC, so a feature's rows are one slice."""
    m = acts.to_scipy() if isinstance(acts, SparseBatch) else sp.csr_matrix(np.clip(np.asarray(acts, np.float32), 0, None))
    m = m.tocsc()
    m.eliminate_zeros()
    return m


def _top(col: sp.csc_matrix, f: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = col.indptr[f], col.indptr[f + 1]
    rows, vals = col.indices[a:b], col.data[a:b]
    keep = vals > 0
    rows, vals = rows[keep], vals[keep]
    if len(vals) > k:
        part = np.argpartition(-vals, k - 1)[:k]
        rows, vals = rows[part], vals[part]
    order = np.lexsort((rows, -vals))  # heaviest first; ties by row: deterministic
    return rows[order], vals[order]


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
    """The naming table from activations: ``word_acts`` [W, F] of the word list, ``image_acts`` [N, F].

    ``agreement_k`` top images and top words are compared (the paper shows ~5 of each); features that
    no word and no image activates are left out. ``feature_ids`` default to the activations' vocabulary
    (``f00012`` for Sparse CLIP) or ``f{index:05d}``."""
    from tokenspace.eval.features import modality_scores

    words, image_ids = list(words), list(image_ids)
    wc, ic = _columns(word_acts), _columns(image_acts)
    if wc.shape[0] != len(words) or ic.shape[0] != len(image_ids):
        raise ValueError("one activation row per word and per image is required")
    if wc.shape[1] != ic.shape[1]:
        raise ValueError(f"word activations have {wc.shape[1]} features, image activations {ic.shape[1]}")
    if image_texts is not None and len(image_texts) != len(image_ids):
        raise ValueError("image_texts needs one caption per image")
    n_feat = wc.shape[1]
    if feature_ids is None:
        vocab = getattr(image_acts, "vocab", None) or getattr(word_acts, "vocab", None)
        feature_ids = vocab.tokens if vocab is not None else [f"f{i:05d}" for i in range(n_feat)]
    modality, _ = modality_scores(SparseBatch.from_scipy(ic.tocsr()), SparseBatch.from_scipy(wc.tocsr()))
    out = []
    for f in range(n_feat):
        wr, wv = _top(wc, f, top_k)
        ir, iv = _top(ic, f, top_k)
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
    meta = {"words": len(words), "images": len(image_ids), "features": n_feat, "top_k": top_k,
            "agreement_k": agreement_k, "min_agreement": min_agreement}
    return FeatureTable(out, meta)


def name_model_features(model, words: Sequence[str], grids, image_ids: Sequence[str],
                        image_texts: Sequence[str] | None = None, **kw) -> FeatureTable:
    """Encode the word list and cached image grids with ``model`` and name its features."""
    word_acts = model.encode_texts(list(words))
    image_acts = model.encode_image_grids(grids)
    return name_features(word_acts, words, image_acts, image_ids, image_texts, **kw)
