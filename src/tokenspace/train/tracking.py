"""Accuracy and sparsity through training: an ``evaluate`` callback for the Trainer.

The trainer's log.jsonl already has per-step batch nnz (nnz_image / nnz_text); this adds, at each
eval point, held-out retrieval recall together with Sparse CLIP's sparsity measures on the same split:
L0 (mean active features per vector, the paper's sparsity number), L0 as a fraction of the width
(the paper's "0.47%"), and the share of features that are alive at all.

It embeds through ``image_embed`` / ``text_embed`` into dense arrays instead of ``encode_*``: a
SparseBatch keeps only positive entries, which would silently change the no-ReLU ablation arm of
Sparse CLIP's Fig. 2a (its features are signed). For ReLU models both paths agree.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from tokenspace.eval import RetrievalEvaluator, active_feature_fraction, l0


@torch.no_grad()
def embed_dense(model, grids: np.ndarray, texts: Sequence[str], batch_size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(image rows [N, D], text rows [T, D]) as the model scores them (normalised for cosine models)."""
    model.eval()
    imgs, txts = [], []
    for s in range(0, len(grids), batch_size):
        g = torch.as_tensor(np.asarray(grids[s : s + batch_size]), dtype=torch.float32)
        imgs.append(model.normalize(model.image_embed(g)).float().numpy())
    for s in range(0, len(texts), batch_size):
        ids, mask = model.tokenize(list(texts[s : s + batch_size]))
        txts.append(model.normalize(model.text_embed(ids, mask)).float().numpy())
    return np.concatenate(imgs), np.concatenate(txts)


def sparsity_metrics(img: np.ndarray, txt: np.ndarray) -> dict[str, float]:
    """L0 counts nonzero entries (|a| > 0): a signed feature (no-ReLU arm) is active when negative too."""
    img, txt = np.abs(img), np.abs(txt)  # [N, D], [T, D]
    width = img.shape[1]
    li, lt = l0(img), l0(txt)
    return {"l0_image": li, "l0_text": lt, "l0_frac_image": li / width, "l0_frac_text": lt / width,
            "active_features_frac": active_feature_fraction(np.concatenate([img, txt]))}


def tracking_evaluator(grids: np.ndarray, texts: Sequence[str], text_to_image) -> Callable[[object], dict]:
    """An ``evaluate(model) -> dict`` for ``Trainer``: recall@1/5/10 both ways + L0 on a held-out split."""
    texts = list(texts)
    retrieval = RetrievalEvaluator(np.asarray(text_to_image))

    def evaluate(model) -> dict[str, float]:
        img, txt = embed_dense(model, grids, texts)
        out = retrieval(img, txt)
        out.update(sparsity_metrics(img, txt))
        return out

    return evaluate


def eval_history(log_path) -> list[dict]:
    """The eval rows of a run's log.jsonl, flattened: [{step, stage, <metrics>}, ...] in step order."""
    rows = []
    for line in Path(log_path).read_text().splitlines():
        rec = json.loads(line)
        if "eval" in rec:
            rows.append({"step": rec["step"], "stage": rec["stage"], **rec["eval"]})
    return rows
