"""VisualSparta (Lu et al. 2021): non-contextual query tokens against contextualised image fragments.

    y_i    = max_j (w_i . H_j)              (eq. 10; w_i = E_tok(query token i), H_j = fragment j)
    phi    = ReLU(y_i + b)                  (eq. 11; one trainable scalar b)
    f(q,v) = sum_i log(phi(y_i) + 1)        (eq. 12; i over the query's tokens, repeats included)

Query side: no network at all. The query is its bag of tokens, and because eq. 12 sums over token
*positions*, a token that occurs twice counts twice: ``text_embed`` returns token **counts** [B, V]
(special tokens and padding excluded). The word embeddings E_tok (the text tower's, trainable) only
enter through the image side, which scores every vocabulary term v:

    image_embed(v) = log(1 + ReLU(max_j (e_v . H_j) + b))      [B, V]   (eq. 14 cache, log of eq. 15)

so f(q, v) = text_embed(q) . image_embed(v) exactly, and an index of (top-n pruned) image rows
answers queries by lookup and sum (eq. 15). Image fragments are the backbone's grid cells plus
learned position embeddings, projected to the word-embedding width (eq. 8) and contextualised by a
small transformer encoder (eq. 9). The paper's detector label tokens (eqs. 6-7) are an option,
``extra.label_fragments``: the backbone's ImageNet classifier stands in for the detector
(models/label_fragments.py; off in the paper-faithful configs, which have no detector).

Config ``extra`` (``VisualSpartaOptions``, models/options.py): layers (2), heads (2), ffn (4 x width),
dropout (0.1), max_cells (64), bias_init (0.0), top_n (None: index rows keep every positive term; n: keep
the n heaviest), label_fragments.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tokenspace.models.dual import DualEncoder
from tokenspace.models.label_fragments import LabelFragments
from tokenspace.models.maxproj import max_projection
from tokenspace.models.options import VisualSpartaOptions
from tokenspace.models.pooling import grid_to_cells


def text_to_image_loss(logits: torch.Tensor, cols: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
    """VisualSparta's training objective (eq. 13) with in-batch negatives (the model's
    ``contrastive_objective``, which the trainer's loss calls): [Bi, Bt] image x text scores, positives
    on the diagonal -> mean over queries of -J,

        J = f(q, v+) - log sum_k exp f(q, k)

    for each text query q, over the images of the batch: a cross entropy that picks the query's own
    image. The paper's sum is written over the negatives V-; like its reference implementation (SPARTA,
    Zhao et al. 2020: "we use cross entropy loss") we include the positive in the normaliser, which is
    the standard softmax cross entropy and keeps J bounded above by 0. Only the text -> image direction
    is trained: VisualSparta is a text-to-image retriever. No temperature multiplies f (the model's
    ``logit_scale`` is fixed at 1). It lives with the model, which names it as its objective, so the
    models layer never imports train/. Under data parallelism ``cols`` [B, b] holds every image against
    this rank's b queries, whose first row in the global batch is ``offset`` (``logits`` is then unused:
    the trainer's loss passes one rank's blocks alike to every objective)."""
    if cols is None:
        if logits.shape[0] != logits.shape[1]:
            raise ValueError(f"in-batch negatives need a square score matrix, got {tuple(logits.shape)}")
        cols = logits
    target = offset + torch.arange(cols.shape[1], device=cols.device)
    return F.cross_entropy(cols.T, target)  # rows = queries, columns = candidate images


class VisualSpartaModel(DualEncoder):
    family = "visualsparta"
    similarity_fn_name = "dot"  # eq. 15 is a plain sum of looked-up term scores: no normalisation
    Options = VisualSpartaOptions
    compute_dtype = torch.float32  # the trainer switches to bf16 for bf16 recipes

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        t = self.text_tower
        if t.vocab_size != len(vocab):
            raise ValueError(f"text tower has {t.vocab_size} word embeddings but the vocabulary {len(vocab)}")
        opts = config.options  # VisualSpartaOptions (models/options.py)
        width = t.hidden_size  # fragments live in the word-embedding space (eq. 10 is a dot product)
        self.max_cells = opts.max_cells
        self.image_top_n = opts.top_n  # index-time pruning (paper Table 3); None keeps all terms
        self.fragment_proj = nn.Linear(self.image_tower.out_channels, width)  # eq. 8: E_image W + b
        self.position = nn.Parameter(torch.randn(self.max_cells, width) * 0.02)
        self.fragment_norm = nn.LayerNorm(width)  # BERT-style embedding norm before the encoder
        layer = nn.TransformerEncoderLayer(
            width, opts.heads, dim_feedforward=opts.ffn or 4 * width,
            dropout=opts.dropout, activation="gelu", batch_first=True,
        )
        # enable_nested_tensor=False: the fast path would change numerics between train and eval
        self.fragment_encoder = nn.TransformerEncoder(layer, opts.layers, enable_nested_tensor=False)
        self.term_bias = nn.Parameter(torch.tensor(opts.bias_init))  # eq. 11's b
        # eqs. 6-7 label fragments from the backbone's ImageNet classifier: an option, off in the paper configs
        self.labels = None
        if opts.label_fragments:
            self.labels = LabelFragments(opts.label_fragments, self.image_tower.out_channels, width, self.tokenizer)

    # ------------------------------------------------------------------ training-time pieces
    @property
    def logit_scale(self) -> torch.Tensor:
        # eq. 13 puts f(q, v) into the softmax as is: no temperature (the inherited parameter is unused)
        return torch.ones((), device=self.term_bias.device)

    @staticmethod
    def contrastive_objective(logits: torch.Tensor, cols: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
        """Eq. 13 with in-batch negatives: text -> image cross entropy only (see SparseContrastiveLoss)."""
        return text_to_image_loss(logits, cols, offset)

    def image_fragments(self, grid: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> contextualised fragments H_image [B, h*w, width] (eqs. 8-9)."""
        cells = grid_to_cells(grid)  # [B, L, C]
        n = cells.shape[1]
        if n > self.max_cells:
            raise ValueError(f"grid has {n} cells but the model has {self.max_cells} position embeddings "
                             f"(config extra.max_cells)")
        a = self.fragment_norm(self.fragment_proj(cells) + self.position[:n])  # [B, L, width]
        if self.labels is not None:  # eq. 8: a = [E_image W + b; E_label]
            a = torch.cat([a, self.labels(cells, self.text_tower.word_embeddings)], dim=1)  # [B, L+k, width]
        return self.fragment_encoder(a)  # [B, L(+k), width]

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """Per-fragment term scores e_v . H_j + b: [B, h*w, V] (localisation heatmaps)."""
        cells = grid.shape[2] * grid.shape[3]  # label fragments have no place on the grid
        return self.image_fragments(grid)[:, :cells] @ self.text_tower.word_embeddings.T + self.term_bias

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> [B, V] term cache log(1 + ReLU(max_j e_v . H_j + b)) (eqs. 10, 11, 14)."""
        h = self.image_fragments(grid)  # [B, L, width]
        e = self.text_tower.word_embeddings  # [V, width]
        # the scalar b broadcast to every term; max_projection adds it after the max (same thing)
        best = max_projection(h, e, self.term_bias.expand(e.shape[0]), None, self.compute_dtype)  # [B, V]
        return torch.log1p(torch.relu(best))

    def _special(self, input_ids: torch.Tensor) -> torch.Tensor:
        special = torch.as_tensor(self.tokenizer.vocab.special_ids, device=input_ids.device)
        # not torch.isin: it has no ONNX symbolic (models/onnx_export.py)
        return (input_ids[..., None] == special).any(-1)

    def query_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] float: 1 at the query's real tokens (no [CLS]/[SEP]/[UNK]/padding)."""
        return (attention_mask.bool() & ~self._special(input_ids)).float()

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] ids -> [B, V] token counts (eq. 12 sums over positions, so repeats count). No
        ``restrict_to_input``: the query side has no model to restrict (not RestrictsText)."""
        valid = self.query_mask(input_ids, attention_mask)
        out = torch.zeros(input_ids.shape[0], self.text_tower.vocab_size, device=input_ids.device)
        return out.scatter_add(1, input_ids, valid)

    def direct_score(self, grid: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """f(q, v) computed as eqs. 10-12 read, token by token, without the vocabulary cache:
        [Bi] grids x [Bt] queries -> [Bi, Bt]. The reference the indexed path must equal."""
        h = self.image_fragments(grid)  # [Bi, J, width]
        w = self.text_tower.word_embeddings[input_ids]  # [Bt, m, width]  (eq. 1)
        y = torch.einsum("bjd,tid->btij", h, w).amax(-1)  # [Bi, Bt, m]  (eq. 10)
        f = torch.log1p(torch.relu(y + self.term_bias))  # eqs. 11-12
        return (f * self.query_mask(input_ids, attention_mask)).sum(-1)  # [Bi, Bt]

    def image_parameters(self):
        """What a frozen-image stage freezes: everything that builds the term cache, including e."""
        yield from self.image_tower.parameters()
        yield from self.fragment_proj.parameters()
        yield self.position
        yield from self.fragment_norm.parameters()
        yield from self.fragment_encoder.parameters()
        yield self.term_bias
        yield self.text_tower.word_embeddings
        if self.labels is not None:
            yield from self.labels.parameters()

    def portable_config(self):
        cfg = super().portable_config()
        if self.labels is not None:  # a saved folder holds the label table and classifier among its weights
            cfg.extra = {**cfg.extra, "label_fragments": self.labels.portable_spec()}
        return cfg
