"""Shrink a model config to toy size while keeping its structure: tower types, family, head wiring.

Paper configs (ViT-B/16, 12-layer text transformers, 30,522 tokens) cannot train on a CPU, but their
code paths can: ``shrink(ModelConfig.load("stair-paper"), width=32, layers=1, vocab=34)`` builds the
same model kinds at a few thousand parameters, for tests and smoke runs.
"""
from __future__ import annotations

import copy

from tokenspace.models.config import ModelConfig


def shrink(config: ModelConfig, width: int = 32, layers: int = 1, vocab: int | None = None,
           image_size: int = 32, patch: int = 8, heads: int = 2) -> ModelConfig:
    """A copy of ``config`` at toy size. ``vocab`` sets the text tower's vocabulary size (pass the size
    of the tiny vocabulary the test builds the model with); pretrained weights are dropped."""
    d = copy.deepcopy(config.to_dict())
    d["name"] = f"{config.name}-shrunk"
    d["image_tower"] = _image(d["image_tower"], width, layers, image_size, patch, heads)
    d["text_tower"] = _text(d["text_tower"], width, layers, vocab, heads)
    d["embed_dim"] = min(d["embed_dim"], width)
    d["head_hidden"] = None
    if d["family"] == "visualsparta":
        d["extra"] = {**d["extra"], "layers": layers, "heads": heads, "ffn": 2 * width,
                      "max_cells": max(d["extra"].get("max_cells", 64), (image_size // patch) ** 2)}
    return ModelConfig.from_dict(d)


def _image(spec: dict, width, layers, image_size, patch, heads) -> dict:
    kind = spec["type"]
    if kind in ("vit", "hf-clip-vision"):
        cfg = {**spec.get("config", {}), "hidden_size": width, "num_hidden_layers": layers,
               "num_attention_heads": heads, "intermediate_size": 2 * width, "image_size": image_size,
               "patch_size": patch}
        return {"type": kind, "config": cfg} | ({"output": spec["output"]} if "output" in spec else {})
    if kind == "open-clip-vision":
        cfg = copy.deepcopy(spec.get("config") or _open_clip_config(spec["model"]))
        cfg["vision_cfg"].update(width=width, layers=layers, image_size=image_size, patch_size=patch,
                                 head_width=width // heads)
        cfg["embed_dim"] = width
        return {"type": kind, "config": cfg}
    # CNN backbones (frozen feature extractors in the paper setups): a tiny random CNN stands in
    return {"type": "tiny-cnn", "channels": width, "image_size": image_size, "depth": 2}


def _text(spec: dict, width, layers, vocab, heads) -> dict:
    kind = spec["type"]
    if kind == "transformer-mlm":
        out = {**spec, "width": width, "layers": layers, "heads": heads}
        if vocab is not None:
            out["vocab_size"] = vocab
        return out
    if kind in ("bert-mlm", "hf-clip-text"):
        cfg = {**(spec.get("config") or {}), "hidden_size": width, "num_hidden_layers": layers,
               "num_attention_heads": heads, "intermediate_size": 2 * width}
        if vocab is not None:
            cfg["vocab_size"] = vocab
        cfg.setdefault("max_position_embeddings", 128)
        return {"type": kind, "config": cfg}
    if kind == "open-clip-text":
        cfg = copy.deepcopy(spec.get("config") or _open_clip_config(spec["model"]))
        cfg["text_cfg"].update(width=width, layers=layers, heads=heads)
        if vocab is not None:
            cfg["text_cfg"]["vocab_size"] = vocab
        cfg["embed_dim"] = width
        return {"type": kind, "config": cfg}
    raise KeyError(f"shrink does not know text tower {kind!r}")


def _open_clip_config(name: str) -> dict:
    import open_clip  # optional: open_clip_torch

    cfg = open_clip.get_model_config(name)
    if cfg is None:
        raise KeyError(f"unknown open_clip model {name!r}")
    return cfg
