"""A from-scratch text transformer with an MLM-style head: the text tower of the paper configs.

STAIR's text encoder is a CLIP-like transformer (12 layers, 512 wide, 8 heads) over BERT WordPiece ids
(30,522) with at most 76 tokens. It is pre-LN, bidirectional (every token sees the whole caption: the
token heads max-pool over positions, so there is no single EOS summary to protect; ``causal=True``
gives OpenCLIP's causal text transformer, whose last token summarises the caption) and carries the
parts the token projection head ties to: ``word_embeddings`` [V, H], ``mlm_transform`` (FC + GELU +
LayerNorm) and ``mlm_bias`` [V]. Pure torch, so it has no weights to fetch and no config format to
follow; the spec is its own portable config.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from tokenspace.models.towers import TEXT_TOWERS, TextTower, register


@register(TEXT_TOWERS, "transformer-mlm")
class TransformerMLMTower(TextTower):
    def __init__(self, vocab_size: int = 30522, width: int = 512, layers: int = 12, heads: int = 8,
                 max_len: int = 77, mlp_ratio: float = 4.0, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        self.hidden_size, self.vocab_size, self.max_len = width, vocab_size, max_len
        self.causal = bool(causal)
        self.spec = {"vocab_size": vocab_size, "width": width, "layers": layers, "heads": heads,
                     "max_len": max_len, "mlp_ratio": mlp_ratio, "dropout": dropout}
        if self.causal:
            self.spec["causal"] = True
        self.token_embedding = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.randn(max_len, width) * 0.01)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(width, heads, int(width * mlp_ratio), dropout, activation="gelu",
                                       batch_first=True, norm_first=True)
            for _ in range(layers)
        ])
        self.ln_final = nn.LayerNorm(width)
        self.mlm_transform = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width))
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.grad_checkpointing = False
        nn.init.normal_(self.token_embedding.weight, std=0.02)

    @property
    def word_embeddings(self) -> nn.Parameter:
        return self.token_embedding.weight  # [V, H]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] ids, [B, L] mask -> [B, L, H]."""
        L = input_ids.shape[1]
        if L > self.max_len:
            raise ValueError(f"{L} tokens exceed the tower's max_len {self.max_len}")
        x = self.token_embedding(input_ids) + self.position[:L]  # [B, L, H]
        pad = ~attention_mask.bool()  # True = ignore this key
        # causal: position j attends to positions <= j only (True above the diagonal = masked; boolean,
        # like the padding mask)
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1) if self.causal else None
        for layer in self.layers:
            if self.grad_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, causal, pad, use_reentrant=False)
            else:
                x = layer(x, src_mask=causal, src_key_padding_mask=pad)
        return self.ln_final(x)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.grad_checkpointing = enable

    def portable_spec(self) -> dict:
        return dict(self.spec)
