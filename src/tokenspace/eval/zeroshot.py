"""Zero-shot classification with prompt templates and ensembles (clip_benchmark names).

Metrics: ``acc1``, ``acc5`` (top-k accuracy) and ``mean_per_class_recall`` (balanced accuracy over the
classes present in ``labels``). As in retrieval, ties count against the true class: an image whose
scores are all 0 is wrong, not right by the luck of class order.

``ZeroShotEvaluator(..., expansions={class: [names]})`` scores a class by the best of its own prompt
ensemble and its expansion names' ensembles (CHiLS, Novack et al. 2023: a deviation from CLIP's
protocol; eval/expand.py makes the names from WordNet).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from tokenspace.eval.scoring import Embeddings, l2_normalize, n_rows, score_blocks
from tokenspace.sparse import SparseBatch

Template = str | Callable[[str], str]
EncodeTexts = Callable[[list], Embeddings]

DEFAULT_TEMPLATES: tuple[str, ...] = ("a photo of a {c}.",)


def _fill(template: Template, classname: str) -> str:
    return template(classname) if callable(template) else template.format(c=classname)


def build_classifier(classnames: Sequence[str], templates: Sequence[Template], encode_text: EncodeTexts,
                     metric: str = "dot") -> Embeddings:
    """One vector per class: the mean of its template embeddings (the CLIP prompt ensemble).

    With ``metric="cosine"`` each prompt vector is unit-normalised before averaging, as CLIP does, so
    that no template dominates. A sparse encoder gives a SparseBatch back (mean of sparse vectors is
    sparse: the union of their supports); a dense encoder gives a (classes x dim) array.
    """
    if not classnames or not templates:
        raise ValueError("build_classifier needs at least one class name and one template")
    prompts = [_fill(t, c) for c in classnames for t in templates]  # class-major: rows c*T .. c*T+T-1
    emb = encode_text(prompts)
    if n_rows(emb) != len(prompts):
        raise ValueError(f"encode_text returned {n_rows(emb)} rows for {len(prompts)} prompts")
    if metric == "cosine":
        emb = l2_normalize(emb)
    n_cls, n_tpl = len(classnames), len(templates)
    # averaging = multiplying by a (classes x prompts) block matrix of 1/T, which keeps sparse sparse
    avg = sp.csr_matrix((np.full(len(prompts), 1.0 / n_tpl, np.float32),
                         (np.repeat(np.arange(n_cls), n_tpl), np.arange(len(prompts)))),
                        shape=(n_cls, len(prompts)))
    if isinstance(emb, SparseBatch):
        return SparseBatch.from_scipy(avg @ emb.to_scipy(), vocab=emb.vocab)
    return np.asarray(avg @ np.asarray(emb, np.float32), dtype=np.float32)


def true_class_ranks(image_emb: Embeddings, classifier: Embeddings, labels, metric: str = "dot",
                     groups: Sequence[int] | None = None) -> np.ndarray:
    """Per image: how many other classes score >= the true class (0 = correct top-1).

    ``groups`` (offsets, classes + 1 of them): class c owns classifier rows ``groups[c]:groups[c+1]``
    and scores the max over them; None = one row per class."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (n_rows(image_emb),):
        raise ValueError(f"need one label per image ({n_rows(image_emb)}), got shape {labels.shape}")
    if groups is not None:
        groups = np.asarray(groups, dtype=np.int64)
        if groups[0] != 0 or groups[-1] != n_rows(classifier) or np.any(np.diff(groups) < 1):
            raise ValueError(f"groups must rise from 0 to {n_rows(classifier)} by at least 1 per class")
    out = np.empty(len(labels), np.int64)
    for start, blk in score_blocks(image_emb, classifier, metric):
        if groups is not None:
            blk = np.maximum.reduceat(blk, groups[:-1], axis=1)  # [m, rows] -> [m, classes]
        m = blk.shape[0]
        gt = blk[np.arange(m), labels[start:start + m]]
        out[start:start + m] = (blk >= gt[:, None]).sum(axis=1) - 1
    return out


def classification_metrics(ranks: np.ndarray, labels, ks: Sequence[int] = (1, 5)) -> dict[str, float]:
    """``acc{k}`` for each k and ``mean_per_class_recall`` from true-class ranks."""
    labels = np.asarray(labels)
    out = {f"acc{k}": float(np.mean(ranks < k)) for k in ks}
    correct = ranks == 0
    out["mean_per_class_recall"] = float(np.mean([correct[labels == c].mean() for c in np.unique(labels)]))
    return out


class ZeroShotEvaluator:
    """Binds class names, templates and labels; call with image embeddings and the text encoder.

    >>> ev = ZeroShotEvaluator(["cat", "dog"], labels, templates=["a photo of a {c}."])
    >>> ev(image_emb, encode_text)  # {"acc1": ..., "acc5": ..., "mean_per_class_recall": ...}

    ``expansions`` (class name -> more names for it, e.g. ``eval.expand.wordnet_expansions``): each name
    gets its own prompt ensemble, and a class scores the max over its own name and its expansions
    (CHiLS; a deviation from CLIP's protocol). Names a class does not list, or an empty list, leave it
    as without expansions; a key that is not a class name is an error.
    """

    def __init__(self, classnames: Sequence[str], labels, templates: Sequence[Template] = DEFAULT_TEMPLATES,
                 ks: Sequence[int] = (1, 5), metric: str = "dot", primary_metric: str = "acc1",
                 expansions: Mapping[str, Sequence[str]] | None = None):
        self.classnames = list(classnames)
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= len(self.classnames)):
            raise ValueError(f"labels must lie in [0, {len(self.classnames)})")
        self.templates = list(templates)
        self.ks = tuple(ks)
        self.metric = metric
        self.primary_metric = primary_metric
        expansions = dict(expansions or {})
        unknown = sorted(set(expansions) - set(self.classnames))
        if unknown:
            raise ValueError(f"expansions for names that are not classes: {unknown[:5]}")
        if any(isinstance(v, str) for v in expansions.values()):
            raise TypeError("expansions map a class name to a list of names, not to one string")
        # the classifier's rows, class-major: class c's own name, then its expansions
        self.names = [n for c in self.classnames for n in [c, *expansions.get(c, ())]]
        self.groups = np.cumsum([0] + [1 + len(expansions.get(c, ())) for c in self.classnames])
        self.classifier: Embeddings | None = None  # kept after a call: one row per name of self.names

    def __call__(self, image_emb: Embeddings, encode_text: EncodeTexts) -> dict[str, float]:
        self.classifier = build_classifier(self.names, self.templates, encode_text, self.metric)
        groups = None if len(self.names) == len(self.classnames) else self.groups
        ranks = true_class_ranks(image_emb, self.classifier, self.labels, self.metric, groups)
        return classification_metrics(ranks, self.labels, self.ks)
