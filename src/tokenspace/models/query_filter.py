"""Query expansion that stays on topic: no query hubs, and every added token related to the query's words.

A trained text side expands a query with tokens it never saw in it. Some of those carry meaning ("a cup of
coffee" -> beverage, mug); others are latent dimensions the model found useful in training and adds to
almost every query ("def", "tower", "wash" in "a red car", "a lighthouse" and "a cup of coffee" alike).
The user sees the latter as the query's words, and they match images that carry the same latent token.
Two rules, both fitted once and stored with the model's weights (a fused model's ``expansion_drop`` and
``related`` buffers, ``related_min`` in its config):

- **Query hubs are dropped.** Over a bank of training captions (never test text), a token the text side
  puts among the top ``top`` tokens of at least ``min_share`` of them, without it being their own word,
  is a hub (index/query_hubs.py measures the same on any query set).
- **No word pieces.** An expansion never adds a ``##`` piece on its own.
- **The rest must be related to a word of the query.** relatedness(u, query) = max over the query's own
  content tokens w of cos(e_u, e_w), with e the all-MiniLM-L6-v2 sentence encoder's vector of each
  vocabulary token read alone (``[CLS] token [SEP]``, mean-pooled, as sentence-transformers pools),
  centred and reduced to ``dim`` principal components (centring removes the direction every token shares:
  unrelated pairs fall near 0, "car"/"wheel" 0.43, "cat"/"kitten" 0.75). An expanded token below
  ``related_min`` is dropped. The query's own words always stay (the lexical anchor adds them).
Neither rule is in the three papers: docs/results.md labels the rows that use them.
"""
from __future__ import annotations

import numpy as np
import torch

from tokenspace.index.query_hubs import query_hubs
from tokenspace.models.towers import resolve_weights


def on_topic(own: torch.Tensor, input_ids: torch.Tensor, content: torch.Tensor, related: torch.Tensor,
             drop: torch.Tensor, related_min: float, chunk: int = 16) -> torch.Tensor:
    """[B, V] mask of the tokens an expansion may add: the query's own (``own`` > 0), or no hub
    (``drop`` == 0) and related to one of its content tokens (``content`` [B, L]: which ids count)."""
    table = related.float()  # [V, d] unit rows (zero rows: tokens never added)
    best = []
    for s in range(0, len(input_ids), chunk):  # [b, L, V] sims in chunks: 16 x 32 x 30,522 floats at most
        e = table[input_ids[s:s + chunk]]  # [b, L, d]
        sims = (e @ table.T).masked_fill(~content[s:s + chunk].bool()[..., None], float("-inf"))
        best.append(sims.amax(dim=1))  # [b, V]
    close = torch.cat(best) >= related_min if best else own.bool()
    return ((own > 0) | (close & (drop == 0))).to(own.dtype)


def token_vectors(encoder, tokenizer_vocab_size: int, dim: int = 64, batch_size: int = 1024) -> np.ndarray:
    """[V, dim] float32 unit rows: each vocabulary token alone through ``encoder`` (a BERT-style
    ``transformers`` model over the same WordPiece ids, e.g. all-MiniLM-L6-v2), mean-pooled, centred and
    projected on its ``dim`` principal components."""
    cls_id, sep_id = 101, 102  # bert-base-uncased's [CLS] / [SEP]: the vocabulary every part shares
    encoder.eval()
    outs = []
    with torch.no_grad():
        for s in range(0, tokenizer_vocab_size, batch_size):
            ids = torch.arange(s, min(s + batch_size, tokenizer_vocab_size))[:, None]
            ids = torch.cat([torch.full_like(ids, cls_id), ids, torch.full_like(ids, sep_id)], dim=1)
            outs.append(encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state.mean(1))
    e = torch.nn.functional.normalize(torch.cat(outs), dim=-1).numpy().astype(np.float64)
    e -= e.mean(axis=0)
    _, _, vt = np.linalg.svd(e, full_matrices=False)
    p = e @ vt[:dim].T
    return (p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def minilm_token_vectors(dim: int = 64, ref: str = "asset:all-minilm-l6-v2") -> np.ndarray:
    """``token_vectors`` of the all-MiniLM-L6-v2 sentence encoder (an offline asset: `tokenspace assets
    install all-minilm-l6-v2`; its vocabulary is bert-base-uncased's, the one every part here shares)."""
    from transformers import AutoModel  # start-up: only a release build fits a filter

    return token_vectors(AutoModel.from_pretrained(str(resolve_weights(ref))), 30522, dim)


def fit_query_filter(model, bank_texts, vectors: np.ndarray, related_min: float, top: int = 20,
                     min_share: float = 0.1) -> dict:
    """Fill a fused model's filter: hubs from ``bank_texts`` (training captions), the token vectors
    ``vectors`` [V, d] (``token_vectors``), the threshold. Returns what was fitted (for the model card)."""
    if model.related_min is None:
        raise ValueError("this fused model has no query filter: build it with related_min set")
    if vectors.shape != tuple(model.related.shape):
        raise ValueError(f"token vectors are {vectors.shape}, the model holds {tuple(model.related.shape)}")
    model.related_min = None  # the bank's expansion as the parts give it
    model.expansion_drop.zero_()
    try:
        rows = model.encode_text(list(bank_texts)).to_scipy().tocsr()
    finally:
        model.related_min = float(related_min)
    own = [set(model.tokenizer.token_ids(t.lower())) for t in bank_texts]
    rows = rows.tolil()
    for i, ids in enumerate(own):  # a caption's own words are never hubs for it
        for t in ids:
            if t < rows.shape[1]:
                rows[i, t] = 0
    report = query_hubs(rows.tocsr(), top=top, min_share=min_share)
    drop = torch.zeros_like(model.expansion_drop)
    drop[list(report.hubs)] = 1.0
    # a word piece alone ("##burn") is no word a reader recognises: an expansion never adds one (a query's
    # own pieces stay: the anchor adds them)
    drop[[i for i, t in enumerate(model.vocab.tokens) if t.startswith("##")]] = 1.0
    model.expansion_drop.copy_(drop)
    model.related.copy_(torch.from_numpy(vectors).to(model.related.dtype))
    return {"hubs": report.to_dict(model.vocab.tokens)["hubs"], "bank": len(bank_texts), "top": top,
            "min_share": min_share, "related_min": float(related_min), "related_dim": vectors.shape[1]}
