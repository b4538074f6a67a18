"""Per-family model options: the typed form of ``ModelConfig.extra``.

Each family declares its options as a small frozen dataclass; ``ModelConfig`` parses ``extra`` into it
when the config is built or loaded, so a misspelt key is an error naming the family and its known
options instead of an option silently left at its default:

    unknown option 'relu_' for family sparse-clip (known: relu, topk, l1, text_pooling); did you mean 'relu'?

``extra`` stays a plain dict in config.json (saved folders keep their format); models read
``config.options``. Checks that need the built model (a width, a vocabulary) stay in the model.
This module is plain Python (no torch): configs validate without importing a model.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import ClassVar


def check_keys(given, known, where: str) -> None:
    """ValueError naming every unknown key of ``given``, the known ones and the closest match."""
    known = list(known)
    unknown = [k for k in given if k not in known]
    if not unknown:
        return
    names = ", ".join(repr(k) for k in unknown)
    msg = f"unknown option{'s' if len(unknown) > 1 else ''} {names} for {where} (known: {', '.join(known)})"
    close = difflib.get_close_matches(str(unknown[0]), known, n=1)
    raise ValueError(msg + (f"; did you mean {close[0]!r}?" if close else ""))


def _number(value, name: str, kind=float, allow_none: bool = False):
    """``value`` as an int or float (YAML and JSON give 1 for 1.0); bools and strings are refused."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"option {name} must be a number, not {value!r}")
    if kind is int and value != int(value):
        raise ValueError(f"option {name} must be an integer, not {value!r}")
    return kind(value)


@dataclass(frozen=True)
class FamilyOptions:
    """Options of a family that has none: any key in ``extra`` is unknown (dense, and the default for a
    family registered without its own options class)."""

    family: ClassVar[str] = ""

    @classmethod
    def parse(cls, extra: dict | None, family: str | None = None) -> FamilyOptions:
        extra = dict(extra or {})
        check_keys(extra, [f.name for f in fields(cls)], f"family {family or cls.family}")
        return cls(**extra)

    def _set(self, name: str, value) -> None:  # frozen: coercion in __post_init__ only
        object.__setattr__(self, name, value)


def _top_n(value, name: str) -> int | None:
    """A top-n pruning option: a positive int, or None to keep every token (0 would read as "keep none")."""
    n = _number(value, name, int, allow_none=True)
    if n is not None and n < 1:
        raise ValueError(f"option {name} must be a positive integer or null, not {n}")
    return n


@dataclass(frozen=True)
class StairOptions(FamilyOptions):
    """STAIR's image head (all off by default: the paper's head). Why stair-emoji turns
    image_revive_grad on: docs/results.md, "STAIR head options"."""

    family: ClassVar[str] = "stair"
    # TRANSFORM = FC(C->N) + GELU + FC(N->H) + GELU + LayerNorm: a wider first layer before the tie to
    # the H-wide word embeddings (None or 0: the paper's FC + GELU + LayerNorm)
    image_head_mid: int | None = None
    image_bias_init: str | float = "mlm"  # "mlm" (the text MLM bias, a token prior) | a constant
    # dead image tokens get this times the gradient that would raise them (pooling.log1p_relu)
    image_revive_grad: float = 0.0
    # top-n pruning of encoded rows (VisualSparta's Table 3, not in STAIR): encode_* keep each image's /
    # text's n heaviest tokens before normalising; training and the losses see the whole vector. None: all
    image_top_n: int | None = None
    text_top_n: int | None = None

    def __post_init__(self):
        self._set("image_head_mid", _number(self.image_head_mid, "image_head_mid", int, allow_none=True) or None)
        if self.image_bias_init != "mlm":
            if isinstance(self.image_bias_init, str):
                raise ValueError(f"image_bias_init must be 'mlm' or a number, not {self.image_bias_init!r}")
            self._set("image_bias_init", _number(self.image_bias_init, "image_bias_init"))
        self._set("image_revive_grad", _number(self.image_revive_grad, "image_revive_grad"))
        if self.image_revive_grad < 0:
            raise ValueError(f"image_revive_grad must be >= 0, not {self.image_revive_grad}")
        for name in ("image_top_n", "text_top_n"):
            self._set(name, _top_n(getattr(self, name), name))


TEXT_POOLINGS = ("mean", "eos")


@dataclass(frozen=True)
class SparseClipOptions(FamilyOptions):
    """Sparse CLIP's activation and penalty (models/sparse_clip.py explains each)."""

    family: ClassVar[str] = "sparse-clip"
    relu: bool = True  # false: the signed, dense arm of the paper's Fig. 2a
    topk: int | None = None  # keep each row's K largest pre-activations, then the ReLU (Fig. 2b)
    l1: float = 0.0  # L1 weight on the L2-normalised rows (Fig. 2b's other arm)
    text_pooling: str = "mean"  # mean | eos

    def __post_init__(self):
        if not isinstance(self.relu, bool):
            raise ValueError(f"option relu must be true or false, not {self.relu!r}")
        if self.topk is not None and (isinstance(self.topk, bool) or not isinstance(self.topk, int)):
            raise ValueError(f"extra.topk must be an integer, got {self.topk!r}")
        if self.topk is not None and not self.relu:
            raise ValueError("extra.topk keeps the ReLU after the top-K (non-negative features): drop relu: false")
        self._set("l1", _number(self.l1, "l1"))
        if self.l1 < 0:
            raise ValueError(f"extra.l1 must be >= 0, got {self.l1}")
        if self.text_pooling not in TEXT_POOLINGS:
            raise ValueError(f"extra.text_pooling must be one of {TEXT_POOLINGS}, got {self.text_pooling!r}")


# VisualSparta's extra.label_fragments (models/label_fragments.py); n_classes: set by a saved folder
LABEL_FRAGMENT_KEYS = ("classes", "classifier", "k", "max_label_tokens", "n_classes")


@dataclass(frozen=True)
class VisualSpartaOptions(FamilyOptions):
    """VisualSparta's fragment encoder and index-time pruning (models/visualsparta.py)."""

    family: ClassVar[str] = "visualsparta"
    layers: int = 2
    heads: int = 2
    ffn: int | None = None  # None: 4 x the word-embedding width
    dropout: float = 0.1
    max_cells: int = 64  # position embeddings: the largest grid the model takes
    bias_init: float = 0.0  # eq. 11's b
    top_n: int | None = None  # index rows keep their n heaviest terms (paper Table 3); None keeps all
    label_fragments: dict | None = None  # eqs. 6-7 from the backbone's classifier; off unless set

    def __post_init__(self):
        for name in ("layers", "heads", "max_cells"):
            self._set(name, _number(getattr(self, name), name, int))
        self._set("ffn", _number(self.ffn, "ffn", int, allow_none=True))
        self._set("top_n", _top_n(self.top_n, "top_n"))
        self._set("dropout", _number(self.dropout, "dropout"))
        self._set("bias_init", _number(self.bias_init, "bias_init"))
        if self.label_fragments:
            if not isinstance(self.label_fragments, dict):
                raise ValueError(f"extra.label_fragments must be a mapping, not {self.label_fragments!r}")
            check_keys(self.label_fragments, LABEL_FRAGMENT_KEYS, "visualsparta extra.label_fragments")


TAGGER_POOLS = ("cells", "image", "both")
TAGGER_TEXT_SIDES = ("splade", "bag")


@dataclass(frozen=True)
class TaggerOptions(FamilyOptions):
    """The training-free tagger (models/tagger.py explains each)."""

    family: ClassVar[str] = "tagger"
    classes: str | None = None  # wnids in classifier order (None in a saved folder)
    wordnet: str | None = None  # WordNet dict folder (hypernyms); None: level 0 only
    classifier: str | None = None  # where the classifier head is read from
    hypernym_levels: int = 2
    hypernym_decay: float = 1.0
    # a word held only as word pieces gives its pieces at this weight: a class's own name / a hypernym's
    # (models/classwords.token_table; 1 and 1: the first tagger's rule)
    name_pieces: float = 1.0
    hypernym_pieces: float = 1.0
    specificity: float = 0.0  # weights times (log(N / df) / log(N)) ** specificity; 0: off
    pool: str = "cells"  # cells | image | both
    top_classes: int = 5
    scale: float = 1.0
    text: str = "splade"  # splade | bag
    table_tokens: int | None = None  # set on save: how many tokens the class table covers
    n_classes: int | None = None  # set on save

    def __post_init__(self):
        self._set("hypernym_levels", _number(self.hypernym_levels, "hypernym_levels", int))
        self._set("hypernym_decay", _number(self.hypernym_decay, "hypernym_decay"))
        for name in ("name_pieces", "hypernym_pieces", "specificity"):
            self._set(name, _number(getattr(self, name), name))
        if not (0 <= self.name_pieces <= 1 and 0 <= self.hypernym_pieces <= 1) or self.specificity < 0:
            raise ValueError("tagger name_pieces and hypernym_pieces must be in [0, 1], specificity >= 0")
        self._set("top_classes", _number(self.top_classes, "top_classes", int))
        self._set("scale", _number(self.scale, "scale"))
        if self.pool not in TAGGER_POOLS:
            raise ValueError(f"tagger pool must be one of {TAGGER_POOLS}, not {self.pool!r}")
        if self.text not in TAGGER_TEXT_SIDES:
            raise ValueError(f"tagger text must be one of {TAGGER_TEXT_SIDES}, not {self.text!r}")
        if self.top_classes < 1 or self.scale <= 0:
            raise ValueError("tagger top_classes must be >= 1 and scale > 0")


@dataclass(frozen=True)
class DenseOptions(FamilyOptions):
    family: ClassVar[str] = "dense"


@dataclass(frozen=True)
class FusedOptions(FamilyOptions):
    """A fused model (models/fused.py): trained or training-free parts over one vocabulary, summed.

    ``parts``: [{"model": a model folder, release or training-free config name (a config being built) or
    the part's portable config (a saved folder), "image": weight, "text": weight, "image_size": px or
    null (the fused tower's), "image_pieces": false to drop lone word pieces (``##x``) from the part's image
    rows (default true)}]; a part with text weight 0 adds nothing to the text side. ``anchor``:
    weight of the bag of the text's own content word pieces (lexical anchoring, not in any of the three
    papers). Top-n: as STAIR's, after fusing."""

    family: ClassVar[str] = "fused"
    parts: tuple = ()
    anchor: float = 0.0
    image_top_n: int | None = None
    text_top_n: int | None = None
    # query expansion that stays on topic (models/query_filter.py): an expanded token is kept only when it
    # is no query hub and its relatedness to one of the query's own words is at least ``related_min``
    # (None: expansion as the parts give it). ``related_dim``: the width of the stored token vectors
    related_min: float | None = None
    related_dim: int = 64
    # [low, high]: the image side's gate (models/fused.py). A part that knows how sure it is of a picture
    # (the tagger: its classifier's top probability c) takes over as c rises from low to high; the other
    # parts' image weights are scaled by 1 - clamp((c - low) / (high - low), 0, 1). None: no gate
    gate: tuple | None = None

    def __post_init__(self):
        parts = self.parts
        if not isinstance(parts, (list, tuple)) or not parts:
            raise ValueError("fused parts must be a non-empty list of {model, image, text}")
        checked = []
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ValueError(f"fused part {i} must be a mapping {{model, image, text}}, not {part!r}")
            check_keys(part, ("model", "image", "text", "image_size", "image_pieces"), f"fused part {i}")
            if not isinstance(part.get("model"), (str, dict)):
                raise ValueError(f"fused part {i} needs model: a model folder, release or config name")
            w = {k: _number(part.get(k, 1.0), f"parts[{i}].{k}") for k in ("image", "text")}
            if min(w.values()) < 0:
                raise ValueError(f"fused part {i}: weights must be >= 0, not {w}")
            size = _number(part.get("image_size"), f"parts[{i}].image_size", int, allow_none=True)
            if size is not None and size < 1:
                raise ValueError(f"fused part {i}: image_size must be a positive integer, not {size}")
            pieces = part.get("image_pieces", True)
            if not isinstance(pieces, bool):
                raise ValueError(f"fused part {i}: image_pieces must be true or false, not {pieces!r}")
            checked.append({"model": part["model"], **w, "image_size": size, "image_pieces": pieces})
        self._set("parts", tuple(checked))
        self._set("anchor", _number(self.anchor, "anchor"))
        self._set("related_min", _number(self.related_min, "related_min", allow_none=True))
        self._set("related_dim", _number(self.related_dim, "related_dim", int))
        if self.related_dim < 1:
            raise ValueError(f"option related_dim must be a positive integer, not {self.related_dim}")
        if self.gate is not None:
            if not isinstance(self.gate, (list, tuple)) or len(self.gate) != 2:
                raise ValueError(f"option gate must be [low, high], not {self.gate!r}")
            low, high = (_number(x, "gate") for x in self.gate)
            if not 0 <= low < high <= 1:
                raise ValueError(f"option gate needs 0 <= low < high <= 1, not {self.gate!r}")
            self._set("gate", (low, high))
        if self.anchor < 0:
            raise ValueError(f"option anchor must be >= 0, not {self.anchor}")
        for name in ("image_top_n", "text_top_n"):
            self._set(name, _top_n(getattr(self, name), name))


@dataclass(frozen=True)
class SparsifiedOptions(FamilyOptions):
    """A sparse head trained on a frozen dense model's embeddings (models/sparsified.py explains each).

    ``dense``: the dense model, a trained model folder or release name (a config being built: loaded with
    its weights) or its portable config (a saved folder: its weights are in the folder's own file)."""

    family: ClassVar[str] = "sparsified"
    dense: str | dict | None = None
    init_active: float = 0.01  # the fraction of (emitted) tokens active per row once the head is calibrated
    revive_grad: float = 0.0  # dead tokens get this times the gradient that would raise them (both sides)
    image_top_n: int | None = None  # encode_* only, as STAIR's
    text_top_n: int | None = None

    def __post_init__(self):
        if self.dense is not None and (not isinstance(self.dense, (str, dict)) or not self.dense):
            raise ValueError(f"option dense must be a dense model folder or release name, not {self.dense!r}")
        self._set("init_active", _number(self.init_active, "init_active"))
        if not 0 < self.init_active < 1:
            raise ValueError(f"option init_active must be a fraction in (0, 1), not {self.init_active}")
        self._set("revive_grad", _number(self.revive_grad, "revive_grad"))
        if self.revive_grad < 0:
            raise ValueError(f"option revive_grad must be >= 0, not {self.revive_grad}")
        for name in ("image_top_n", "text_top_n"):
            self._set(name, _top_n(getattr(self, name), name))


# family name -> its options class. registry.register_family adds a new family's (its model class's
# ``Options``), so every family known to the registry validates its config's extra
FAMILY_OPTIONS: dict[str, type[FamilyOptions]] = {
    c.family: c for c in (StairOptions, DenseOptions, SparseClipOptions, VisualSpartaOptions, TaggerOptions,
                          FusedOptions, SparsifiedOptions)
}


def parse_options(family: str, extra: dict | None) -> FamilyOptions:
    """``extra`` of a config of ``family`` as that family's typed options (ValueError on unknown keys)."""
    if family not in FAMILY_OPTIONS:
        raise KeyError(f"unknown model family {family!r}; known: {sorted(FAMILY_OPTIONS)}")
    return FAMILY_OPTIONS[family].parse(extra, family)
