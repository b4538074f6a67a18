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

The parts share one image tower: they must all hold the same network (EfficientNet-Lite0 with the same
weights, up to the float16 rounding of a stored folder). Images are read at the fused config's
``image_tower.image_size``; a part may see them at its own resolution (``image_size`` in its entry: the
release's STAIR part at the 128 px it was trained at, the tagger at the classifier's 224), one backbone
forward per distinct size on the pixels resized (antialiased bilinear). With several sizes the "grid"
is the sizes' cells side by side, [B, C, 1, cells_1 + cells_2 + ...], so the feature cache and
``encode_image_grids`` work unchanged; ``image_embed`` cuts it back into each part's [B, C, h, w].
Heatmaps (``image_scores``) are the first part's that has per-cell scores (the release's STAIR part).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from tokenspace.models.capabilities import CellScores
from tokenspace.models.classwords import emitted_mask
from tokenspace.models.config import ModelConfig
from tokenspace.models.dual import DualEncoder
from tokenspace.models.options import FusedOptions
from tokenspace.models.query_filter import on_topic
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
    similarity_fn_name = "cosine"
    Options = FusedOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        opts = config.options
        self.parts = nn.ModuleList(inner_model(p["model"], self.tokenizer.vocab) for p in opts.parts)
        self.image_weights = [p["image"] for p in opts.parts]
        # a part's image rows without lone word pieces: a trained part's "##cre", "##sto" match no word a
        # query adds (the filter adds none) and are no word a reader recognises; they only dilute its row
        self.image_pieces = [p["image_pieces"] for p in opts.parts]
        size = self.image_tower.image_size
        self.part_sizes = [p["image_size"] or size for p in opts.parts]
        self.text_weights = [p["text"] for p in opts.parts]
        self.anchor = opts.anchor
        self.image_top_n, self.text_top_n = opts.image_top_n, opts.text_top_n  # encode_* only (DualEncoder)
        for i, part in enumerate(self.parts):
            if not part.sparse or part.vocab.tokens != vocab.tokens:
                raise ValueError(f"fused part {i} ({part.family}) must be a sparse model over the fused "
                                 f"model's vocabulary ({len(vocab)} tokens)")
        # parts given as configs (a saved folder) are still empty here: their weights come with ours
        self._share_image_tower(check=[not isinstance(p["model"], dict) for p in opts.parts])
        self.sizes = sorted(set(self.part_sizes), key=lambda x: (x != size, x))  # the tower's own first
        # the grid shape at each size, found by running the tower once per size: on first use by the image
        # side, not here, so a model loaded to encode queries never runs its image tower (a text search's
        # start-up: 0.04 s on a quiet machine, seconds on a loaded one)
        self._cells: dict[int, tuple[int, int]] | None = None if len(self.sizes) > 1 else {}
        whole = torch.tensor([not t.startswith("##") for t in vocab.tokens], dtype=torch.float32)
        self.register_buffer("whole_words", whole, persistent=False)
        keep = torch.tensor(emitted_mask(tuple(self.tokenizer.vocab.tokens)))
        self.register_buffer("content", keep, persistent=False)  # which ids count as content words
        self.related_min = opts.related_min
        self.gate = opts.gate
        if self.gate is not None and not any(hasattr(p, "confidence") for p in self.parts):
            raise ValueError("a fused gate needs a part that reports its confidence (a tagger)")
        if self.related_min is not None:  # filled by models/query_filter.fit_query_filter, stored with the weights
            self.register_buffer("expansion_drop", torch.zeros(len(vocab)))  # 1: a query hub, never added
            self.register_buffer("related", torch.zeros(len(vocab), opts.related_dim, dtype=torch.float16))

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

    @property
    def packed_sizes(self) -> tuple[int, ...]:
        """The sizes packed into one grid, () when every part reads the tower's size (feature cache key)."""
        return tuple(self.sizes) if self.cells else ()

    @property
    def cells(self) -> dict[int, tuple[int, int]]:
        """(h, w) of the tower's grid at each size ({} when every part reads the tower's own size)."""
        if self._cells is None:
            self._cells = self._cells_per_size()
        return self._cells

    def _cells_per_size(self) -> dict[int, tuple[int, int]]:
        """(h, w) of the tower's grid at each size: where each part's cells lie in a packed grid."""
        was = self.image_tower.training
        self.image_tower.eval()
        device = next(self.image_tower.parameters()).device  # wherever the model was moved since
        with torch.no_grad():
            out = {s: tuple(self.image_tower(torch.zeros(1, 3, s, s, device=device)).shape[2:]) for s in self.sizes}
        self.image_tower.train(was)
        return out

    # ------------------------------------------------------------------ the two sides
    def image_grid(self, pixels: torch.Tensor) -> torch.Tensor:
        if not self.cells:
            return self.image_tower(pixels)
        grids = []
        for s in self.sizes:
            px = pixels if s == pixels.shape[-1] else F.interpolate(
                pixels, size=(s, s), mode="bilinear", antialias=True, align_corners=False)
            grids.append(self.image_tower(px).flatten(2))  # [B, C, h*w]
        return torch.cat(grids, dim=2)[:, :, None, :]  # [B, C, 1, all cells]

    def part_grid(self, grid: torch.Tensor, i: int) -> torch.Tensor:
        """Part i's own [B, C, h, w] out of the fused model's grid (a packed one when sizes differ)."""
        if not self.cells:
            return grid
        start = 0
        for s in self.sizes:
            h, w = self.cells[s]
            if s == self.part_sizes[i]:
                return grid[:, :, 0, start:start + h * w].reshape(*grid.shape[:2], h, w)
            start += h * w
        raise AssertionError("unreachable: every part size is in self.sizes")

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        judge, take = self._gate(grid)
        out = 0.0
        for i, (w, part) in enumerate(zip(self.image_weights, self.parts)):
            if w:
                scale = w if i == judge else w * (1 - take)
                emb = part.image_embed(self.part_grid(grid, i))
                out = out + scale * _unit(emb if self.image_pieces[i] else emb * self.whole_words)
        return out if isinstance(out, torch.Tensor) else grid.new_zeros(grid.shape[0], len(self.vocab))

    def _gate(self, grid: torch.Tensor) -> tuple[int | None, torch.Tensor | float]:
        """(the gating part's index, [B, 1] how far it takes over) or (None, 0.0) without a gate. Why a
        gate: a sum at fixed weights dilutes each part where the other is strong (release v2's photos
        scored 12 points below the tagger alone); the tagger's classifier knows when a picture is a photo
        of one of its classes."""
        if self.gate is None:
            return None, 0.0
        judge = next(i for i, p in enumerate(self.parts) if hasattr(p, "confidence"))
        low, high = self.gate
        c = self.parts[judge].confidence(self.part_grid(grid, judge))
        return judge, ((c - low) / (high - low)).clamp(0, 1)[:, None]

    def bag(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, V]: 1 for each content word piece of the text (the lexical anchor's vector)."""
        valid = (attention_mask.bool() & self.content[input_ids]).float()
        out = torch.zeros(input_ids.shape[0], len(self.vocab), device=input_ids.device)
        return out.scatter_reduce(1, input_ids, valid, reduce="amax", include_self=True)

    def topic_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   own: torch.Tensor | None = None) -> torch.Tensor | None:
        """[B, V] 1 for the tokens the query filter lets an expansion add (None without a filter). Also
        what a part is fine-tuned under, so that its text side learns to carry its signal on these tokens
        (benchmarks/release_model.py ``--filter-steps``)."""
        if self.related_min is None:
            return None
        own = self.bag(input_ids, attention_mask) if own is None else own
        return on_topic(own, input_ids, attention_mask.bool() & self.content[input_ids], self.related,
                        self.expansion_drop, self.related_min)

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        own = self.bag(input_ids, attention_mask)
        expansion = 0.0
        for w, part in zip(self.text_weights, self.parts):
            if w:
                expansion = expansion + w * _unit(part.text_embed(input_ids, attention_mask))
        keep = self.topic_mask(input_ids, attention_mask, own) if isinstance(expansion, torch.Tensor) else None
        if keep is not None:
            expansion = expansion * keep
        return self.anchor * _unit(own) + expansion

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """Per-cell scores for heatmaps: the first part that has them (see the module doc)."""
        for i, part in enumerate(self.parts):
            if isinstance(part, CellScores):
                return part.image_scores(self.part_grid(grid, i))
        raise TypeError("no part of this fused model has per-cell scores")

    def part(self, i: int) -> DualEncoder:
        """Part ``i`` as a model of its own, as it was before fusing: its own copy of the tower at the
        resolution its config names, its own top-n (the release's ``part(0)`` is the unfused release v1)."""
        alone = copy.deepcopy(self.parts[i])
        tower = copy.deepcopy(self.image_tower)
        tower.image_size = alone.config.image_tower.get("image_size", self.part_sizes[i])
        alone.image_tower = tower
        return alone.eval()

    # ------------------------------------------------------------------ persistence
    def portable_config(self):
        cfg = super().portable_config()
        sizes = [p["image_size"] for p in self.config.options.parts]
        parts = [{"model": part.portable_config().to_dict(), "image": a, "text": t, "image_size": s, "image_pieces": ps}
                 for part, a, t, s, ps in zip(self.parts, self.image_weights, self.text_weights, sizes, self.image_pieces)]
        # the weights as they are now (a sweep sets them on a built model), not as the config was built
        cfg.extra = {**cfg.extra, "parts": parts, "anchor": self.anchor, "image_top_n": self.image_top_n,
                     "text_top_n": self.text_top_n, "related_min": self.related_min,
                     "gate": list(self.gate) if self.gate is not None else None}
        return cfg


def fused_config(parts, *, image_size: int = 224, anchor: float = 0.0, image_top_n: int | None = None,
                 text_top_n: int | None = None, vocab: str = "asset:bert-base-uncased-vocab",
                 name: str = "fused", max_text_len: int = 32, image_tower: str = "efficientnet-lite0"):
    """The config of a fused model: ``parts`` = [(model reference, image weight, text weight[, image size]),
    ...] (benchmarks/release_model.py builds the release with it). The tower's weights come from part 0."""
    return ModelConfig.from_dict({
        "name": name, "family": "fused", "vocab": vocab, "max_text_len": max_text_len,
        "image_tower": {"type": image_tower, "weights": None, "image_size": image_size},
        "text_tower": {"type": "bag-of-tokens", "vocab_size": 30522},
        "extra": {"parts": [{"model": p[0] if isinstance(p[0], dict) else str(p[0]), "image": p[1], "text": p[2],
                             "image_size": p[3] if len(p) > 3 else None} for p in parts],
                  "anchor": anchor, "image_top_n": image_top_n, "text_top_n": text_top_n},
    })
