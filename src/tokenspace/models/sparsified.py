"""Sparsified: a sparse head over a frozen dense model's embeddings, in the WordPiece token space.

    e = n(dense.image_embed(grid))  or  n(dense.text_embed(ids, mask))    [B, D]  frozen; n: L2 norm
    s = log(1 + ReLU(scale * (e @ W.T) + b)) * emitted                       [B, V]

A user with a dense CLIP-style model (the dense family, or any model whose ``encode_*`` give dense rows,
e.g. over Hugging Face or open_clip CLIP towers) gets interpretable vectors an inverted index can hold,
without retraining its towers: only the head learns, FLOPs-regularised as STAIR (recipe
``sparsify-dense``, ``tokenspace sparsify``). Not a paper model.

W [V, D] is shared by the two sides (one token space); each side has its own ``scale`` and bias b [V].
Row v of W starts as the dense model's own text embedding of token v alone (models/lexicon.py), so
before any training ``e @ W.T`` is STAIR's lexicon score (Sec. 5.1, Table 5's CLIP arm): the cosine
between an image and a word. The head reads as words from the first step; training moves the words.

Where the threshold starts: a dense model's cosines sit in a narrow band of its own, and the image side's
band is not the text side's (the modality gap), so no constant bias suits every model. On its first
training batch each side calibrates itself (a data-dependent init, as ActNorm's): scale = 1 / sd and
b = -q / sd, with sd the standard deviation and q the (1 - init_active) quantile of that batch's lexicon
scores over the emitted tokens. The pre-activation is then each score's distance above q in standard
deviations: ``init_active`` (1%: ~300 of 30,522 tokens, in the range of STAIR's image vectors) of the
tokens start active, with weights of order 1 as STAIR's. Until then (an untrained head) scale is 1 and
b 0: every token with a positive cosine is active.

The dense model is ``self.dense`` (built by registry.inner_model: a folder or release name when a config
is built, its portable config in a saved folder). Its parameters are frozen and it stays in eval mode
(no dropout) whatever ``train()`` is called; its forward runs under no_grad, so even when the trainer
makes every parameter outside the image tower trainable, none of its parameters gets a gradient and the
optimizer leaves them as they are. Its towers *are* this model's ``image_tower`` / ``text_tower`` (the
same modules, saved once, under dense.*) and its tokenizer is this model's: the trainer's grid cache
and tokenization work unchanged. The config names the towers ``{"type": "from-dense"}``; in
memory they are the dense config's specs (the grid cache's key), and ``max_text_len`` is the dense's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from tokenspace.models.config import ModelConfig
from tokenspace.models.dual import DualEncoder
from tokenspace.models.lexicon import token_embeddings
from tokenspace.models.options import SparsifiedOptions
from tokenspace.models.pooling import log1p_relu
from tokenspace.models.registry import inner_model

FROM_DENSE = {"type": "from-dense"}  # a sparsified config's towers: the dense model's own


class SparsifiedModel(DualEncoder):
    family = "sparsified"
    similarity_fn_name = "cosine"
    Options = SparsifiedOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        opts = config.options
        if opts.dense is None:
            raise ValueError("a sparsified model needs extra.dense: the dense model's folder or release name "
                             "(tokenspace sparsify --dense DIR)")
        for side in ("image_tower", "text_tower"):
            if getattr(config, side) != FROM_DENSE:
                raise ValueError(f"a sparsified model uses the dense model's towers: its {side} must be "
                                 f"{FROM_DENSE}, not {getattr(config, side)}")
        dense = inner_model(opts.dense, tokenizer_vocab or vocab)
        named = opts.dense if isinstance(opts.dense, str) else "extra.dense"
        if dense.sparse:
            raise ValueError(f"sparsify needs a dense model (one whose encode_* give dense rows); "
                             f"{named} is a {dense.family} model, already sparse")
        if dense.tokenizer.vocab.tokens != vocab.tokens:
            raise ValueError(f"the dense model's vocabulary ({len(dense.tokenizer.vocab)} tokens) is not the "
                             f"config's vocab ({len(vocab)}): set the sparsified config's vocab to the dense "
                             f"model's vocab.txt")
        # the dense model's tower specs (the grid cache's key) and text length, in memory (see the doc)
        config = ModelConfig.from_dict({**config.to_dict(), "image_tower": dense.config.image_tower,
                                        "text_tower": dense.config.text_tower,
                                        "max_text_len": dense.config.max_text_len})
        super().__init__(config, vocab, tokenizer_vocab, build_towers=False)  # the dense model's: see the properties
        self.tokenizer = dense.tokenizer
        self.dense = dense
        self.dense.requires_grad_(False)
        self.dense.eval()
        self.init_active, self.revive = opts.init_active, opts.revive_grad
        self.image_top_n, self.text_top_n = opts.image_top_n, opts.text_top_n  # encode_* only (DualEncoder)
        if isinstance(opts.dense, str):  # a config being built: the lexicon of the dense model
            lexicon = token_embeddings(dense)  # [V, D] unit rows
        else:  # a saved folder: the trained W arrives with the weights
            lexicon = torch.zeros(len(vocab), self._dense_width())
        self.lexicon = nn.Parameter(lexicon)  # W [V, D], shared by both sides
        self.image_scale = nn.Parameter(torch.tensor(1.0))
        self.text_scale = nn.Parameter(torch.tensor(1.0))
        self.image_bias = nn.Parameter(torch.zeros(len(vocab)))
        self.text_bias = nn.Parameter(torch.zeros(len(vocab)))
        # set by the first training batch of each side (see the module doc); saved, so a resume or a
        # saved folder never calibrates again
        self.register_buffer("image_calibrated", torch.tensor(False))
        self.register_buffer("text_calibrated", torch.tensor(False))
        # bracketed entries ([CLS], [SEP], [unused12], ...) name no concept: never emitted (as STAIR's)
        keep = torch.tensor([not (t.startswith("[") and t.endswith("]")) for t in vocab.tokens])
        self.register_buffer("output_mask", keep.float(), persistent=False)

    def _dense_width(self) -> int:
        """D, the dense model's embedding width (a probe text: [CLS] [SEP])."""
        v = self.tokenizer.vocab
        ids = torch.tensor([[v.id("[CLS]"), v.id("[SEP]")]])
        with torch.no_grad():
            return self.dense.text_embed(ids, torch.ones_like(ids)).shape[-1]

    # ------------------------------------------------------------------ the frozen dense model
    # The towers are the dense model's modules, registered under ``dense`` alone: every weight has one
    # name in the state dict. (Registered twice, safetensors would store a shared tensor once but read
    # a BatchNorm's num_batches_tracked back as "unexpected" under the second name.)
    @property
    def image_tower(self) -> nn.Module:
        return self.dense.image_tower

    @property
    def text_tower(self) -> nn.Module:
        return self.dense.text_tower

    def train(self, mode: bool = True):
        """Train the head only: the dense model stays in eval mode (no dropout, BatchNorm statistics
        kept) and its parameters frozen, whatever the caller (the trainer) asks of the whole model."""
        super().train(mode)
        self.dense.eval()
        self.dense.requires_grad_(False)
        return self

    def image_grid(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.dense.image_grid(pixels)

    def dense_image(self, grid: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> [B, D]: the dense model's image embedding, as it scores with (unit rows)."""
        with torch.no_grad():
            return self.dense.normalize(self.dense.image_embed(grid)).float()

    def dense_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.dense.normalize(self.dense.text_embed(input_ids, attention_mask)).float()

    # ------------------------------------------------------------------ the head
    def _head(self, e: torch.Tensor, side: str) -> torch.Tensor:  # [B, D] -> [B, V]
        lex = e @ self.lexicon.T  # [B, V] lexicon scores (cosines at init)
        done = getattr(self, f"{side}_calibrated")
        if self.training and not done:
            self._calibrate(lex, side)
        z = getattr(self, f"{side}_scale") * lex + getattr(self, f"{side}_bias")
        return log1p_relu(z, self.revive) * self.output_mask

    @torch.no_grad()
    def _calibrate(self, lex: torch.Tensor, side: str) -> None:
        """scale = 1 / sd, b = -q / sd from this batch's lexicon scores over the emitted tokens: a fraction
        init_active of them start active (the module doc says why). Under torchrun the ranks average
        their statistics, so every rank starts from the same head."""
        flat = lex[:, self.output_mask.bool()].flatten().float()
        k = min(flat.numel(), max(1, round((1 - self.init_active) * flat.numel())))
        stats = torch.stack([flat.kthvalue(k).values, flat.std().clamp_min(1e-6)])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(stats)
            stats /= dist.get_world_size()
        q, sd = stats
        getattr(self, f"{side}_scale").fill_(1 / sd)
        getattr(self, f"{side}_bias").fill_(-q / sd)
        getattr(self, f"{side}_calibrated").fill_(True)

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:  # [B, C, h, w] -> [B, V]
        return self._head(self.dense_image(grid), "image")

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # [B, L] -> [B, V]
        return self._head(self.dense_text(input_ids, attention_mask), "text")

    def image_parameters(self):
        """What a freeze_image stage freezes: the (frozen) tower, the image scale and bias, and W (shared)."""
        yield from self.image_tower.parameters()
        yield self.image_scale
        yield self.image_bias
        yield self.lexicon

    # ------------------------------------------------------------------ persistence
    def portable_config(self) -> ModelConfig:
        """The dense model travels as its portable config in extra.dense (its weights are in this folder's
        model.safetensors, under dense.*): the folder loads without the dense model's own folder."""
        cfg = super().portable_config()
        cfg.image_tower, cfg.text_tower = dict(FROM_DENSE), dict(FROM_DENSE)
        cfg.extra = {**cfg.extra, "dense": self.dense.portable_config().to_dict()}
        return cfg
