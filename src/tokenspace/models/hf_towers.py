"""Hugging Face transformers towers: ViT and CLIP vision (image), CLIP text (text).

Each loads from a local folder (``weights``: a ``save_pretrained`` folder or ``asset:NAME``) or builds
random weights from a ``config`` dict; nothing here downloads (``local_files_only``). Every tower has
``portable_spec()``: the architecture-only spec a saved tokenspace model rebuilds itself from, and
``set_grad_checkpointing()`` for the recipe's ``gradient_checkpointing`` flag.

Grids: transformer image towers return their patch tokens laid out as a feature map
[B, hidden, H/patch, W/patch] (the class token is dropped), so every head that pools grid cells
(STAIR's max over cells, VisualSparta's fragments, mean pooling) works unchanged.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.towers import (
    IMAGE_TOWERS,
    TEXT_TOWERS,
    ImageTower,
    TextTower,
    register,
    resolve_weights,
)

# CLIP's pixel statistics, on the 0..255 scale the project's preprocessing uses
CLIP_MEAN = tuple(255 * x for x in (0.48145466, 0.4578275, 0.40821073))
CLIP_STD = tuple(255 * x for x in (0.26862954, 0.26130258, 0.27577711))
ARCH_KEYS = ("model_type", "architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype")


def _load(model_cls, config_cls, weights, config, **kw):
    """A model from a local folder or, without weights, randomly initialised from a config dict."""
    path = resolve_weights(weights)
    if path is not None:
        return model_cls.from_pretrained(str(path), local_files_only=True, **kw)
    if config is None:
        raise ValueError(f"{model_cls.__name__} tower needs `weights` (a local folder or asset:NAME) or a `config`")
    return model_cls(config_cls(**config), **kw)


def arch_config(hf_config) -> dict:
    """The config dict that rebuilds the same architecture (non-default values only, no provenance)."""
    d = hf_config.to_diff_dict()
    return {k: v for k, v in d.items() if k not in ARCH_KEYS}


def patches_to_grid(tokens: torch.Tensor, n_prefix: int) -> torch.Tensor:
    """[B, prefix + h*w, H] transformer tokens -> [B, H, h, w] grid of patch tokens (square grids)."""
    patches = tokens[:, n_prefix:]  # [B, h*w, H]
    side = round(patches.shape[1] ** 0.5)
    if side * side != patches.shape[1]:
        raise ValueError(f"{patches.shape[1]} patch tokens do not form a square grid")
    return patches.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], side, side)


@register(IMAGE_TOWERS, "vit")
class ViTTower(ImageTower):
    """transformers ViTModel (e.g. ViT-B/16: 12 layers x 768, patch 16); grid = patch tokens, or with
    ``output="cls"`` the final class token as a 1 x 1 grid [B, hidden, 1, 1] (OpenCLIP's ViT pooling;
    a spec key, so grid caches of the two outputs never mix)."""

    OUTPUTS = ("patches", "cls")

    def __init__(self, weights: str | None = None, config: dict | None = None, image_size: int | None = None,
                 output: str = "patches"):
        super().__init__()
        from transformers import ViTConfig, ViTModel  # start-up: transformers takes seconds to import

        if output not in self.OUTPUTS:
            raise ValueError(f"vit tower output must be one of {self.OUTPUTS}, got {output!r}")
        self.output = output
        self.vit = _load(ViTModel, ViTConfig, weights, config, add_pooling_layer=False)
        c = self.vit.config
        self.out_channels = c.hidden_size
        self.image_size = image_size or c.image_size
        # ViT checkpoints normalise with mean = std = 0.5 on 0..1 pixels
        self.pixel_mean = (127.5, 127.5, 127.5)
        self.pixel_std = (127.5, 127.5, 127.5)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:  # [B, 3, S, S] -> [B, hidden, S/p, S/p]
        # interpolate_pos_encoding: a tower may run at another resolution than it was built for
        out = self.vit(pixel_values=pixels, interpolate_pos_encoding=pixels.shape[-1] != self.vit.config.image_size)
        if self.output == "cls":
            return out.last_hidden_state[:, 0, :, None, None]  # after ViTModel's final LayerNorm
        return patches_to_grid(out.last_hidden_state, 1)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        _hf_checkpointing(self.vit, enable)

    def portable_spec(self) -> dict:
        spec = {"weights": None, "config": arch_config(self.vit.config), "image_size": self.image_size}
        return spec | ({"output": self.output} if self.output != "patches" else {})


@register(IMAGE_TOWERS, "hf-clip-vision")
class HFClipVisionTower(ImageTower):
    """transformers CLIPVisionModel (e.g. openai/clip-vit-base-patch16 saved locally); grid = patch
    tokens after the final LayerNorm, before CLIP's pooled projection."""

    def __init__(self, weights: str | None = None, config: dict | None = None, image_size: int | None = None):
        super().__init__()
        # start-up: transformers takes seconds to import
        from transformers import CLIPVisionConfig, CLIPVisionModel

        self.clip = _load(CLIPVisionModel, CLIPVisionConfig, weights, config)
        c = self.clip.config
        self.out_channels = c.hidden_size
        self.image_size = image_size or c.image_size
        self.pixel_mean, self.pixel_std = CLIP_MEAN, CLIP_STD

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        # transformers 5 flattened CLIPVisionModel; 4.x nests the parts under .vision_model
        vm = getattr(self.clip, "vision_model", self.clip)
        h = self.clip(pixel_values=pixels, interpolate_pos_encoding=pixels.shape[-1] != self.clip.config.image_size)
        # CLIP's post_layernorm normally only sees the class token; applying it to every patch gives the
        # grid the same scale as the pooled output the checkpoint was trained with
        return patches_to_grid(vm.post_layernorm(h.last_hidden_state), 1)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        _hf_checkpointing(self.clip, enable)

    def portable_spec(self) -> dict:
        return {"weights": None, "config": arch_config(self.clip.config), "image_size": self.image_size}


@register(TEXT_TOWERS, "hf-clip-text")
class HFClipTextTower(TextTower):
    """transformers CLIPTextModel. Its token embedding is the tied ``e`` of token-space heads; the MLM
    parts CLIP lacks (TRANSFORM, bias) are fresh. A pretrained CLIP text tower expects CLIP's BPE ids:
    pair it with that tokenizer's vocabulary (a WordPiece vocabulary only suits from-scratch towers)."""

    def __init__(self, weights: str | None = None, config: dict | None = None):
        super().__init__()
        # start-up: transformers takes seconds to import
        from transformers import CLIPTextConfig, CLIPTextModel

        self.clip = _load(CLIPTextModel, CLIPTextConfig, weights, config)
        c = self.clip.config
        self.hidden_size, self.vocab_size = c.hidden_size, c.vocab_size
        self.mlm_transform = nn.Sequential(nn.Linear(c.hidden_size, c.hidden_size), nn.GELU(),
                                           nn.LayerNorm(c.hidden_size))
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))

    @property
    def word_embeddings(self) -> nn.Parameter:
        return self.clip.get_input_embeddings().weight  # [V, H]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # CLIP's text model is causal; the padding mask keeps padding out of every position's keys
        return self.clip(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # [B, L, H]

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        _hf_checkpointing(self.clip, enable)

    def portable_spec(self) -> dict:
        return {"weights": None, "config": arch_config(self.clip.config)}


def _hf_checkpointing(model, enable: bool) -> None:
    if enable:
        # use_reentrant=False: works when the inputs need no grad (frozen embeddings, cached grids)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
