"""A model's text embedding of every vocabulary token on its own: the lexicon of a dense model.

STAIR (Sec. 5.1, Table 5's CLIP arm) reads a dense model in token space by scoring an image against
each token's text embedding: image i's score for token v is ``image_emb[i] . token_embeddings[v]``.
``vocabulary_embeddings`` (below) (the interpretability evaluation) and the sparsified family's head
(models/sparsified.py, initialised from it) both take the table from here.
"""
from __future__ import annotations

import numpy as np
import torch

from tokenspace.models.dual import DualEncoder


@torch.no_grad()
def token_embeddings(model: DualEncoder, batch_size: int = 2048) -> torch.Tensor:
    """[V, D] float32 on the model's device: each tokenizer-vocabulary token alone (``[CLS] token
    [SEP]``) through the model's text side, in the form the model scores with (unit rows for cosine
    models). Token ids go in directly, so a sub-word (``##fish``) is that one token, not the pieces its
    spelling would tokenize into. Leaves the model in eval mode."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    vocab = model.tokenizer.vocab
    cls_id, sep_id = vocab.id("[CLS]"), vocab.id("[SEP]")
    model.eval()
    outs = []
    for s in range(0, len(vocab), batch_size):
        ids = torch.arange(s, min(s + batch_size, len(vocab)), dtype=torch.int64, device=model.device)[:, None]
        ids = torch.cat([torch.full_like(ids, cls_id), ids, torch.full_like(ids, sep_id)], dim=1)  # [b, 3]
        outs.append(model.normalize(model.text_embed(ids, torch.ones_like(ids))).float())  # [b, D]
    return torch.cat(outs)  # a vocabulary holds [CLS] and [SEP]: never empty


def vocabulary_embeddings(model: DualEncoder, batch_size: int = 2048) -> np.ndarray:
    """(V, D) float32 on the CPU: ``token_embeddings`` as an array. A dense model's lexicon scores (STAIR
    Sec. 5.1, Table 5's CLIP arm): image i's score for token v is image_emb[i] . out[v]. Token ids go in
    directly, so a sub-word (``##fish``) is that one token, not the pieces its spelling would tokenize into."""
    return token_embeddings(model, batch_size).cpu().numpy()
