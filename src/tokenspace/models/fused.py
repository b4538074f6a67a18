"""Fused model: sparse parts over one vocabulary summed into one vector, plus a lexical anchor.

    image = sum_k a_k * n(part_k.image(grid))               n = L2 normalisation, a_k = part k's image weight
    text  = sum_k t_k * n(part_k.text(ids)) + anchor * n(bag(ids))
    (then each row's top-n tokens, normalised: the index's dot product is the cosine)

Why: the parts see different things in the same 30,522 WordPiece tokens. The trained STAIR model knows
drawings and captions; the training-free tagger (models/tagger.py, EfficientNet-Lite0's own ImageNet
classifier read as WordNet words) knows photos. One vector holds both, so one inverted index serves both
and every hit still explains itself token by token. ``bag(ids)`` is the set of the text's own content word
pieces (no stop words, specials or punctuation: classwords.emitted): a query always contains its own words,
which a learned expansion alone does not promise ("a cat" -> x, smoking, wheel...). Neither the fusion nor
the anchor is in the three papers: docs/results.md labels every row that uses them.

The parts share one image tower (one backbone forward per image): they must all hold the same network
(EfficientNet-Lite0 with the same weights, up to the float16 rounding of a stored folder); the fused
config's ``image_tower.image_size`` is the resolution every part then sees. Heatmaps (``image_scores``)
are the first part's that has per-cell scores (the trained STAIR part in the release).
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from tokenspace.models.capabilities import CellScores
from tokenspace.models.classwords import emitted
from tokenspace.models.config import ModelConfig
from tokenspace.models.dual import DualEncoder
from tokenspace.models.options import FusedOptions
from tokenspace.models.registry import inner_model


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class _Borrowed(nn.Module):
    """A part's view of the fused model's tower: it runs and describes that tower (image_size,
    out_channels, ...) but does not own it, so its weights are stored once, under ``image_tower``."""

    def __init__(self, tower: nn.Module):
        super().__init__()
        self.__dict__["_tower"] = tower  # not a submodule (see above)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._tower(pixels)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_tower"], name)


class FusedModel(DualEncoder):
    family = "fused"
    similarity = "cosine"
    Options = FusedOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        opts = config.options
        self.parts = nn.ModuleList(inner_model(p["model"], self.tokenizer.vocab) for p in opts.parts)
        self.image_weights = [p["image"] for p in opts.parts]
        self.text_weights = [p["text"] for p in opts.parts]
        self.anchor = opts.anchor
        self.image_top_n, self.text_top_n = opts.image_top_n, opts.text_top_n  # encode_* only (DualEncoder)
        for i, part in enumerate(self.parts):
            if not part.sparse or part.vocab.tokens != vocab.tokens:
                raise ValueError(f"fused part {i} ({part.family}) must be a sparse model over the fused "
                                 f"model's vocabulary ({len(vocab)} tokens)")
        # parts given as configs (a saved folder) are still empty here: their weights come with ours
        self._share_image_tower(check=[not isinstance(p["model"], dict) for p in opts.parts])
        keep = torch.tensor([emitted(t) for t in self.tokenizer.vocab.tokens])
        self.register_buffer("content", keep, persistent=False)  # which ids count as content words

    def _share_image_tower(self, check: list[bool]) -> None:
        """One tower for all: the first part's weights in the fused model's tower (its image size), then
        every part points at it. A loaded part holding another network is refused, not silently replaced
        (tolerance: a float16-stored part against its float32 original)."""
        first = self.parts[0].image_tower.state_dict()
        for i, part in enumerate(self.parts):
            sd = part.image_tower.state_dict()
            same = sd.keys() == first.keys() and all(sd[k].shape == first[k].shape for k in sd) and (
                not (check[i] and check[0]) or all(
                    torch.allclose(sd[k].float(), first[k].float(), rtol=1e-2, atol=1e-3) for k in sd))
            if type(part.image_tower) is not type(self.image_tower) or not same:
                raise ValueError(f"fused part {i} has another image tower than part 0: the parts must "
                                 f"share one backbone ({self.config.image_tower.get('type')})")
        self.image_tower.load_state_dict(first)
        for part in self.parts:
            part.image_tower = _Borrowed(self.image_tower)

    # ------------------------------------------------------------------ the two sides
    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        out = 0.0
        for w, part in zip(self.image_weights, self.parts):
            if w:
                out = out + w * _unit(part.image_embed(grid))
        return out if isinstance(out, torch.Tensor) else grid.new_zeros(grid.shape[0], len(self.vocab))

    def bag(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, V]: 1 for each content word piece of the text (the lexical anchor's vector)."""
        valid = (attention_mask.bool() & self.content[input_ids]).float()
        out = torch.zeros(input_ids.shape[0], len(self.vocab), device=input_ids.device)
        return out.scatter_reduce(1, input_ids, valid, reduce="amax", include_self=True)

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.anchor * _unit(self.bag(input_ids, attention_mask))
        for w, part in zip(self.text_weights, self.parts):
            if w:
                out = out + w * _unit(part.text_embed(input_ids, attention_mask))
        return out

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """Per-cell scores for heatmaps: the first part that has them (see the module doc)."""
        for part in self.parts:
            if isinstance(part, CellScores):
                return part.image_scores(grid)
        raise TypeError("no part of this fused model has per-cell scores")

    def part(self, i: int) -> DualEncoder:
        """Part ``i`` as a model of its own, as it was before fusing: its own copy of the tower at the
        resolution its config names, its own top-n (release v2's ``part(0)`` is the unfused release)."""
        alone = copy.deepcopy(self.parts[i])
        tower = copy.deepcopy(self.image_tower)
        tower.image_size = alone.config.image_tower.get("image_size", tower.image_size)
        alone.image_tower = tower
        return alone.eval()

    # ------------------------------------------------------------------ persistence
    def portable_config(self):
        cfg = super().portable_config()
        parts = [{"model": part.portable_config().to_dict(), "image": a, "text": t}
                 for part, a, t in zip(self.parts, self.image_weights, self.text_weights)]
        cfg.extra = {**cfg.extra, "parts": parts}
        return cfg


def fused_config(parts, *, image_size: int = 224, anchor: float = 0.0, image_top_n: int | None = None,
                 text_top_n: int | None = None, vocab: str = "asset:bert-base-uncased-vocab",
                 name: str = "fused", max_text_len: int = 32, image_tower: str = "efficientnet-lite0"):
    """The config of a fused model: ``parts`` = [(model reference, image weight, text weight), ...]
    (benchmarks/release_model.py builds release v2 with it). The tower's weights come from part 0."""
    return ModelConfig.from_dict({
        "name": name, "family": "fused", "vocab": vocab, "max_text_len": max_text_len,
        "image_tower": {"type": image_tower, "weights": None, "image_size": image_size},
        "text_tower": {"type": "bag-of-tokens", "vocab_size": 30522},
        "extra": {"parts": [{"model": str(m) if not isinstance(m, dict) else m, "image": a, "text": t}
                            for m, a, t in parts],
                  "anchor": anchor, "image_top_n": image_top_n, "text_top_n": text_top_n},
    })
