"""Image-text retrieval recall@K (COCO / Flickr30K style: several captions per image).

Metric names follow clip_benchmark: ``image_retrieval_recall@K`` is text->image (a caption finds its
image), ``text_retrieval_recall@K`` is image->text (an image query hits if ANY of its captions is in
the top K). ``mean_recall`` averages all of them.

Ties count against the query: a hit at K needs fewer than K *non-relevant* items scoring >= the best
relevant item. This matters for sparse models, whose scores are exactly 0 for many pairs: a relevant
item with score 0 is not retrieved (an inverted index would not even return it), instead of being
"found" thanks to its position in the list. Without ties this equals the usual top-K definition.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.eval.scoring import Embeddings, n_rows, score_blocks

DEFAULT_KS = (1, 5, 10)


def _check_mapping(text_to_image, n_images: int, n_texts: int) -> np.ndarray:
    t2i = np.asarray(text_to_image, dtype=np.int64)
    if t2i.shape != (n_texts,):
        raise ValueError(f"text_to_image needs one image index per text ({n_texts}), got shape {t2i.shape}")
    if n_texts and (t2i.min() < 0 or t2i.max() >= n_images):
        raise ValueError(f"text_to_image has indices outside [0, {n_images})")
    return t2i


def text_to_image_ranks(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                        metric: str = "dot") -> np.ndarray:
    """Per text: how many *other* images score >= its own image (0 = retrieved first)."""
    t2i = _check_mapping(text_to_image, n_rows(image_emb), n_rows(text_emb))
    out = np.empty(len(t2i), np.int64)
    for start, blk in score_blocks(text_emb, image_emb, metric):
        rows = np.arange(blk.shape[0])
        gt = blk[rows, t2i[start:start + blk.shape[0]]]
        out[start:start + blk.shape[0]] = (blk >= gt[:, None]).sum(axis=1) - 1  # minus the image itself
    return out


def image_to_text_ranks(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                        metric: str = "dot") -> np.ndarray:
    """Per image: how many non-caption texts score >= its best caption. -1 for images without captions."""
    t2i = _check_mapping(text_to_image, n_rows(image_emb), n_rows(text_emb))
    out = np.full(n_rows(image_emb), -1, np.int64)
    for start, blk in score_blocks(image_emb, text_emb, metric):
        img = start + np.arange(blk.shape[0])
        relevant = t2i[None, :] == img[:, None]  # (block, texts): which texts caption this image
        best = np.where(relevant, blk, -np.inf).max(axis=1)
        ahead = ((blk >= best[:, None]) & ~relevant).sum(axis=1)
        has = relevant.any(axis=1)
        out[start:start + blk.shape[0]] = np.where(has, ahead, -1)
    return out


def recall_from_ranks(ranks: np.ndarray, k: int) -> float:
    """Fraction of queries (those with rank >= 0) whose relevant item is in the top k."""
    valid = ranks >= 0
    return float(np.mean(ranks[valid] < k)) if valid.any() else float("nan")


def retrieval_metrics(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                      ks: Sequence[int] = DEFAULT_KS, metric: str = "dot") -> dict[str, float]:
    """Recall@K both ways plus ``mean_recall``; see the module docstring for the tie rule."""
    t_ranks = text_to_image_ranks(image_emb, text_emb, text_to_image, metric)
    i_ranks = image_to_text_ranks(image_emb, text_emb, text_to_image, metric)
    out: dict[str, float] = {}
    for k in ks:
        out[f"image_retrieval_recall@{k}"] = recall_from_ranks(t_ranks, k)
    for k in ks:
        out[f"text_retrieval_recall@{k}"] = recall_from_ranks(i_ranks, k)
    out["mean_recall"] = float(np.mean(list(out.values())))
    return out


class RetrievalEvaluator:
    """Binds a dataset's caption->image mapping; call with the model's image and text embeddings.

    >>> ev = RetrievalEvaluator(text_to_image=[0, 0, 1])
    >>> ev(image_emb, text_emb)["image_retrieval_recall@1"]
    """

    def __init__(self, text_to_image, ks: Sequence[int] = DEFAULT_KS, metric: str = "dot",
                 primary_metric: str = "mean_recall"):
        self.text_to_image = np.asarray(text_to_image, dtype=np.int64)
        self.ks = tuple(ks)
        self.metric = metric
        self.primary_metric = primary_metric

    def __call__(self, image_emb: Embeddings, text_emb: Embeddings) -> dict[str, float]:
        return retrieval_metrics(image_emb, text_emb, self.text_to_image, self.ks, self.metric)
