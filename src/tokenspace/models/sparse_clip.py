"""Sparse CLIP: a projection widened by an expansion factor, then ReLU; cosine contrastive loss.

Its dimensions are learned features, not tokens; they are named f00000.. (Vocabulary.latent) so the
same SparseBatch, index and explanations work for them.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.dual import DualEncoder
from tokenspace.models.pooling import grid_to_cells, masked_mean


class SparseClipModel(DualEncoder):
    family = "sparse-clip"
    similarity = "cosine"

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        width = config.embed_dim * config.expansion
        if len(vocab) != width:
            raise ValueError(f"latent vocabulary has {len(vocab)} names for {width} features")
        # expansion 1 with relu=False is the dense ablation arm of the paper's Fig. 2a
        self.relu = bool(config.extra.get("relu", True))
        # without the ReLU the features are signed: encode to dense rows rather than silently dropping
        # the negative half into a SparseBatch
        self.sparse = self.relu
        self.image_proj = nn.Linear(self.image_tower.out_channels, width)
        self.text_proj = nn.Linear(self.text_tower.hidden_size, width)

    def _act(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) if self.relu else x

    def image_embed(self, grid):
        return self._act(self.image_proj(grid_to_cells(grid).mean(1)))

    def text_embed(self, input_ids, attention_mask, **_):
        h = masked_mean(self.text_tower(input_ids, attention_mask), attention_mask)
        return self._act(self.text_proj(h))

    def image_parameters(self):
        yield from self.image_tower.parameters()
        yield from self.image_proj.parameters()
