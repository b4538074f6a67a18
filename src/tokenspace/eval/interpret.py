"""STAIR's interpretability: top-K accuracy of the label among ALL vocabulary tokens, and decode tables.

Top-K token accuracy (stair.txt Sec. 5, Tables 5 and 8): an image embedding gives one score per
vocabulary token Sim(image, c). For STAIR that is the embedding itself (the space *is* the lexicon);
for a dense model (the paper's CLIP arm) it is the cosine of the image embedding with each token's
text embedding: pass ``token_emb`` (vocab x dim, e.g. ``models.lexicon.vocabulary_embeddings(model)``).
A class name that tokenizes into several sub-words c^k is scored by max_k Sim(c^k). The image is
correct at K when fewer than K other tokens score >= that label score; ties count against the label,
so an image whose label tokens all score 0 is wrong. Special tokens ([CLS], [PAD], ...) are excluded
from the candidates by default, since they name no concept.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tokenspace.eval.features import active_feature_fraction, clarity, l0, modality_summary
from tokenspace.eval.scoring import Embeddings, n_dims, n_rows, score_blocks
from tokenspace.models.classwords import emitted
from tokenspace.sparse import SparseBatch

TokenIds = Callable[[str], Sequence[int]]
DEFAULT_TOKEN_KS = (1, 5, 10, 20, 50, 100)


def label_token_ids(classnames: Sequence[str], token_ids: TokenIds, exclude: np.ndarray) -> list[np.ndarray]:
    """Sub-word ids of each class name, minus excluded ids (e.g. [UNK]); may be empty."""
    return [np.setdiff1d(np.asarray(list(token_ids(c)), np.int64), exclude) for c in classnames]


def _dense_rank(row: np.ndarray, sub: np.ndarray, candidate: np.ndarray) -> int:
    """Candidates (not the label's sub-words) scoring >= the label's best sub-word, in one dense row."""
    s = row[sub].max()
    mask = candidate.copy()
    mask[sub] = False
    return int(np.count_nonzero(row[mask] >= s))


def token_label_ranks(image_emb: Embeddings, labels, classnames: Sequence[str], token_ids: TokenIds,
                      exclude_ids: Sequence[int] | None = None, token_emb: Embeddings | None = None,
                      metric: str = "cosine") -> np.ndarray:
    """Per image: number of candidate tokens (not the label's own sub-words) scoring >= the label score.

    Scores are the image embedding's own dimensions, or with ``token_emb`` (one row per vocabulary
    token) the image's ``metric`` similarity to each token's embedding (a dense model's lexicon
    scores). An image whose label has no scorable sub-word gets the worst rank (the candidate count).
    """
    labels = np.asarray(labels, np.int64)
    if labels.shape != (n_rows(image_emb),):
        raise ValueError(f"need one label per image ({n_rows(image_emb)}), got shape {labels.shape}")
    dim = n_dims(image_emb) if token_emb is None else n_rows(token_emb)
    if exclude_ids is None:  # default: the vocabulary's special tokens, if we know them
        carrier = image_emb if token_emb is None else token_emb
        vocab = carrier.vocab if isinstance(carrier, SparseBatch) else None
        exclude_ids = vocab.special_ids if vocab is not None else ()
    exclude = np.unique(np.asarray(list(exclude_ids), np.int64))
    subwords = label_token_ids(classnames, token_ids, exclude)
    candidate = np.ones(dim, bool)
    candidate[exclude] = False
    n_cand = int(candidate.sum())
    ranks = np.empty(len(labels), np.int64)
    if token_emb is not None:  # dense lexicon scores, block by block (images x vocab never whole)
        for start, blk in score_blocks(image_emb, token_emb, metric):
            for j, row in enumerate(blk):
                sub = subwords[labels[start + j]]
                ranks[start + j] = _dense_rank(row, sub, candidate) if len(sub) else n_cand
        return ranks
    for i, lab in enumerate(labels):
        sub = subwords[lab]
        worst = n_cand - len(sub)
        if not len(sub):
            ranks[i] = n_cand
            continue
        if isinstance(image_emb, SparseBatch):
            idx, val = image_emb.row(i)
            hit = np.isin(idx, sub)
            s = float(val[hit].max()) if hit.any() else 0.0
            if s <= 0:  # every zero-scoring candidate ties with the label
                ranks[i] = worst
                continue
            others = candidate[idx] & ~hit
            ranks[i] = int(np.count_nonzero(val[others] >= s))
        else:
            ranks[i] = _dense_rank(np.asarray(image_emb[i], np.float64), sub, candidate)
    return ranks


def token_topk_accuracy(image_emb: Embeddings, labels, classnames: Sequence[str], token_ids: TokenIds,
                        ks: Sequence[int] = DEFAULT_TOKEN_KS, exclude_ids: Sequence[int] | None = None,
                        token_emb: Embeddings | None = None) -> dict[str, float]:
    """``token_acc{K}`` for each K: is the label among the K best of all vocabulary tokens (``token_emb``:
    see token_label_ranks)."""
    ranks = token_label_ranks(image_emb, labels, classnames, token_ids, exclude_ids, token_emb)
    return {f"token_acc{k}": float(np.mean(ranks < k)) for k in ks}


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def decode_table(emb: Embeddings, rows: Sequence[int] | None = None, vocab=None, top_k: int = 10,
                 names: Sequence[str] | None = None, digits: int = 2) -> str:
    """Markdown table of the top tokens per row (STAIR Fig. 4/5): `| item | tokens |`.

    ``names`` label the rows (e.g. image file names); pass the same ``rows`` every run so tables of
    different checkpoints compare the same images.
    """
    vocab = vocab if vocab is not None else getattr(emb, "vocab", None)
    if vocab is None:
        raise ValueError("decode_table needs a vocabulary (pass vocab= or a SparseBatch that carries one)")
    rows = list(range(n_rows(emb))) if rows is None else [int(r) for r in rows]
    lines = ["| item | top tokens |", "|---|---|"]
    for j, r in enumerate(rows):
        if isinstance(emb, SparseBatch):
            idx, val = emb.row(r)
        else:
            dense = np.asarray(emb[r], np.float32)
            idx = np.nonzero(dense > 0)[0]
            val = dense[idx]
        order = np.argsort(-val, kind="stable")[:top_k]
        toks = ", ".join(f"{_cell(vocab.token(int(idx[o])))} ({val[o]:.{digits}f})" for o in order) or "(empty)"
        name = _cell(str(names[j])) if names is not None else str(r)
        lines.append(f"| {name} | {toks} |")
    return "\n".join(lines) + "\n"


class InterpretabilityEvaluator:
    """STAIR token top-K accuracy (when class names are bound) plus Sparse CLIP's feature metrics.

    Call with image embeddings, optionally text embeddings (adds text L0 and modality fractions) and a
    reference image embedding for Clarity (defaults to the activations themselves). For a dense model
    pass ``token_emb`` (each vocabulary token's text embedding): the token accuracy is then the CLIP
    arm of STAIR Table 5, and the feature metrics (Clarity, L0), which need named dimensions, are NaN.
    """

    def __init__(self, classnames: Sequence[str] | None = None, labels=None, token_ids: TokenIds | None = None,
                 ks: Sequence[int] = DEFAULT_TOKEN_KS, exclude_ids: Sequence[int] | None = None,
                 tau: float = 0.0, clarity_tau: float = 0.001, clarity_n_min: int = 2,
                 primary_metric: str | None = None):
        self.classnames = list(classnames) if classnames is not None else None
        self.labels = None if labels is None else np.asarray(labels, np.int64)
        self.token_ids = token_ids
        self.ks = tuple(ks)
        self.exclude_ids = exclude_ids
        self.tau, self.clarity_tau, self.clarity_n_min = tau, clarity_tau, clarity_n_min
        has_labels = self.classnames is not None and self.labels is not None and token_ids is not None
        self.primary_metric = primary_metric or ("token_acc1" if has_labels else "clarity")

    def __call__(self, image_emb: Embeddings, text_emb: Embeddings | None = None,
                 reference: Embeddings | None = None, token_emb: Embeddings | None = None) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.classnames is not None and self.labels is not None and self.token_ids is not None:
            out.update(token_topk_accuracy(image_emb, self.labels, self.classnames, self.token_ids, self.ks,
                                           self.exclude_ids, token_emb))
        if token_emb is not None:  # dense: its dimensions are not tokens
            return out | {"clarity": float("nan"), "l0_image": float("nan"), "active_feature_frac_image": float("nan")}
        out.update(clarity(image_emb, reference, self.clarity_tau, self.clarity_n_min))
        out["l0_image"] = l0(image_emb, self.tau)
        out["active_feature_frac_image"] = active_feature_fraction(image_emb, self.tau)
        if text_emb is not None:
            out["l0_text"] = l0(text_emb, self.tau)
            out["active_feature_frac_text"] = active_feature_fraction(text_emb, self.tau)
            out.update(modality_summary(image_emb, text_emb))
        return out


def word_coverage(texts: Sequence[str], encoded: SparseBatch, tokenizer) -> float:
    """Share of texts whose every content word piece is a non-zero token of the text's encoded vector
    (the release's target: a query should contain its own words). Content pieces are the tokens the tokenizer gives
    within the model's max length, minus specials, punctuation and stop words (classwords.emitted); a
    text with none counts as covered."""
    ids, mask = tokenizer.encode(list(texts))
    tokens = tokenizer.vocab.tokens
    covered = 0
    for i in range(len(texts)):
        want = {int(t) for t, m in zip(ids[i], mask[i]) if m and emitted(tokens[int(t)])}
        covered += want <= set(encoded.row(i)[0].tolist())
    return covered / max(len(texts), 1)
