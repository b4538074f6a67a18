"""Interpretability: the label among the vocabulary tokens, and top tokens per image (paper Table
4/5/8, Fig. 4/5)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from benchmarks.reproduce_sections.bench import Bench, Section, models_line
from benchmarks.reproduce_sections.labels import class_indices, clean_classname, concept, showcase_rows
from benchmarks.reproduce_sections.plan import Plan
from benchmarks.reproduce_sections.runs import MAIN
from tokenspace import pipeline
from tokenspace.eval import InterpretabilityEvaluator, markdown_table, similarity

TOKEN_KS = (1, 5, 10, 20, 100)


def token_accuracy_row(bench: Bench, run: str, spec: str) -> dict[str, float]:
    """Top-K accuracy of the concept among all vocabulary tokens (+ Clarity, L0) for a sparse model; for
    a dense model (the paper's CLIP arm) each token is scored by the cosine of the image embedding with
    the token's own text embedding, and Clarity / L0 are NaN (its dimensions name no tokens)."""
    records = bench.records(spec, run)
    classes, labels = class_indices([clean_classname(concept(r)) for r in records])
    model = bench.models[run]
    ev = InterpretabilityEvaluator(classes, labels, token_ids=model.tokenizer.token_ids, ks=TOKEN_KS,
                                   exclude_ids=model.tokenizer.vocab.special_ids)
    if not getattr(model, "sparse", True):
        return ev(bench.images(run, spec), token_emb=bench.vocabulary(run))
    return ev(bench.images(run, spec), reference=backbone_reference(bench.encoded(spec, run)))


def backbone_reference(enc: pipeline.BackboneFeatures) -> np.ndarray:
    """Mean-pooled frozen backbone grid per image: Clarity's reference embedding. Like the paper's
    separate CLIP vision encoder it is independent of the model being judged, and at ~1k dense dims it
    keeps Clarity cheap (with the activations themselves as reference, a weakly sparse model makes the
    feature x vocabulary sums nearly dense: minutes instead of a second)."""
    return np.asarray(enc.grids, np.float32).mean(axis=(2, 3))


def dense_top_tokens(bench: Bench, run: str, spec: str, rows: Sequence[int], top_k: int) -> list[list[tuple[str, float]]]:
    """A dense model's top (token, cosine) pairs per image: the image embedding against every token's
    text embedding (special tokens excluded), as the paper's Fig. 4 shows for CLIP."""
    model = bench.models[run]
    vocab = model.tokenizer.vocab
    sims = similarity(np.asarray(bench.images(run, spec))[list(rows)], bench.vocabulary(run))
    sims[:, vocab.special_ids] = -np.inf
    order = np.argsort(-sims, axis=1, kind="stable")[:, :top_k]
    return [[(vocab.token(int(v)), float(sims[j, v])) for v in order[j]] for j in range(len(rows))]


def decode_side_by_side(bench: Bench, runs: Sequence[str], spec: str, rows: Sequence[int], top_k: int = 8) -> str:
    """Markdown table: one row per image, one column of top tokens per model (Fig. 4/5/6); a dense
    model's column lists its highest-cosine tokens."""
    records = bench.records(spec, runs[0])
    lines = ["| image | " + " | ".join(bench.label(r) for r in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    decoded = {r: bench.models[r].decode(bench.images(r, spec)[list(rows)], top_k=top_k)
               if getattr(bench.models[r], "sparse", True) else dense_top_tokens(bench, r, spec, rows, top_k)
               for r in runs}
    for j, i in enumerate(rows):
        cells = [", ".join(f"{t} ({w:.2f})" for t, w in decoded[r][j]) or "(empty)" for r in runs]
        name = f"{concept(records[i])} (`{records[i].id}`)"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in [name, *cells]) + " |")
    return "\n".join(lines) + "\n"


def build_interpretability(bench: Bench, plan: Plan, runs: Sequence[str] = MAIN) -> Section:
    """STAIR's token top-K accuracy of the label (Table 4/5/8, with the dense model as the CLIP arm) and a
    decode table for fixed images (Fig. 4/5)."""
    runs = bench.present(runs)
    rows = {f"{bench.label(r)} · {s}": token_accuracy_row(bench, r, s) for s in plan.concept for r in runs}
    cols = [f"token_acc{k}" for k in TOKEN_KS] + ["clarity", "l0_image"]
    # Sparse CLIP eq. 2's reference encoder e(x) is OpenAI CLIP's vision tower; ours is not: say so where
    # the number is read
    heads = {f"token_acc{k}": f"top-{k} (%)" for k in TOKEN_KS} | {
        "l0_image": "nnz image", "clarity": "Clarity, e(x) = EfficientNet-Lite0 pooled (paper: CLIP)"}
    body = (models_line(bench, runs)
            + "Label = the emoji's concept name (the text before \" — \", punctuation dropped); an image is "
              "correct at K when its label is among the K highest-scoring of all vocabulary tokens (special "
              "tokens excluded), a multi-token label scored by its best sub-word; ties count against the "
              "label. A sparse model's token scores are its embedding; the dense baseline's (the paper's CLIP "
              "arm, Table 5) are the cosine of its image embedding with each token's own text embedding "
              "([CLS] token [SEP] through its text tower). Clarity (Sparse CLIP eq. 2): mean pairwise cosine of the "
              "images sharing a token, in a reference encoder e(x): here the frozen EfficientNet-Lite0 "
              "backbone's mean-pooled grid, not the paper's OpenAI CLIP vision encoder (a deviation: no CLIP "
              "weights on this machine), so it is not comparable with the paper's values; n/a for the dense "
              "baseline, whose dimensions are not tokens.\n\n"
            + markdown_table(rows, cols, headers=heads))
    numbers = dict(rows)
    if runs and plan.concept:
        spec = plan.concept[0]
        pick = showcase_rows(bench.records(spec, runs[0]), plan.n_decode)
        body += (f"\nTop tokens of {len(pick)} fixed {spec} images (sparse models: weights after L2 "
                 "normalisation; dense baseline: cosine with each token's text embedding):\n\n")
        body += decode_side_by_side(bench, runs, spec, pick)
        numbers["decode_ids"] = [bench.records(spec, runs[0])[i].id for i in pick]
    return Section("interpretability", "Interpretability: label among the vocabulary tokens (paper Table 4/5/8, "
                   "Fig. 4/5)", body, numbers, runs)
