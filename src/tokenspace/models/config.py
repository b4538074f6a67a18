"""Model configuration: a small JSON file <-> dataclass. A saved model folder carries its own config."""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from tokenspace.models.options import FAMILY_OPTIONS, FamilyOptions, parse_options

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "models"

# the files of a saved model folder (DualEncoder.save_pretrained / registry.from_pretrained)
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"


# the integer fields: (key, least value, what it counts); head_hidden may also be null
INT_FIELDS = (("max_text_len", 3, "text tokens with [CLS] and [SEP]: room for one word piece at least"),
              ("embed_dim", 1, "the dense width"), ("expansion", 1, "Sparse CLIP's width multiplier"),
              ("head_hidden", 1, "the image transform's width, or null for the text hidden size"))


@dataclass
class ModelConfig:
    name: str
    family: str  # key of tokenspace.models.registry.FAMILIES: stair | dense | sparse-clip | visualsparta
    image_tower: dict  # {"type": <IMAGE_TOWERS key>, ...kwargs}
    text_tower: dict  # {"type": <TEXT_TOWERS key>, ...kwargs}
    # Vocabulary of the token space: vocab.txt / tokenizer.json path or asset:NAME. Latent-feature models
    # (Sparse CLIP) name their features f00000.. instead and leave this None.
    vocab: str | None = None
    embed_dim: int = 512  # dense width (dense baseline; base width Sparse CLIP expands)
    expansion: int = 1  # Sparse CLIP: latent width = embed_dim * expansion
    head_hidden: int | None = None  # width of the image TRANSFORM (defaults to the text hidden size)
    max_text_len: int = 32
    image_pool: str = "max"  # max (STAIR) | mean
    logit_scale_init: float = 1 / 0.07  # CLIP's initial temperature
    logit_scale_max: float = 100.0  # cap on the logit scale: Sparse CLIP's sparsity knob
    # family-specific options, typed and checked by the family's options class (models/options.py):
    # a key the family does not know is an error here, not an option silently left at its default
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for key, kind in (("name", str), ("family", str), ("image_tower", dict), ("text_tower", dict),
                          ("extra", dict)):
            if not isinstance(getattr(self, key), kind):
                raise ValueError(f"{key}: expected {json_kind(kind())}, not {json_kind(getattr(self, key))}")
        if self.vocab is not None and not isinstance(self.vocab, str):
            raise ValueError(f"vocab: expected a string (a vocab.txt path or asset:NAME) or null, not "
                             f"{json_kind(self.vocab)}")
        # sizes: a negative one reached the tokenizer or torch and failed there, in their words ("can't
        # convert negative int to unsigned")
        for key, least, meaning in INT_FIELDS:
            value = getattr(self, key)
            if value is None and key == "head_hidden":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                shown = json.dumps(value) if isinstance(value, (int, float, str, bool)) or value is None else json_kind(value)
                raise ValueError(f"{key}: expected an integer >= {least} ({meaning}), got {shown}")
        if self.logit_scale_init <= 0 or self.logit_scale_max <= 0:
            raise ValueError("logit scales must be positive")
        if self.logit_scale_init > self.logit_scale_max:
            raise ValueError("logit_scale_init exceeds logit_scale_max")
        if not (math.isfinite(self.logit_scale_init) and math.isfinite(self.logit_scale_max)):
            raise ValueError("logit scales must be finite numbers")
        if self.image_pool not in ("max", "mean"):
            raise ValueError("image_pool must be 'max' or 'mean'")
        if self.family in FAMILY_OPTIONS:  # an unknown family is refused by the registry, which names them
            parse_options(self.family, self.extra)

    @property
    def options(self) -> FamilyOptions:
        """``extra`` as the family's typed options (parsed on each read: ``extra`` may be reassigned)."""
        return parse_options(self.family, self.extra)

    @property
    def log_logit_scale_max(self) -> float:
        return math.log(self.logit_scale_max)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        if not isinstance(d, dict):  # a damaged or foreign config.json: [] would fail on .items() below
            raise ValueError(f"expected a JSON object (the model config's fields), not {json_kind(d)}")
        # a saved folder's config.json also says what it holds for hub tooling (models/card.py)
        d = {k: v for k, v in d.items() if k not in ("model_type", "architectures", "tokenspace_version")}
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        missing = missing_fields(cls, d)
        if missing:  # named here: the dataclass's TypeError names neither the file nor the keys' meaning
            raise ValueError(f"missing model config keys: {missing}")
        return cls(**d)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, name_or_path: str | Path) -> "ModelConfig":
        """A config by registry name (``list_configs()``) or a path to a JSON file."""
        p = Path(name_or_path)
        if not p.suffix == ".json":
            p = CONFIG_DIR / f"{name_or_path}.json"
            if not p.exists():
                raise KeyError(f"unknown model config {name_or_path!r}; known: {list_configs()}")
        try:
            return cls.from_dict(json.loads(p.read_text()))
        except (ValueError, TypeError) as e:  # which file: the message alone does not say where the typo is
            # (TypeError: a field of the wrong type, e.g. "logit_scale_init": "x", failing a comparison)
            raise ValueError(f"{p}: {e}") from e


def missing_fields(cls, given) -> list[str]:
    """The fields of dataclass ``cls`` without a default that ``given`` (a mapping) lacks."""
    return [f.name for f in fields(cls)
            if f.name not in given and f.default is MISSING and f.default_factory is MISSING]


def json_kind(value) -> str:
    """What a JSON value is, in JSON's words: "an array", "null" (for messages about a file's content)."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def list_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))
