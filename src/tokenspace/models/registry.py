"""One factory from a config name, a config path or a saved folder to a model."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors import SafetensorError
from safetensors.torch import load_model

from tokenspace.models.config import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    ModelConfig,
    list_configs,
)
from tokenspace.models.options import FAMILY_OPTIONS
from tokenspace.models.releases import DEFAULT_RELEASE, list_releases, release_dirs, release_path  # noqa: F401
from tokenspace.models.towers import (
    light_text_towers,
    load_by_name,
    qualified_name,
    resolve_weights,
    skip_init,
)
from tokenspace.vocab import Vocabulary

if TYPE_CHECKING:  # pragma: no cover
    from tokenspace.models.dual import DualEncoder

# family name -> "module:Class", imported by name when a model of the family is built (as transformers'
# auto classes do): the families import this module (DualEncoder.from_pretrained), never the reverse
FAMILIES: dict[str, type[DualEncoder] | str] = {
    "stair": "tokenspace.models.stair:StairModel",
    "dense": "tokenspace.models.dense:DenseModel",
    "sparse-clip": "tokenspace.models.sparse_clip:SparseClipModel",
    "visualsparta": "tokenspace.models.visualsparta:VisualSpartaModel",
    "tagger": "tokenspace.models.tagger:TaggerModel",  # training-free, from the backbone's ImageNet classifier
    "fused": "tokenspace.models.fused:FusedModel",  # trained / training-free parts summed (the release)
    "sparsified": "tokenspace.models.sparsified:SparsifiedModel",  # a sparse head on a frozen dense model
    # the base model's image side, queries from a stored per-token weight (no text network)
    "inference-free": "tokenspace.models.inference_free:InferenceFreeModel",
}


def register_family(name: str, cls: type[DualEncoder]) -> None:
    """Add a family; its configs' ``extra`` is then checked against ``cls.Options`` (models/options.py)."""
    if name in FAMILIES and FAMILIES[name] is not cls and FAMILIES[name] != qualified_name(cls):
        raise ValueError(f"model family {name!r} already registered")
    FAMILIES[name] = cls
    FAMILY_OPTIONS[name] = cls.Options


def family_class(name: str) -> type[DualEncoder]:
    """The model class of a family, imported on first use."""
    if name not in FAMILIES:
        raise KeyError(f"unknown model family {name!r}; known: {sorted(FAMILIES)}")
    cls = FAMILIES[name]
    if isinstance(cls, str):
        cls = FAMILIES[name] = load_by_name(cls)
    return cls


def load_vocab(ref: str) -> Vocabulary:
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
    cls = family_class(config.family)
    # the family names its output dimensions (Sparse CLIP: latent features f00000..); `vocab` tokenizes
    return cls(config, cls.output_vocabulary(config, vocab), tokenizer_vocab=vocab)


def inner_model(ref: str | dict, vocab: Vocabulary) -> DualEncoder:
    """A model inside another model (a fused model's parts, a sparsified model's dense base).

    ``ref`` is a trained model folder or release name (a config being built: loaded with its weights)
    or, in a saved folder, the inner model's portable config as a dict: built empty here, its weights
    arrive with the outer model's (its submodule's keys in the outer model.safetensors), so a saved
    folder needs nothing but its own files. ``vocab`` is the outer model's tokenizer vocabulary."""
    if isinstance(ref, dict):
        config = ModelConfig.from_dict({**ref, "vocab": None})
        return build_model(config, vocab=vocab)
    return load(ref)


# families whose every weight comes from pretrained assets (no training step): a config name is usable
TRAINING_FREE = {"tagger", "fused"}  # fused: its parts come trained



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
        return from_pretrained(p)
    if len(p.parts) > 1 and p.suffix != ".json":
        raise FileNotFoundError(f"no model folder at {p}")
    release = release_path(str(path_or_name)) if p.name == str(path_or_name) else None
    if release is not None:
        if pretrained is not False:
            return from_pretrained(release)
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


def from_pretrained(path: str | os.PathLike) -> DualEncoder:
    """A saved model folder (``save_pretrained``) -> the model, its weights loaded, in eval mode
    (``DualEncoder.from_pretrained``: the family comes from the folder's config)."""
    path = Path(path)
    if not (path / CONFIG_FILE).exists() or not (path / WEIGHTS_FILE).exists():
        raise FileNotFoundError(f"{path} is not a tokenspace model folder (needs {CONFIG_FILE}, {WEIGHTS_FILE})")
    config = ModelConfig.load(path / CONFIG_FILE)
    # the shipped tokenizer.json when there is one (Tokenizer.from_file), else the vocabulary
    config.vocab = str(path / (TOKENIZER_FILE if (path / TOKENIZER_FILE).exists() else VOCAB_FILE))
    # the weights follow: no transformers BERT (seconds to import), no random initialisation (overwritten)
    with light_text_towers(), skip_init():
        model = build_model(config)
    weights = path / WEIGHTS_FILE
    try:
        missing, unexpected = load_model(model, str(weights), strict=False)
    except SafetensorError as e:  # the bare "invalid header length" names no file
        raise ValueError(f"{weights}: not a readable safetensors file (truncated or damaged): {e}") from None
    except RuntimeError as e:  # load_state_dict's size mismatches, several lines long
        raise ValueError(f"{weights}: weights do not match {path / CONFIG_FILE}: "
                         f"{' '.join(str(e).split())[:300]}") from None
    if missing or unexpected:
        raise ValueError(f"{path}: weights do not match the config (missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]})")
    model.eval()
    return model


def list_models() -> list[str]:
    """Config names (architectures); trained models by name are ``list_releases()``."""
    return list_configs()
