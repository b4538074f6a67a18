"""The dense CLIP-style baseline with exactly the same towers: pooled features -> linear -> 512-d, cosine."""
from __future__ import annotations

from torch import nn

from tokenspace.models.dual import DualEncoder
from tokenspace.models.options import DenseOptions
from tokenspace.models.pooling import grid_to_cells, masked_mean


class DenseModel(DualEncoder):
    family = "dense"
    similarity_fn_name = "cosine"
    sparse = False
    Options = DenseOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        self.image_proj = nn.Linear(self.image_tower.out_channels, config.embed_dim)
        self.text_proj = nn.Linear(self.text_tower.hidden_size, config.embed_dim)

    def image_embed(self, grid):
        return self.image_proj(grid_to_cells(grid).mean(1))  # [B, C] -> [B, D]

    def text_embed(self, input_ids, attention_mask):
        return self.text_proj(masked_mean(self.text_tower(input_ids, attention_mask), attention_mask))

    def image_parameters(self):
        yield from self.image_tower.parameters()
        yield from self.image_proj.parameters()
