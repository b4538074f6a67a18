"""One factory from a config name, a config path or a saved folder to a model."""
from __future__ import annotations

from pathlib import Path

from tokenspace.models.config import ModelConfig, list_configs
from tokenspace.models.dense import DenseModel
from tokenspace.models.dual import DualEncoder
from tokenspace.models.sparse_clip import SparseClipModel
from tokenspace.models.stair import StairModel
from tokenspace.models.tagger import TaggerModel
from tokenspace.models.visualsparta import VisualSpartaModel
from tokenspace.vocab import Vocabulary

FAMILIES: dict[str, type[DualEncoder]] = {
    "stair": StairModel,
    "dense": DenseModel,
    "sparse-clip": SparseClipModel,
    "visualsparta": VisualSpartaModel,
    "tagger": TaggerModel,  # training-free, from the backbone's ImageNet classifier
}


def register_family(name: str, cls: type[DualEncoder]) -> None:
    if name in FAMILIES and FAMILIES[name] is not cls:
        raise ValueError(f"model family {name!r} already registered")
    FAMILIES[name] = cls


def load_vocab(ref: str) -> Vocabulary:
    from tokenspace.models.towers import resolve_weights

    path = resolve_weights(ref)
    if path.is_dir():
        for name in ("vocab.txt", "tokenizer.json"):
            if (path / name).exists():
                return Vocabulary.from_file(path / name)
        raise FileNotFoundError(f"no vocab.txt or tokenizer.json in {path}")
    return Vocabulary.from_file(path)


def build_model(config: ModelConfig | str, vocab: Vocabulary | None = None) -> DualEncoder:
    """Build a model from a config (object, registry name or JSON path); ``vocab`` overrides the
    config's vocabulary (tests pass tiny ones)."""
    if not isinstance(config, ModelConfig):
        config = ModelConfig.load(config)
    if config.family not in FAMILIES:
        raise KeyError(f"unknown model family {config.family!r}; known: {sorted(FAMILIES)}")
    if vocab is None:
        if config.vocab is None:
            raise ValueError(f"config {config.name!r} names no vocabulary")
        vocab = load_vocab(config.vocab)
    cls = FAMILIES[config.family]
    if config.family == "sparse-clip":
        return cls(config, Vocabulary.latent(config.embed_dim * config.expansion), tokenizer_vocab=vocab)
    return cls(config, vocab)


def load(path_or_name: str | Path) -> DualEncoder:
    """A trained model folder (``save_pretrained``) or, failing that, a fresh model from a config."""
    p = Path(path_or_name)
    if p.is_dir():
        return DualEncoder.from_pretrained(p)
    return build_model(str(path_or_name))


def list_models() -> list[str]:
    return list_configs()
