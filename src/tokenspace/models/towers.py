"""Feature extraction networks f(.): image towers give a feature grid, text towers a token sequence.

Towers are built by name through explicit registries (no substring matching). Pretrained weights are
referenced as ``asset:NAME`` (resolved in the offline asset cache) or a local path; nothing here
downloads.
"""
from __future__ import annotations

import importlib
import json
import logging
import threading
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from tokenspace import assets
from tokenspace.models import light_bert  # plain torch: a saved folder's BERT without transformers

log = logging.getLogger(__name__)

# name -> class, or "module:Class" for a tower living in its own file: imported by name on first use
# (as transformers' auto classes do), so this module imports none of them and they all import it
IMAGE_TOWERS: dict[str, Callable[..., nn.Module] | str] = {
    "vit": "tokenspace.models.hf_towers:ViTTower",
    "hf-clip-vision": "tokenspace.models.hf_towers:HFClipVisionTower",
    "open-clip-vision": "tokenspace.models.openclip_towers:OpenClipVisionTower",
}
TEXT_TOWERS: dict[str, Callable[..., nn.Module] | str] = {
    "hf-clip-text": "tokenspace.models.hf_towers:HFClipTextTower",
    "open-clip-text": "tokenspace.models.openclip_towers:OpenClipTextTower",
    "transformer-mlm": "tokenspace.models.text_transformer:TransformerMLMTower",
    "bag-of-tokens": "tokenspace.models.tagger:BagOfTokensTower",
}


def qualified_name(cls) -> str:
    """``module:Class``: how a registry names a member it loads lazily."""
    return f"{cls.__module__}:{cls.__qualname__}"


def load_by_name(ref: str):
    """``"module:Class"`` -> the class, importing its module (a registry entry not loaded yet)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def register(table: dict, name: str):
    def deco(cls):
        if name in table and table[name] is not cls and table[name] != qualified_name(cls):
            raise ValueError(f"tower {name!r} registered twice")
        table[name] = cls
        return cls

    return deco


def _lookup(table: dict, kind: str):
    entry = table[kind]
    if isinstance(entry, str):
        entry = table[kind] = load_by_name(entry)
    return entry


def resolve_weights(ref: str | None) -> Path | None:
    """``asset:NAME`` -> path in the asset cache; anything else is a local path."""
    if ref is None:
        return None
    if ref.startswith("asset:"):
        return Path(assets.path(ref[len("asset:"):]))
    p = Path(ref).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"weights not found: {p}")
    return p


def build_image_tower(spec: dict) -> nn.Module:
    spec = dict(spec)
    kind = spec.pop("type")
    if kind not in IMAGE_TOWERS:
        raise KeyError(f"unknown image tower {kind!r}; known: {sorted(IMAGE_TOWERS)}")
    return _lookup(IMAGE_TOWERS, kind)(**spec)


def build_text_tower(spec: dict) -> nn.Module:
    spec = dict(spec)
    kind = spec.pop("type")
    if kind not in TEXT_TOWERS:
        raise KeyError(f"unknown text tower {kind!r}; known: {sorted(TEXT_TOWERS)}")
    return _lookup(TEXT_TOWERS, kind)(**spec)


def _encoder_only(folder: Path) -> bool:
    """The folder's config names a bare BertModel (no MLM head to load)."""
    try:
        arch = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        return False  # from_pretrained reports what is wrong with the folder
    return arch == ["BertModel"]


# set while a saved folder is rebuilt (registry.from_pretrained): its bert-mlm towers use the plain-torch
# BERT of light_bert.py. Building from a config for training keeps transformers' model (its gradient
# checkpointing, which the trainer switches on through transformers).
_LIGHT: ContextVar[bool] = ContextVar("tokenspace_light_text_towers", default=False)


@contextmanager
def light_text_towers():
    """Within it, a bert-mlm tower built from a config (no weights) is the plain-torch BERT."""
    token = _LIGHT.set(True)
    try:
        yield
    finally:
        _LIGHT.reset(token)


# the initialisers torch's layers (and the towers' own code) call through the torch.nn.init module
_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")
_SKIP_LOCK = threading.Lock()


@contextmanager
def skip_init():
    """Within it, torch.nn.init's initialisers leave tensors as they are: for a model whose every
    parameter and buffer is about to be overwritten by a saved state dict (registry.from_pretrained
    refuses a folder that misses any), random initialisation is work thrown away: about 0.2 s of the
    release model's load (three EfficientNet towers built, two of them then shared away). As
    transformers' ``no_init_weights``: the module's functions are swapped for the block (a lock keeps
    two loads in threads from restoring each other's)."""
    import torch.nn.init as init  # start-up: already imported with torch; named here for the swap

    with _SKIP_LOCK:
        saved = {name: getattr(init, name) for name in _INITS if hasattr(init, name)}
        for name in saved:
            setattr(init, name, _keep)
        try:
            yield
        finally:
            for name, fn in saved.items():
                setattr(init, name, fn)


def _keep(tensor, *args, **kwargs):
    return tensor


@contextmanager
def _transformers_errors_only():
    from transformers.utils import logging as hf_logging  # start-up: only the bert-mlm tower needs it

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


# ---------------------------------------------------------------------------------------- image towers
class ImageTower(nn.Module):
    """Contract: forward(pixels [B, 3, H, W] normalised) -> grid [B, C, h, w]; attributes below.

    Towers made of a sequence of blocks may also be split at a block index k (0 <= k <= n_blocks):
    ``trunk(pixels, k)`` runs everything before block k (cacheable while it stays frozen),
    ``top(x, k)`` the rest, so ``top(trunk(p, k), k) == forward(p)``; ``top_parameters(k)`` are what
    training the top learns. k = n_blocks leaves only the final head layers on top."""

    out_channels: int
    image_size: int
    # pixel normalisation applied to 0..255 RGB: (x - mean) / std, per channel
    pixel_mean: tuple[float, float, float]
    pixel_std: tuple[float, float, float]
    n_blocks: int = 0  # 0: this tower cannot be split (train it whole or not at all)

    def split_index(self, at: int | str) -> int:
        """A recipe's ``train_image_from`` -> block index: an int (negative counts from the end, as in
        Python: -1 = the last block) or "head" (only the layers after the last block)."""
        n = self.n_blocks
        if not n:
            raise ValueError(f"{type(self).__name__} cannot be split; use train_image_from: all (or none)")
        k = n if at == "head" else at
        if isinstance(k, bool) or not isinstance(k, int) or not -n <= k <= n:
            raise ValueError(f"train_image_from must be 'head', 'all' or a block index in [{-n}, {n}], not {at!r}")
        return k % n if k < 0 else k

    def trunk(self, pixels: torch.Tensor, at: int) -> torch.Tensor:
        raise NotImplementedError

    def top(self, x: torch.Tensor, at: int) -> torch.Tensor:
        raise NotImplementedError

    def top_parameters(self, at: int):
        raise NotImplementedError


@register(IMAGE_TOWERS, "efficientnet-lite0")
class EfficientNetLite0Tower(ImageTower):
    """ImageNet-pretrained EfficientNet-Lite0; final feature map 1280 x 7 x 7 at 224 px."""

    def __init__(self, weights: str | None = "asset:efficientnet-lite0", image_size: int = 224):
        super().__init__()
        from efficientnet_lite_pytorch import EfficientNet  # start-up: only this tower needs it

        path = resolve_weights(weights)
        if path is not None and path.is_dir():  # an asset folder holding the one .pth file
            found = sorted(path.glob("**/*.pth"))
            if not found:
                raise FileNotFoundError(f"no .pth weights under {path}")
            path = found[0]
        self.net = EfficientNet.from_name("efficientnet-lite0")
        if path is not None:  # from_pretrained's load, without its unconditional "Loaded pretrained weights" print
            self.net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        # the classifier is unused; dropping it keeps state dicts and parameter counts honest
        self.net._fc = nn.Identity()
        self.out_channels = 1280
        self.image_size = image_size
        self.pixel_mean = (127.0, 127.0, 127.0)
        self.pixel_std = (128.0, 128.0, 128.0)
        self.n_blocks = len(self.net._blocks)  # 16 MBConv blocks; the last stage is block 15

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net.extract_features(pixels)  # [B, 1280, H/32, W/32]

    # the split mirrors EfficientNet.extract_features step by step (same per-block drop-connect rate)
    def trunk(self, pixels: torch.Tensor, at: int) -> torch.Tensor:
        n = self.net
        x = n._swish(n._bn0(n._conv_stem(pixels)))
        for idx in range(at):
            x = self._block(x, idx)
        return x

    def top(self, x: torch.Tensor, at: int) -> torch.Tensor:
        n = self.net
        for idx in range(at, self.n_blocks):
            x = self._block(x, idx)
        return n._swish(n._bn1(n._conv_head(x)))

    def top_parameters(self, at: int):
        n = self.net
        for block in n._blocks[at:]:
            yield from block.parameters()
        yield from n._conv_head.parameters()
        yield from n._bn1.parameters()

    def _block(self, x: torch.Tensor, idx: int) -> torch.Tensor:
        rate = self.net._global_params.drop_connect_rate
        if rate:
            rate *= float(idx) / self.n_blocks
        return self.net._blocks[idx](x, drop_connect_rate=rate)


@register(IMAGE_TOWERS, "tiny-cnn")
class TinyConvTower(ImageTower):
    """A few strided convolutions: a stand-in for tests and smoke runs (random init)."""

    def __init__(self, channels: int = 16, image_size: int = 32, depth: int = 3):
        super().__init__()
        layers, c_in = [], 3
        for _ in range(depth):
            layers += [nn.Conv2d(c_in, channels, 3, stride=2, padding=1), nn.GELU()]
            c_in = channels
        self.net = nn.Sequential(*layers)
        self.out_channels = channels
        self.image_size = image_size
        self.pixel_mean = (127.5, 127.5, 127.5)
        self.pixel_std = (127.5, 127.5, 127.5)
        self.n_blocks = depth  # a block = one conv + GELU; "head" leaves nothing on top

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels)

    def trunk(self, pixels: torch.Tensor, at: int) -> torch.Tensor:
        return self.net[: 2 * at](pixels)

    def top(self, x: torch.Tensor, at: int) -> torch.Tensor:
        return self.net[2 * at :](x)

    def top_parameters(self, at: int):
        return self.net[2 * at :].parameters()


# ----------------------------------------------------------------------------------------- text towers
class TextTower(nn.Module):
    """Contract: forward(input_ids, attention_mask) -> hidden [B, L, H]; plus the MLM head parts
    (``word_embeddings`` [V, H], ``mlm_transform``: FC + GELU + LayerNorm, ``mlm_bias`` [V]) that the
    token projection head ties to."""

    hidden_size: int
    vocab_size: int


# the BERT config fields a saved folder records (what the encoder's arithmetic depends on)
PORTABLE_BERT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                      "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
                      "hidden_dropout_prob", "attention_probs_dropout_prob")


@register(TEXT_TOWERS, "bert-mlm")
class BertMLMTower(TextTower):
    """A BERT masked language model (e.g. SPLADE-tiny) from a local folder, or random from a config."""

    def __init__(self, weights: str | None = None, config: dict | None = None):
        super().__init__()
        if weights is None and config is not None and _LIGHT.get():
            if light_bert.supported(config):
                # a saved folder: the weights come with the outer model, so the encoder is rebuilt from
                # its config without importing transformers (about 2 s of a CLI call's start-up)
                self.bert = light_bert.LightBertModel(config)
                self.mlm_transform = light_bert.LightPredictionTransform(config)
                self.mlm_bias = nn.Parameter(torch.zeros(self.bert._config["vocab_size"]))
                self.hidden_size = self.bert._config["hidden_size"]
                self.vocab_size = self.bert._config["vocab_size"]
                return
        from transformers import BertConfig, BertForMaskedLM  # start-up: transformers takes seconds to import

        path = resolve_weights(weights)
        if path is not None:
            head_less = _encoder_only(path)
            if head_less:
                # a sentence encoder such as all-MiniLM-L6-v2: transformers' load report calls the absent
                # head "missing" and the checkpoint "corrupted"; say what it means here instead, once
                log.info("%s is a BERT encoder without an MLM head: the head's TRANSFORM and bias start fresh", path)
            with _transformers_errors_only() if head_less else nullcontext():
                mlm = BertForMaskedLM.from_pretrained(str(path), local_files_only=True)
        else:
            if config is None:
                raise ValueError("bert-mlm needs `weights` (a folder or asset:NAME) or a `config` dict")
            mlm = BertForMaskedLM(BertConfig(**config))
        self.bert = mlm.bert
        self.mlm_transform = mlm.cls.predictions.transform
        # transformers keeps the decoder bias at cls.predictions.bias (tied to decoder.bias)
        self.mlm_bias = mlm.cls.predictions.bias
        self.hidden_size = mlm.config.hidden_size
        self.vocab_size = mlm.config.vocab_size

    @property
    def word_embeddings(self) -> nn.Parameter:
        # a property, not an attribute: registering the shared tensor twice would duplicate it on save
        return self.bert.embeddings.word_embeddings.weight

    def portable_spec(self) -> dict:
        """How a saved folder rebuilds this tower: its BERT config, no weights (they come with the model's).
        Read from either BERT without importing transformers for the light one (a loaded model saved again)."""
        cfg = self.bert._config if isinstance(self.bert, light_bert.LightBertModel) else self.bert.config.to_dict()
        return {"weights": None, "config": {k: cfg[k] for k in PORTABLE_BERT_KEYS if k in cfg}}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
