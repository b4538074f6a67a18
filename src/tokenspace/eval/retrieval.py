"""Image-text retrieval recall@K (COCO / Flickr30K style: several captions per image).

Metric names follow clip_benchmark: ``image_retrieval_recall@K`` is text->image (a caption finds its
image), ``text_retrieval_recall@K`` is image->text (an image query hits if ANY of its captions is in
the top K). ``mean_recall`` averages all of them.

Two tie rules (``ties=``):

- ``"query"`` (default, used in every table here): ties count against the query: a hit at K needs
  fewer than K *non-relevant* items scoring >= the best relevant item. This matters for sparse models,
  whose scores are exactly 0 for many pairs: a relevant item with score 0 is not retrieved (an
  inverted index would not even return it), instead of being "found" thanks to its position in the
  list. Stricter than clip_benchmark.
- ``"position"``: clip_benchmark-compatible: the plain top-K of a sort by score in which equal scores
  keep their position (the lower index first), the order ``torch.topk`` gives in practice. A relevant
  item tied with others is found if it comes first among them.

Without ties the two are equal. ``fold_retrieval_metrics`` gives the COCO-1K protocol (the 5K test
images in 5 folds of 1K, each fold searched on its own, recall averaged over the folds).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.eval.scoring import Embeddings, n_rows, score_blocks

DEFAULT_KS = (1, 5, 10)
TIES = ("query", "position")


def _check_ties(ties: str) -> None:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")


def _check_mapping(text_to_image, n_images: int, n_texts: int) -> np.ndarray:
    t2i = np.asarray(text_to_image, dtype=np.int64)
    if t2i.shape != (n_texts,):
        raise ValueError(f"text_to_image needs one image index per text ({n_texts}), got shape {t2i.shape}")
    if n_texts and (t2i.min() < 0 or t2i.max() >= n_images):
        raise ValueError(f"text_to_image has indices outside [0, {n_images})")
    return t2i


def _ahead(blk: np.ndarray, best: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per row: items before column ``first`` (score ``best``) in a position-stable sort by score."""
    cols = np.arange(blk.shape[1])[None, :]
    return (blk > best[:, None]).sum(axis=1) + ((blk == best[:, None]) & (cols < first[:, None])).sum(axis=1)


def text_to_image_ranks(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                        metric: str = "dot", ties: str = "query") -> np.ndarray:
    """Per text: how many *other* images score >= its own image (0 = retrieved first); with
    ``ties="position"`` how many images come before it in a position-stable sort."""
    _check_ties(ties)
    t2i = _check_mapping(text_to_image, n_rows(image_emb), n_rows(text_emb))
    out = np.empty(len(t2i), np.int64)
    for start, blk in score_blocks(text_emb, image_emb, metric):
        rows = np.arange(blk.shape[0])
        own = t2i[start:start + blk.shape[0]]
        gt = blk[rows, own]
        if ties == "position":
            out[start:start + blk.shape[0]] = _ahead(blk, gt, own)
        else:
            out[start:start + blk.shape[0]] = (blk >= gt[:, None]).sum(axis=1) - 1  # minus the image itself
    return out


def image_to_text_ranks(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                        metric: str = "dot", ties: str = "query") -> np.ndarray:
    """Per image: how many non-caption texts score >= its best caption (``ties="position"``: how many
    texts come before its first caption in a position-stable sort). -1 for images without captions."""
    _check_ties(ties)
    t2i = _check_mapping(text_to_image, n_rows(image_emb), n_rows(text_emb))
    out = np.full(n_rows(image_emb), -1, np.int64)
    for start, blk in score_blocks(image_emb, text_emb, metric):
        img = start + np.arange(blk.shape[0])
        relevant = t2i[None, :] == img[:, None]  # (block, texts): which texts caption this image
        best = np.where(relevant, blk, -np.inf).max(axis=1)
        if ties == "position":
            # the first caption in stable order: the lowest-index caption among those scoring `best`
            first = np.where(relevant & (blk == best[:, None]), np.arange(blk.shape[1])[None, :],
                             blk.shape[1]).min(axis=1)
            ahead = _ahead(blk, best, first)  # all non-captions: a caption ahead would be `first`
        else:
            ahead = ((blk >= best[:, None]) & ~relevant).sum(axis=1)
        has = relevant.any(axis=1)
        out[start:start + blk.shape[0]] = np.where(has, ahead, -1)
    return out


def recall_from_ranks(ranks: np.ndarray, k: int) -> float:
    """Fraction of queries (those with rank >= 0) whose relevant item is in the top k."""
    valid = ranks >= 0
    return float(np.mean(ranks[valid] < k)) if valid.any() else float("nan")


def metric_label(name: str) -> str:
    """A metric's name with its direction, for people: ``image_retrieval_recall@5`` -> ``text→image
    recall@5`` (clip_benchmark's name says what is retrieved); other names are returned as they are."""
    for kind, direction in (("image", "text→image"), ("text", "image→text")):
        prefix = f"{kind}_retrieval_"
        if name.startswith(prefix):
            return f"{direction} {name[len(prefix):]}"
    return name


def retrieval_metrics(image_emb: Embeddings, text_emb: Embeddings, text_to_image,
                      ks: Sequence[int] = DEFAULT_KS, metric: str = "dot", ties: str = "query") -> dict[str, float]:
    """Recall@K both ways plus ``mean_recall``; see the module docstring for the tie rules."""
    t_ranks = text_to_image_ranks(image_emb, text_emb, text_to_image, metric, ties)
    i_ranks = image_to_text_ranks(image_emb, text_emb, text_to_image, metric, ties)
    out: dict[str, float] = {}
    for k in ks:
        out[f"image_retrieval_recall@{k}"] = recall_from_ranks(t_ranks, k)
    for k in ks:
        out[f"text_retrieval_recall@{k}"] = recall_from_ranks(i_ranks, k)
    out["mean_recall"] = float(np.mean(list(out.values())))
    return out


def fold_retrieval_metrics(image_emb: Embeddings, text_emb: Embeddings, text_to_image, n_folds: int = 5,
                           ks: Sequence[int] = DEFAULT_KS, metric: str = "dot",
                           ties: str = "query") -> dict[str, float]:
    """The COCO-1K protocol: images split in order into ``n_folds`` equal folds (COCO 5K -> 5 x 1K),
    each fold searched on its own with its images' captions, every metric averaged over the folds."""
    t2i = _check_mapping(text_to_image, n_rows(image_emb), n_rows(text_emb))
    n = n_rows(image_emb)
    if not isinstance(n_folds, int) or n_folds < 1 or n % n_folds:
        raise ValueError(f"{n} images do not split into {n_folds} equal folds")
    size = n // n_folds
    per_fold = []
    for f in range(n_folds):
        texts = np.flatnonzero((t2i >= f * size) & (t2i < (f + 1) * size))
        per_fold.append(retrieval_metrics(image_emb[f * size:(f + 1) * size], text_emb[texts],
                                          t2i[texts] - f * size, ks, metric, ties))
    return {k: float(np.mean([m[k] for m in per_fold])) for k in per_fold[0]}


class RetrievalEvaluator:
    """Binds a dataset's caption->image mapping; call with the model's image and text embeddings.

    ``folds=5`` adds the COCO-1K protocol beside the whole-set numbers, as ``folds5/<metric>`` keys.

    >>> ev = RetrievalEvaluator(text_to_image=[0, 0, 1])
    >>> ev(image_emb, text_emb)["image_retrieval_recall@1"]
    """

    def __init__(self, text_to_image, ks: Sequence[int] = DEFAULT_KS, metric: str = "dot",
                 primary_metric: str = "mean_recall", ties: str = "query", folds: int | None = None):
        _check_ties(ties)
        self.text_to_image = np.asarray(text_to_image, dtype=np.int64)
        self.ks = tuple(ks)
        self.metric = metric
        self.primary_metric = primary_metric
        self.ties = ties
        self.folds = folds

    def __call__(self, image_emb: Embeddings, text_emb: Embeddings) -> dict[str, float]:
        out = retrieval_metrics(image_emb, text_emb, self.text_to_image, self.ks, self.metric, self.ties)
        if self.folds:
            fold = fold_retrieval_metrics(image_emb, text_emb, self.text_to_image, self.folds, self.ks,
                                          self.metric, self.ties)
            out.update({f"folds{self.folds}/{k}": v for k, v in fold.items()})
        return out
