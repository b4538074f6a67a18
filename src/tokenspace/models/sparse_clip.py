"""Sparse CLIP: a projection widened by an expansion factor, then ReLU; cosine contrastive loss.

Its dimensions are learned features, not tokens; they are named f00000.. (Vocabulary.latent) so the
same SparseBatch, index and explanations work for them.

Options (``config.extra``):
    relu: true            ReLU after the projection (false: the signed, dense arm of the paper's Fig. 2a)
    topk: K               TopK activation (Gao et al. 2024): keep each row's K largest pre-activations,
                          then the ReLU; the Fig. 2b ablation arm (the paper: K = 512 of 16,384)
    l1: w                 L1 penalty w * mean_i ||z_i / ||z_i||_2||_1 on both sides: Fig. 2b's other arm.
                          On the L2-normalised rows because the cosine loss ignores a row's scale: an L1
                          on raw rows would only shrink every row, not make it sparser
    text_pooling: mean    masked mean over the tokens | eos: the last token ([SEP], OpenCLIP's EOT
                          pooling; pair it with a causal text tower, where only the last token sees all)

The image side mean-pools the grid cells its tower gives. OpenCLIP's ViT-B/32 (the paper's model) pools
with the class token instead: the paper config asks its ViT tower for ``output: cls``, a 1 x 1 grid that
the mean passes through unchanged. The small towers (EfficientNet-Lite0 grids, SPLADE-tiny) keep mean
pooling on both sides: a deviation from the paper's architecture, chosen for the frozen CNN grid.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.dual import DualEncoder
from tokenspace.models.options import SparseClipOptions
from tokenspace.models.pooling import grid_to_cells, keep_top, masked_mean
from tokenspace.vocab import Vocabulary


class SparseClipModel(DualEncoder):
    family = "sparse-clip"
    similarity_fn_name = "cosine"
    Options = SparseClipOptions

    @classmethod
    def output_vocabulary(cls, config, tokenizer_vocab):
        """Learned features, not tokens: named f00000.. (embed_dim x expansion of them)."""
        return Vocabulary.latent(config.embed_dim * config.expansion)

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        width = config.embed_dim * config.expansion
        if len(vocab) != width:
            raise ValueError(f"latent vocabulary has {len(vocab)} names for {width} features")
        opts = config.options  # SparseClipOptions: unknown keys and bad values already refused
        # expansion 1 with relu=False is the dense ablation arm of the paper's Fig. 2a
        self.relu, self.topk, self.l1, self.text_pooling = opts.relu, opts.topk, opts.l1, opts.text_pooling
        if self.topk is not None and not 1 <= self.topk <= width:  # the width is the model's, not the options'
            raise ValueError(f"extra.topk must be an integer in [1, {width}], got {self.topk!r}")
        # without the ReLU the features are signed: encode to dense rows rather than silently dropping
        # the negative half into a SparseBatch
        self.sparse = self.relu
        self.image_proj = nn.Linear(self.image_tower.out_channels, width)
        self.text_proj = nn.Linear(self.text_tower.hidden_size, width)

    def _act(self, x: torch.Tensor) -> torch.Tensor:  # [B, width] pre-activations
        if self.topk is not None:
            x = keep_top(x, self.topk)
        return torch.relu(x) if self.relu else x

    def image_embed(self, grid):  # [B, C, h, w] (a ViT's class token: h = w = 1) -> [B, width]
        return self._act(self.image_proj(grid_to_cells(grid).mean(1)))

    def text_embed(self, input_ids, attention_mask):
        h = self.text_tower(input_ids, attention_mask)  # [B, L, H]
        if self.text_pooling == "eos":
            last = attention_mask.long().sum(1).clamp_min(1) - 1  # the [SEP] the tokenizer always keeps
            pooled = h[torch.arange(h.shape[0], device=h.device), last]
        else:
            pooled = masked_mean(h, attention_mask)
        return self._act(self.text_proj(pooled))

    def regularization(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> dict[str, torch.Tensor]:
        """Extra loss parts (train.losses adds them): the L1 arm of Fig. 2b, when ``extra.l1`` > 0."""
        if not self.l1:
            return {}
        return {"l1_image": self.l1 * self.normalize(image_emb).abs().sum(1).mean(),
                "l1_text": self.l1 * self.normalize(text_emb).abs().sum(1).mean()}

    def image_parameters(self):
        yield from self.image_tower.parameters()
        yield from self.image_proj.parameters()
