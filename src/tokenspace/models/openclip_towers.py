"""open_clip towers: the image or text half of an OpenCLIP model, by name or local path.

Spec keys (both towers):
    model:      an open_clip architecture name ("ViT-B-32") or "local-dir:/path" (a folder holding
                open_clip_config.json and the weights, as open_clip saves them)
    pretrained: None, a local checkpoint file, or an open_clip tag ("laion2b_s34b_b79k"): a tag makes
                open_clip download, which only works on a machine with network access
    config:     an explicit open_clip model config dict ({embed_dim, vision_cfg, text_cfg}) instead of
                a name: how tests build tiny random models and how saved tokenspace models rebuild

open_clip is optional (``pip install open_clip_torch``) and imported only when such a tower is built.

Image grid: the ViT's patch tokens after ``ln_post`` [B, width, h, w]. Text: the transformer's tokens
after ``ln_final`` [B, L, width] (no pooling, no projection: the tokenspace heads do that). OpenCLIP's
text transformer is causal; pretrained weights expect its BPE tokenizer's ids.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from tokenspace.models.hf_towers import CLIP_MEAN, CLIP_STD, patches_to_grid
from tokenspace.models.towers import IMAGE_TOWERS, TEXT_TOWERS, ImageTower, TextTower, register


def create_clip(model: str | None = None, pretrained: str | None = None, config: dict | None = None):
    """An open_clip CLIP model from a name / local dir (+ optional checkpoint) or a config dict."""
    import open_clip  # optional: open_clip_torch

    if config is not None:
        clip = open_clip.CLIP(**config)
        if pretrained:
            open_clip.load_checkpoint(clip, pretrained)
        return clip, config
    if model is None:
        raise ValueError("an open_clip tower needs `model` (a name or local-dir:PATH) or `config`")
    clip = open_clip.create_model(model, pretrained=pretrained)
    if model.startswith("local-dir:"):
        cfg = json.loads((Path(model[len("local-dir:"):]) / "open_clip_config.json").read_text())["model_cfg"]
    else:
        cfg = open_clip.get_model_config(model)
    return clip, cfg


@register(IMAGE_TOWERS, "open-clip-vision")
class OpenClipVisionTower(ImageTower):
    def __init__(self, model: str | None = None, pretrained: str | None = None, config: dict | None = None):
        super().__init__()
        clip, self._cfg = create_clip(model, pretrained, config)
        self.visual = clip.visual
        if not hasattr(self.visual, "output_tokens"):
            raise TypeError(f"{type(self.visual).__name__}: only open_clip ViT image towers give a token grid")
        self.visual.output_tokens = True  # forward returns (pooled, tokens [B, h*w, width])
        size = self.visual.image_size
        self.image_size = size[0] if isinstance(size, (tuple, list)) else int(size)
        self.out_channels = self.visual.transformer.width
        self.pixel_mean, self.pixel_std = CLIP_MEAN, CLIP_STD

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:  # [B, 3, S, S] -> [B, width, h, w]
        _, tokens = self.visual(pixels)  # tokens: patch tokens only, after ln_post
        return patches_to_grid(tokens, 0)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.visual.set_grad_checkpointing(enable)

    def portable_spec(self) -> dict:
        return {"model": None, "pretrained": None, "config": self._cfg}


@register(TEXT_TOWERS, "open-clip-text")
class OpenClipTextTower(TextTower):
    def __init__(self, model: str | None = None, pretrained: str | None = None, config: dict | None = None):
        super().__init__()
        clip, self._cfg = create_clip(model, pretrained, config)
        if not hasattr(clip, "token_embedding"):
            raise TypeError("only open_clip models with the built-in text transformer are supported")
        self.token_embedding = clip.token_embedding
        self.positional_embedding = clip.positional_embedding
        self.transformer = clip.transformer
        self.ln_final = clip.ln_final
        self.register_buffer("attn_mask", clip.attn_mask, persistent=False)  # [ctx, ctx] causal, or None
        self.hidden_size = self.token_embedding.embedding_dim
        self.vocab_size = self.token_embedding.num_embeddings
        self.context_length = clip.context_length
        h = self.hidden_size
        # the MLM parts CLIP lacks, fresh: token-space heads (STAIR) tie to word_embeddings through them
        self.mlm_transform = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.LayerNorm(h))
        self.mlm_bias = nn.Parameter(torch.zeros(self.vocab_size))

    @property
    def word_embeddings(self) -> nn.Parameter:
        return self.token_embedding.weight

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, L, width]. Causal attention: padding sits after the real tokens, so no real
        token attends to it and no padding mask is needed (as in open_clip's encode_text)."""
        L = input_ids.shape[1]
        if L > self.context_length:
            raise ValueError(f"{L} tokens exceed the open_clip context length {self.context_length}")
        x = self.token_embedding(input_ids) + self.positional_embedding[:L]
        mask = self.attn_mask[:L, :L] if self.attn_mask is not None else None
        return self.ln_final(self.transformer(x, attn_mask=mask))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.transformer.grad_checkpointing = enable

    def portable_spec(self) -> dict:
        return {"model": None, "pretrained": None, "config": self._cfg}
