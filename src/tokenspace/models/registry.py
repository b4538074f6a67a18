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


# families whose every weight comes from pretrained assets (no training step): a config name is usable
TRAINING_FREE = {"tagger"}


# the model `tokenspace serve` and `make demo` search with when none is named (models/<name>,
# benchmarks/release_model.py writes it)
DEFAULT_RELEASE = "tokenspace-stair-drawings"


def release_dirs() -> list[Path]:
    """Where release models (trained folders loadable by name) live: ``models/`` of a source checkout,
    then ``$TOKENSPACE_HOME/models``."""
    from tokenspace import assets

    repo = Path(__file__).resolve().parents[3] / "models"
    return [d for d in (repo, Path(assets.default_home()) / "models") if d.is_dir()]


def release_path(name: str) -> Path | None:
    for d in release_dirs():
        p = d / name
        if (p / "config.json").is_file():
            return p
    return None


def list_releases() -> list[str]:
    return sorted({p.parent.name for d in release_dirs() for p in d.glob("*/config.json")})


def load(path_or_name: str | Path, pretrained: bool | None = None) -> DualEncoder:
    """A trained model: a saved folder (``save_pretrained``) or a release name (``list_releases()``).

    A config name (``list_models()``: ``"stair-emoji"``) is an architecture whose heads are untrained;
    it loads only with ``pretrained=False`` said explicitly (as open_clip's
    ``create_model(name, pretrained=None)``), so nobody decodes noise by mistake. Training-free families
    (the tagger) take their weights from the asset cache and load by config name as they are.
    """
    if pretrained not in (None, True, False):
        raise TypeError(f"pretrained must be True, False or None, got {pretrained!r}")
    p = Path(path_or_name)
    if p.is_dir():
        if pretrained is False:
            raise ValueError(f"{p} is a trained model folder; pretrained=False takes a config name")
        return DualEncoder.from_pretrained(p)
    if len(p.parts) > 1 and p.suffix != ".json":
        raise FileNotFoundError(f"no model folder at {p}")
    release = release_path(str(path_or_name)) if p.name == str(path_or_name) else None
    if release is not None:
        if pretrained is not False:
            return DualEncoder.from_pretrained(release)
        config = ModelConfig.load(release / "config.json")  # its architecture, fresh
        config.vocab = str(release / config.vocab) if config.vocab else None
        return build_model(config)
    config = ModelConfig.load(str(path_or_name))  # KeyError naming the known configs
    if pretrained is False or config.family in TRAINING_FREE:
        return build_model(config)
    releases = list_releases()
    raise ValueError(
        f"{str(path_or_name)!r} is a model architecture (config), not trained weights: its heads are "
        f"untrained and would encode noise. Load a trained model folder"
        + (f" or a release model ({', '.join(releases)})" if releases else "")
        + f", or pass pretrained=False for the untrained architecture "
        f"(tokenspace.load({str(path_or_name)!r}, pretrained=False))")


def list_models() -> list[str]:
    """Config names (architectures); trained models by name are ``list_releases()``."""
    return list_configs()
