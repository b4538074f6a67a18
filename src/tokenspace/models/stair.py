"""STAIR (Chen et al.): token projection heads tied to the word embeddings, max pooling, log(1+ReLU).

    p(h_j) = e . TRANSFORM(h_j) + b          (eq. 4; TRANSFORM = FC + GELU + LayerNorm, e tied to the
                                              text tower's word embeddings)
    ENC    = log(1 + ReLU(max_j p(h_j)))     (eq. 5; j over image grid cells or text tokens)
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.dual import DualEncoder
from tokenspace.models.maxproj import max_projection
from tokenspace.models.options import StairOptions
from tokenspace.models.pooling import grid_to_cells, log1p_relu


class StairModel(DualEncoder):
    family = "stair"
    similarity_fn_name = "cosine"  # eq. 2
    Options = StairOptions
    # dtype of the two big products into the vocabulary; the trainer sets bf16 for bf16 recipes
    compute_dtype = torch.float32

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        t = self.text_tower
        if t.vocab_size != len(vocab):
            raise ValueError(f"text tower has {t.vocab_size} word embeddings but the vocabulary {len(vocab)}")
        hidden = config.head_hidden or t.hidden_size
        if hidden != t.hidden_size:
            raise ValueError("the image TRANSFORM must output the word-embedding width to share e")
        # config.extra: StairOptions (models/options.py; all off by default, the paper's head). What the
        # options did on emoji:val and why stair-emoji turns image_revive_grad on: docs/results.md,
        # "STAIR head options"
        opts = config.options
        c, mid = self.image_tower.out_channels, opts.image_head_mid
        if mid:
            self.image_transform = nn.Sequential(
                nn.Linear(c, mid), nn.GELU(), nn.Linear(mid, hidden), nn.GELU(), nn.LayerNorm(hidden)
            )
        else:
            self.image_transform = nn.Sequential(nn.Linear(c, hidden), nn.GELU(), nn.LayerNorm(hidden))
        self.image_revive = opts.image_revive_grad
        self.image_top_n, self.text_top_n = opts.image_top_n, opts.text_top_n  # encode_* only (DualEncoder)
        # the image side has its own bias b
        if opts.image_bias_init == "mlm":
            self.image_bias = nn.Parameter(t.mlm_bias.detach().clone())
        else:
            self.image_bias = nn.Parameter(torch.full_like(t.mlm_bias.detach(), opts.image_bias_init))
        # bracketed entries ([CLS], [SEP], [MASK], [unused12], ...) name no concept: never emitted.
        # Derived from the vocabulary, so not saved with the weights.
        keep = torch.tensor([not (tok.startswith("[") and tok.endswith("]")) for tok in vocab.tokens])
        self.register_buffer("output_mask", keep.float(), persistent=False)

    # ------------------------------------------------------------------ heads
    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> per-cell vocabulary scores [B, h*w, V] (also the localisation heatmaps)."""
        h = self.image_transform(grid_to_cells(grid))  # [B, cells, H]
        return h @ self.text_tower.word_embeddings.T + self.image_bias  # [B, cells, V]

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        h = self.image_transform(grid_to_cells(grid))  # [B, cells, H]
        best = max_projection(h, self.text_tower.word_embeddings, self.image_bias, None, self.compute_dtype)
        # [B, V]; equals max_log1p_relu(self.image_scores(grid)) on the emitted entries
        return log1p_relu(best, self.image_revive) * self.output_mask

    def text_embed(self, input_ids, attention_mask, restrict_to_input: bool = False) -> torch.Tensor:
        """[B, L] ids -> [B, V]. ``restrict_to_input`` is STAIR stage 1 (eq. 8): only the tokens that
        occur in the text may be active. It is computed on those columns alone (an L x L product per text
        instead of L x V), which is what makes stage 1 cheap; the result equals the full output masked."""
        t = self.text_tower
        h = t.mlm_transform(t(input_ids, attention_mask))  # [B, L, H]
        valid = attention_mask.bool() & ~self._special(input_ids)
        if not restrict_to_input:
            best = max_projection(h, t.word_embeddings, t.mlm_bias, attention_mask, self.compute_dtype)
            return torch.log1p(torch.relu(best)) * self.output_mask  # [B, V]
        e = t.word_embeddings[input_ids]  # [B, L(tokens k), H]
        s = torch.einsum("bjh,bkh->bjk", h, e) + t.mlm_bias[input_ids][:, None, :]  # [B, L(j), L(k)]
        s = s.masked_fill(~attention_mask.bool()[:, :, None], float("-inf"))
        w = torch.log1p(torch.relu(s.amax(dim=1)))  # [B, L(k)]: weight of each input token
        w = w * valid  # specials and padding carry no weight (MASK excludes them)
        out = torch.zeros(input_ids.shape[0], t.vocab_size, dtype=w.dtype, device=w.device)
        return out.scatter_reduce(1, input_ids, w, reduce="amax", include_self=True)

    def _special(self, input_ids: torch.Tensor) -> torch.Tensor:
        special = torch.as_tensor(self.tokenizer.vocab.special_ids, device=input_ids.device)
        return torch.isin(input_ids, special)

    def token_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """MASK(y) [B, V]: 1 for every (non-special) token in the text; STAIR_IMAGE's text vector."""
        valid = (attention_mask.bool() & ~self._special(input_ids)).float()
        out = torch.zeros(input_ids.shape[0], self.text_tower.vocab_size, device=input_ids.device)
        return out.scatter_reduce(1, input_ids, valid, reduce="amax", include_self=True)

    def image_parameters(self):
        """What stage 2 freezes: the image tower, its TRANSFORM and bias, and e (tied, so shared)."""
        yield from self.image_tower.parameters()
        yield from self.image_transform.parameters()
        yield self.image_bias
        yield self.text_tower.word_embeddings
