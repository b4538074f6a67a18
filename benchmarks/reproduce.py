"""Regenerate the paper-style sections of docs/results.md from models trained by the recipes.

    make reproduce                                    # = python benchmarks/reproduce.py
    python benchmarks/reproduce.py --only retrieval flops-ablation
    python benchmarks/reproduce.py --quick            # plumbing check: tiny data, 3 steps per stage, scratch files

Models (trained with tokenspace.pipeline.train, or reused when ``<runs>/<name>/model/model.safetensors``
exists; the default runs dir is the demo's, so `make demo`'s stair-emoji and dense-emoji are reused):
stair-emoji (3-stage), stair-emoji-single (single-stage, same budget), dense-emoji, and the FLOPs
ablation stair-emoji-lambda1e-2 / -lambda1e-4 (lambda 1e-3 is stair-emoji itself).

Sections (STAIR paper analogues): retrieval (Table 2/7), flops-ablation (Fig. 8), interpretability
(Table 4/8, Fig. 4/5/6), zero-shot (+ linear probe), text-free (STAIR_IMAGE, App. E.2), localization
(App. E.1). Section builders take a Bench (models + encoded data) and return a Section; ``main`` only
wires training/loading, writing the doc and benchmarks/results/reproduce.json.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokenspace import pipeline
from tokenspace.eval import (
    InterpretabilityEvaluator,
    LinearProbeEvaluator,
    ResultsDoc,
    RetrievalEvaluator,
    TokenMaskEncoder,
    ZeroShotEvaluator,
    markdown_table,
    query_heatmap,
    sparsity_stats,
)
from tokenspace.eval.plots import save_heatmaps, scatter_plot
from tokenspace.sparse import SparseBatch

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
JSON_OUT = ROOT / "benchmarks" / "results" / "reproduce.json"


def log(msg: str) -> None:
    print(f"[reproduce] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- the runs
@dataclass(frozen=True)
class Run:
    """One trained model: the recipe it comes from, recipe overrides, and its label in the tables."""

    recipe: str
    label: str
    overrides: dict = field(default_factory=dict)

    def recipe_overrides(self, quick: bool = False) -> dict:
        """A fresh copy every time, so no two runs ever share (and could alter) one overrides dict."""
        return {**copy.deepcopy(self.overrides), **(quick_overrides(self.recipe) if quick else {})}


def _lambda_run(lam: str) -> Run:
    # the whole loss block is replaced by a recipe override, so flops_warmup is restated (as stair-emoji)
    loss = {"lambda_image": float(lam), "lambda_text": float(lam), "flops_warmup": 100}
    return Run("stair-emoji", f"λ = {lam}", {"name": f"stair-emoji-lambda{lam}", "loss": loss})


RUNS: dict[str, Run] = {
    "stair-emoji": Run("stair-emoji", "STAIR 3-stage"),
    "stair-emoji-single": Run("stair-emoji-single", "STAIR single-stage"),
    "dense-emoji": Run("dense-emoji", "dense baseline"),
    "stair-emoji-lambda1e-2": _lambda_run("1e-2"),
    "stair-emoji-lambda1e-4": _lambda_run("1e-4"),
}
MAIN = ("stair-emoji", "stair-emoji-single", "dense-emoji")
STAIRS = ("stair-emoji", "stair-emoji-single")
# (run, lambda) in increasing lambda; 1e-3 is the recipe's own value
LAMBDAS = (("stair-emoji-lambda1e-4", 1e-4), ("stair-emoji", 1e-3), ("stair-emoji-lambda1e-2", 1e-2))


# ------------------------------------------------------------------------------------------- the data
EMOJI_TEMPLATES = ("an emoji of {c}", "a drawing of {c}", "{c}")
CLIPART_TEMPLATES = ("a clipart of {c}", "a drawing of {c}", "{c}")
# concepts shown in the decode table / heatmaps when present (held-out emoji:test concepts)
SHOWCASE = ("dog", "octopus", "kiwi fruit", "rocket", "baseball", "stop sign", "open book", "church")


@dataclass
class Plan:
    """Which data spec each section evaluates on (full run vs --quick, or a test's tiny manifest)."""

    retrieval: list[str]  # R@K + nnz, every main model
    flops: list[str]  # FLOPs ablation; the plot uses the first
    concept: list[str]  # specs whose text starts with "CONCEPT — ": token top-K accuracy of the concept
    zeroshot: dict[str, Sequence[str]]  # spec -> prompt templates; classes are Record.label
    probe: dict[str, str]  # test spec -> train spec for the linear probe
    textfree: list[str]
    localize: str  # spec of the heatmap images
    n_decode: int = 8
    n_heatmaps: int = 3
    probe_cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0)  # the probe's C grid (LinearProbeEvaluator default)


FULL = Plan(
    retrieval=["emoji:test", "emoji:val", "openclipart:test:300"],
    flops=["emoji:test", "openclipart:test:300"],
    concept=["emoji:test", "emoji:val"],
    zeroshot={"emoji:test": EMOJI_TEMPLATES, "emoji:val": EMOJI_TEMPLATES, "openclipart:test:300": CLIPART_TEMPLATES},
    probe={"emoji:test": "emoji:train", "openclipart:test:300": "openclipart:train:2000"},
    textfree=["emoji:test", "emoji:val"],
    localize="emoji:test",
)
QUICK = Plan(
    retrieval=["emoji:test:64", "emoji:val:64", "openclipart:test:64"],
    flops=["emoji:test:64"],
    concept=["emoji:test:64"],
    zeroshot={"emoji:test:64": EMOJI_TEMPLATES, "openclipart:test:64": CLIPART_TEMPLATES},
    probe={"emoji:test:64": "emoji:train:128", "openclipart:test:64": "openclipart:train:128"},
    textfree=["emoji:test:64", "emoji:val:64"],
    localize="emoji:test:64",
    n_decode=4,
    n_heatmaps=1,
    probe_cs=(1.0,),  # one fit instead of five: --quick checks the plumbing, not the best C
)


def concept(record) -> str:
    """The emoji concept name: the part of the text before " — " (e.g. "moose")."""
    return record.text.split(" — ")[0].strip()


def clean_classname(name: str) -> str:
    """A label as words: folder names use underscores, and punctuation ("flag: Germany", quotes) would
    otherwise count as a sub-word of the label in the token top-K accuracy."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s'&-]", " ", name.replace("_", " "))).strip() or name


def class_indices(names: Sequence[str], classes: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """(sorted class list, index of each name in it); ``classes`` fixes the list (e.g. train ∪ test)."""
    classes = sorted(set(names)) if classes is None else list(classes)
    pos = {c: i for i, c in enumerate(classes)}
    return classes, np.array([pos[n] for n in names], np.int64)


def showcase_rows(records, n: int, prefer: Sequence[str] = SHOWCASE) -> list[int]:
    """A fixed set of n record indices: the preferred concepts that are present, then evenly spaced
    records by id, so every run (and every checkpoint) shows the same images."""
    by_concept = {concept(r).lower(): i for i, r in enumerate(records)}
    rows = [by_concept[c] for c in prefer if c in by_concept][:n]
    order = sorted(range(len(records)), key=lambda i: records[i].id)
    step = max(1, len(order) // max(n, 1))
    for i in order[::step]:
        if len(rows) >= n:
            break
        if i not in rows:
            rows.append(i)
    return rows


# ------------------------------------------------------------------------------------------- bench
class Bench:
    """Models + their encoded data, with memoised embeddings (sections share the same encodings).

    ``data`` may be given pre-encoded (tests); otherwise each spec is loaded and its backbone grids
    read from the feature cache on first use, once per distinct image tower.
    """

    def __init__(self, models: dict, data: dict[str, pipeline.Encoded] | None = None, home=None,
                 progress: bool = False, provenance: dict[str, str] | None = None):
        self.models = models
        self.home, self.progress = home, progress
        self.provenance = provenance or {}
        self._data: dict[tuple[str, str], pipeline.Encoded] = {}
        self._given = dict(data or {})
        self._emb: dict[tuple, object] = {}

    def label(self, run: str) -> str:
        return RUNS[run].label if run in RUNS else run

    def present(self, runs: Sequence[str]) -> list[str]:
        return [r for r in runs if r in self.models]

    def encoded(self, spec: str, run: str) -> pipeline.Encoded:
        if spec in self._given:
            return self._given[spec]
        model = self.models[run]
        key = (json.dumps(model.config.image_tower, sort_keys=True), spec)
        if key not in self._data:
            self._data[key] = pipeline.image_grids(model, pipeline.load_split(spec, self.home), self.home,
                                                   self.progress)
        return self._data[key]

    def records(self, spec: str, run: str) -> list:
        return self.encoded(spec, run).records

    def _memo(self, key: tuple, make: Callable):
        if key not in self._emb:
            self._emb[key] = make()
        return self._emb[key]

    def images(self, run: str, spec: str):
        return self._memo(("img", run, spec), lambda: self.models[run].encode_image_grids(self.encoded(spec, run).grids))

    def vocabulary(self, run: str) -> np.ndarray:
        """(V, D) text embedding of every vocabulary token alone: a dense model's lexicon (Table 5's CLIP arm)."""
        return self._memo(("vocab", run), lambda: pipeline.vocabulary_embeddings(self.models[run]))

    def texts(self, run: str, spec: str):
        """(text embeddings of every caption, caption -> image index)."""
        texts, target = pipeline.texts_and_targets(self.records(spec, run))
        return self._memo(("txt", run, spec), lambda: self.models[run].encode_texts(texts)), target


@dataclass
class Section:
    """One docs/results.md section plus the numbers it shows (for reproduce.json)."""

    name: str
    heading: str
    body: str
    numbers: dict
    runs: list[str]


def _models_line(bench: Bench, runs: Sequence[str]) -> str:
    return "Models: " + "; ".join(f"{bench.label(r)} = `{r}` ({bench.provenance.get(r, 'built in code')})"
                                  for r in runs) + ".\n\n"


R_COLS = ["image_retrieval_recall@1", "image_retrieval_recall@5", "image_retrieval_recall@10",
          "text_retrieval_recall@1", "text_retrieval_recall@5", "text_retrieval_recall@10", "nnz_image", "nnz_text"]
HEADERS = {"image_retrieval_recall@1": "T→I R@1 (%)", "image_retrieval_recall@5": "T→I R@5 (%)",
           "image_retrieval_recall@10": "T→I R@10 (%)", "text_retrieval_recall@1": "I→T R@1 (%)",
           "text_retrieval_recall@5": "I→T R@5 (%)", "text_retrieval_recall@10": "I→T R@10 (%)",
           "nnz_image": "nnz image", "nnz_text": "nnz text", "mean_recall": "mean R (%)"}


def retrieval_row(bench: Bench, run: str, spec: str, text_emb=None, ties: str = "query") -> dict[str, float]:
    """R@1/5/10 both ways + nnz/FLOPs; ``text_emb`` replaces the text encoder (STAIR_IMAGE); ``ties``:
    eval.retrieval's tie rule ("query": ties count against the query; "position": clip_benchmark's)."""
    img = bench.images(run, spec)
    txt, target = bench.texts(run, spec)
    txt = txt if text_emb is None else text_emb
    out = RetrievalEvaluator(target, ties=ties)(img, txt)
    if isinstance(img, SparseBatch):
        out.update(sparsity_stats(img, txt))
    else:  # a dense vector uses all its dimensions
        out.update(nnz_image=float(np.asarray(img).shape[1]), nnz_text=float(np.asarray(txt).shape[1]))
    out["n_images"], out["n_texts"] = float(len(bench.records(spec, run))), float(len(target))
    return out


# ------------------------------------------------------------------------------------------- 1. retrieval
def build_retrieval(bench: Bench, plan: Plan, runs: Sequence[str] = MAIN) -> Section:
    """R@1/5/10 text->image and image->text + mean nnz, 3-stage vs single-stage vs dense (Table 2/7)."""
    runs = bench.present(runs)
    rows = {f"{bench.label(r)} · {s}": retrieval_row(bench, r, s) for s in plan.retrieval for r in runs}
    body = (_models_line(bench, runs)
            + "Held-out splits: emoji:test = OpenMoji drawings of concepts never seen in training (cross-artist), "
              "emoji:val = Google drawings of those held-out concepts, openclipart:test:300 = a deterministic "
              "300-image subsample of held-out OpenClipart drawings. Recall from exact scores, ties count "
              "against the query; nnz = mean active dimensions per vector (dense: its width).\n\n"
            + markdown_table(rows, R_COLS, headers=HEADERS))
    # once, the clip_benchmark-compatible rule beside it: equal scores keep their position (a relevant
    # item tied with others counts as found when it comes first), as torch.topk orders them
    spec = plan.retrieval[0]
    compat = {f"{bench.label(r)} · {spec}": retrieval_row(bench, r, spec, ties="position") for r in runs}
    body += ("\nThe same models on " + spec + " with clip_benchmark's tie rule instead (top-K of a sort that keeps "
             "tied items in their original order; more lenient wherever sparse scores tie, e.g. at 0):\n\n"
             + markdown_table(compat, R_COLS[:6], headers=HEADERS))
    return Section("retrieval", "Retrieval: STAIR 3-stage vs single-stage vs dense (paper Table 2/7)", body,
                   rows | {f"clip_benchmark ties · {k}": v for k, v in compat.items()}, runs)


# ------------------------------------------------------------------------------------------- 2. FLOPs
def build_flops(bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc,
                lambdas: Sequence[tuple[str, float]] = LAMBDAS) -> Section:
    """nnz, FLOPs and R@1 per FLOPs-regularisation weight, and the nnz-vs-R@1 plot (Fig. 8)."""
    lambdas = [(r, lam) for r, lam in lambdas if r in bench.models]
    rows, points = {}, []
    for spec in plan.flops:
        for run, lam in lambdas:
            m = retrieval_row(bench, run, spec)
            m["lambda"] = lam
            rows[f"λ = {lam:.0e} · {spec}"] = m
            if spec == plan.flops[0]:
                points.append((f"λ={lam:.0e}", m["nnz_image"], m["image_retrieval_recall@1"] * 100))
    png = scatter_plot(points, Path(img_dir) / "flops_ablation.png", "mean nnz per image (log)",
                       f"T→I R@1 (%) on {plan.flops[0]}", "FLOPs weight λ: sparsity vs accuracy", logx=True)
    cols = ["nnz_image", "nnz_text", "flops", "image_retrieval_recall@1", "text_retrieval_recall@1", "mean_recall"]
    body = (_models_line(bench, [r for r, _ in lambdas])
            + "STAIR 3-stage with λ_image = λ_text = λ (FLOPs regulariser, the only change). FLOPs = expected "
              "multiply-adds per image-text pair through an inverted index, Σ_d p_img(d)·p_txt(d). Recall: "
              "ties count against the query (stricter than clip_benchmark).\n\n"
            + markdown_table(rows, cols, first_column="λ · split", headers={**HEADERS, "flops": "FLOPs"})
            + f"\n![nnz vs R@1 per λ]({doc.relpath(png)})\n")
    return Section("flops-ablation", "FLOPs regularisation weight λ (paper Fig. 8)", body, rows,
                   [r for r, _ in lambdas])


# ------------------------------------------------------------------------------------------- 3. interpretability
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


def backbone_reference(enc: pipeline.Encoded) -> np.ndarray:
    """Mean-pooled frozen backbone grid per image: Clarity's reference embedding. Like the paper's
    separate CLIP vision encoder it is independent of the model being judged, and at ~1k dense dims it
    keeps Clarity cheap (with the activations themselves as reference, a weakly sparse model makes the
    feature x vocabulary sums nearly dense: minutes instead of a second)."""
    return np.asarray(enc.grids, np.float32).mean(axis=(2, 3))


def dense_top_tokens(bench: Bench, run: str, spec: str, rows: Sequence[int], top_k: int) -> list[list[tuple[str, float]]]:
    """A dense model's top (token, cosine) pairs per image: the image embedding against every token's
    text embedding (special tokens excluded), as the paper's Fig. 4 shows for CLIP."""
    from tokenspace.eval import similarity

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
    body = (_models_line(bench, runs)
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


# ------------------------------------------------------------------------------------------- 4. zero-shot
def zeroshot_row(bench: Bench, run: str, spec: str, templates: Sequence[str], encode=None) -> dict[str, float]:
    """Accuracy per single template and for the ensemble (cosine-averaged prompts, CLIP style);
    ``encode`` replaces the model's text encoder (STAIR_IMAGE's token masks)."""
    classes, labels = class_indices([clean_classname(r.label or "?") for r in bench.records(spec, run)])
    img, encode = bench.images(run, spec), encode or bench.models[run].encode_texts
    out = {f"acc1[{t}]": ZeroShotEvaluator(classes, labels, [t], metric="cosine")(img, encode)["acc1"]
           for t in templates}
    ens = ZeroShotEvaluator(classes, labels, list(templates), ks=(1, min(5, len(classes))), metric="cosine")
    out.update({f"ensemble_{k}": v for k, v in ens(img, encode).items()})
    out["n_classes"] = float(len(classes))
    return out


def probe_row(bench: Bench, run: str, test: str, train: str,
              cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0)) -> dict[str, float]:
    """Logistic-regression probe on frozen image features: train split -> test split, category labels."""
    tr = [clean_classname(r.label or "?") for r in bench.records(train, run)]
    te = [clean_classname(r.label or "?") for r in bench.records(test, run)]
    classes = sorted(set(tr) | set(te))
    _, ytr = class_indices(tr, classes)
    _, yte = class_indices(te, classes)
    return LinearProbeEvaluator(ytr, yte, cs=cs)(bench.images(run, train), bench.images(run, test))


def build_zeroshot(bench: Bench, plan: Plan, runs: Sequence[str] = MAIN) -> Section:
    """Zero-shot category classification with templates + ensemble, and a linear probe, sparse vs dense."""
    runs = bench.present(runs)
    body = _models_line(bench, runs)
    numbers: dict = {}
    for spec, templates in plan.zeroshot.items():
        rows = {bench.label(r): zeroshot_row(bench, r, spec, templates) for r in runs}
        numbers.update({f"{k} · {spec}": v for k, v in rows.items()})
        cols = [f"acc1[{t}]" for t in templates] + ["ensemble_acc1", "ensemble_mean_per_class_recall"]
        heads = {f"acc1[{t}]": f"“{t}” acc1 (%)" for t in templates} | {
            "ensemble_acc1": "ensemble acc1 (%)", "ensemble_mean_per_class_recall": "ensemble mean/class (%)"}
        n = int(next(iter(rows.values()))["n_classes"]) if rows else 0
        body += f"**{spec}** ({n} categories = Record.label)\n\n" + markdown_table(rows, cols, headers=heads) + "\n"
    probe = {f"{bench.label(r)} · {test}": probe_row(bench, r, test, train, plan.probe_cs)
             for test, train in plan.probe.items() for r in runs}
    numbers.update({f"probe · {k}": v for k, v in probe.items()})
    body += ("**Linear probe** (scikit-learn logistic regression on L2-normalised frozen image features, C "
             "chosen on 20% of the train split; train → test: "
             + ", ".join(f"{tr} → {te}" for te, tr in plan.probe.items()) + "; STAIR features stay sparse)\n\n"
             + markdown_table(probe, ["lp_acc1", "lp_val_acc1", "lp_C"],
                              headers={"lp_acc1": "test acc1 (%)", "lp_val_acc1": "val acc1 (%)", "lp_C": "C"}))
    return Section("zero-shot", "Zero-shot classification and linear probe", body, numbers, runs)


# ------------------------------------------------------------------------------------------- 5. text-free
def build_textfree(bench: Bench, plan: Plan, runs: Sequence[str] = STAIRS) -> Section:
    """STAIR_IMAGE (Table 10): each caption / class prompt becomes the L2-normalised mask of its tokens
    (no text encoder) vs STAIR's text side, for retrieval and for zero-shot classification."""
    runs = [r for r in bench.present(runs) if getattr(bench.models[r], "sparse", True)]
    rows, zs = {}, {}
    for spec in plan.textfree:
        for r in runs:
            model = bench.models[r]
            texts, _ = pipeline.texts_and_targets(bench.records(spec, r))
            encoder = TokenMaskEncoder(model.tokenizer.token_ids, len(model.vocab), model.vocab)
            rows[f"{bench.label(r)} · text encoder · {spec}"] = retrieval_row(bench, r, spec)
            rows[f"{bench.label(r)} · token mask (STAIR_IMAGE) · {spec}"] = retrieval_row(bench, r, spec, encoder(texts))
            templates = plan.zeroshot.get(spec)
            if templates:
                zs[f"{bench.label(r)} · text encoder · {spec}"] = zeroshot_row(bench, r, spec, templates)
                zs[f"{bench.label(r)} · token mask (STAIR_IMAGE) · {spec}"] = zeroshot_row(
                    bench, r, spec, templates, encoder)
    body = (_models_line(bench, runs)
            + "Same image vectors; the query side is either the trained text encoder or the text's token mask "
              "MASK(y): equal weight on each non-special token it tokenizes into, L2-normalised so that the "
              "dot product is STAIR's cosine (eq. 2); only the image encoder runs. Recall ties count against "
              "the query (stricter than clip_benchmark, see the retrieval section).\n\n"
            + markdown_table(rows, R_COLS, headers=HEADERS))
    if zs:
        body += ("\n**Zero-shot classification** (Table 10's ImageNet arm; categories = Record.label, prompt "
                 "ensemble of the zero-shot section's templates, each prompt a token mask on the STAIR_IMAGE "
                 "rows)\n\n" + markdown_table(zs, ["ensemble_acc1", "ensemble_mean_per_class_recall"],
                                                headers={"ensemble_acc1": "ensemble acc1 (%)",
                                                         "ensemble_mean_per_class_recall": "ensemble mean/class (%)"}))
    numbers = dict(rows) | {f"zero-shot · {k}": v for k, v in zs.items()}
    return Section("text-free", "Text-encoder-free retrieval (STAIR_IMAGE, paper App. E.2)", body, numbers, runs)


# ------------------------------------------------------------------------------------------- 6. localization
def cell_scores(model, grid: np.ndarray) -> np.ndarray:
    """(h, w, V) per-cell token scores p(h_j) for one image grid [C, h, w]. Raw scores, not log(1+ReLU):
    the max-pooled embedding keeps only each token's best cell, the map shows all of them."""
    import torch

    with torch.no_grad():
        s = model.image_scores(torch.as_tensor(np.asarray(grid, np.float32))[None])[0]
    h, w = np.asarray(grid).shape[-2:]
    return s.float().numpy().reshape(h, w, -1)


def heatmap_queries(model, record, image_emb: SparseBatch, n: int = 3) -> list[str]:
    """The concept's words (the label) plus the image's own top token: what a reader would ask for."""
    special = set(model.vocab.special_ids.tolist())
    words = [w for w in clean_classname(concept(record)).lower().split() if len(w) > 1]
    top = [t for t, _ in model.decode(image_emb, top_k=3)[0]]
    out: list[str] = []
    for q in words + top:
        if q not in out and any(i not in special for i in model.tokenizer.token_ids(q)):
            out.append(q)
    return out[:n]


def _thumbnail(path: str, size: int = 128) -> np.ndarray | None:
    from tokenspace.data.images import ImageLoadError, load_image

    try:
        return np.asarray(load_image(path).resize((size, size)))
    except ImageLoadError:
        return None  # the panel still shows the heatmaps


def build_localization(bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc,
                       run: str = "stair-emoji") -> Section:
    """Per-grid-cell activation of a few query tokens on a few fixed images, one PNG per image."""
    model = bench.models[run]
    enc = bench.encoded(plan.localize, run)
    rows = showcase_rows(enc.records, plan.n_heatmaps)
    special = set(model.vocab.special_ids.tolist())
    lines, numbers = [], {}
    for i in rows:
        rec = enc.records[i]
        cells = cell_scores(model, enc.grids[i])
        queries = heatmap_queries(model, rec, bench.images(run, plan.localize)[[i]])
        maps = {q: query_heatmap(cells, [t for t in model.tokenizer.token_ids(q) if t not in special]) for q in queries}
        slug = re.sub(r"[^a-z0-9]+", "-", concept(rec).lower()).strip("-") or str(i)
        png = save_heatmaps(maps, Path(img_dir) / f"localization_{slug}.png", _thumbnail(rec.image))
        lines.append(f"![{concept(rec)}: {', '.join(queries)}]({doc.relpath(png)})")
        numbers[rec.id] = {q: {"peak_cell": int(np.argmax(m)), "max": float(m.max()), "min": float(m.min())}
                           for q, m in maps.items()}
    grid = enc.grids.shape[-2:] if len(enc.grids) else (0, 0)
    body = (_models_line(bench, [run])
            + f"Each panel: an image from {plan.localize}, then per query token its score p(h_j) on each of the "
              f"{grid[0]}×{grid[1]} backbone grid cells (before max pooling; multi-token queries averaged), "
              "min-max normalised per map. Queries: the concept's words and the image's top token.\n\n"
            + "\n".join(lines) + "\n")
    return Section("localization", "Localization heatmaps (paper App. E.1)", body, numbers, [run])


# ------------------------------------------------------------------------------------------- wiring
SECTIONS = ("retrieval", "flops-ablation", "interpretability", "zero-shot", "text-free", "localization")
NEEDS = {"retrieval": MAIN, "flops-ablation": tuple(r for r, _ in LAMBDAS), "interpretability": MAIN,
         "zero-shot": MAIN, "text-free": STAIRS, "localization": ("stair-emoji",)}


def build_section(name: str, bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc) -> Section:
    """Dispatch one section by name (the --only names)."""
    if name == "flops-ablation":
        return build_flops(bench, plan, img_dir, doc)
    if name == "localization":
        return build_localization(bench, plan, img_dir, doc)
    return {"retrieval": build_retrieval, "interpretability": build_interpretability, "zero-shot": build_zeroshot,
            "text-free": build_textfree}[name](bench, plan)


def quick_overrides(recipe: str) -> dict:
    """3 steps per stage on 128 emoji pairs, no in-training eval: exercises every code path in seconds."""
    from tokenspace.train.recipe import Recipe

    r = Recipe.load(recipe)
    return {"stages": [{**s.__dict__, "steps": 3, "warmup_steps": 0} for s in r.stages],
            "data": {"train": ["emoji:train:128"], "eval": []}, "batch_size": 16}


def describe(run: str, quick: bool) -> str:
    """Recipe + overrides + step count, for the 'Models:' line of each section."""
    from tokenspace.train.recipe import Recipe

    spec = RUNS[run]
    r = Recipe.load(spec.recipe, **spec.recipe_overrides(quick))
    extra = f", λ={r.lambda_image:g}" if r.lambda_image or r.lambda_text else ""
    return f"recipe {spec.recipe}{extra}, {len(r.stages)} stage(s), {r.total_steps} steps, batch {r.batch_size}"


def trained(run: str, runs_dir: Path, home, quick: bool):
    """The run's model: reused when its folder holds one, else trained (resuming any checkpoint)."""
    from tokenspace.models.registry import load

    out = runs_dir / run
    if (out / "model" / "model.safetensors").exists():
        log(f"{run}: reusing {out / 'model'}")
        return load(out / "model")
    spec = RUNS[run]
    over = spec.recipe_overrides(quick)
    log(f"{run}: training recipe {spec.recipe} -> {out}")
    t0 = time.time()
    model = pipeline.train(spec.recipe, out, home=home, resume=True, progress=True, **over)
    log(f"{run}: trained in {time.time() - t0:.0f}s")
    return model


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if np.isnan(x) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def save_numbers(path: Path, sections: Sequence[Section], command: str, runs_dir: Path, bench: Bench) -> None:
    """Merge this invocation's sections into the JSON (other sections kept: --only updates its own)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.setdefault("sections", {})
    for s in sections:
        doc["sections"][s.name] = {"command": command, "runs_dir": str(runs_dir), "updated": time.strftime("%F %T"),
                                   "models": {r: bench.provenance.get(r, "") for r in s.runs},
                                   "numbers": _jsonable(s.numbers)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    tmp.replace(path)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=None, help="run folders (default runs/demo; --quick: a temp dir)")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), metavar="SECTION",
                   help=f"sections to regenerate: {', '.join(SECTIONS)}")
    p.add_argument("--quick", action="store_true", help="tiny data, 3 steps per stage: checks the plumbing")
    p.add_argument("--available-only", action="store_true",
                   help="train nothing: use only the models already in --runs (rows of the others are left out)")
    p.add_argument("--results", type=Path, default=None, help="results markdown (default docs/results.md; "
                   "--quick: a temp file, quick numbers never land in the real doc)")
    p.add_argument("--json", type=Path, default=None, help="numbers file (default benchmarks/results/reproduce.json;"
                   " --quick: beside --results)")
    p.add_argument("--home", type=Path, default=None, help="asset home (default ~/.cache/tokenspace)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="reproduce-quick-")) if a.quick else None
    runs_dir = a.runs or (scratch / "runs" if a.quick else ROOT / "runs" / "demo")
    results = a.results or (scratch / "results.md" if a.quick else DOC)
    json_out = a.json or (results.parent / "reproduce.json" if a.quick else JSON_OUT)
    doc, img_dir, plan = ResultsDoc(results), results.parent / "img", QUICK if a.quick else FULL
    command = "python benchmarks/reproduce.py" + ("" if argv is None and len(sys.argv) < 2 else
                                                   " " + shlex.join(sys.argv[1:] if argv is None else argv))
    t0 = time.time()
    needed = list(dict.fromkeys(r for s in a.only for r in NEEDS[s]))
    if a.available_only:  # no training: the sections show the models that are already there
        missing = [r for r in needed if not (runs_dir / r / "model" / "model.safetensors").exists()]
        if missing:
            log(f"--available-only: leaving out untrained {', '.join(missing)}")
        needed = [r for r in needed if r not in missing]
    models = {r: trained(r, runs_dir, a.home, a.quick) for r in needed}
    log(f"models ready in {time.time() - t0:.0f}s")
    bench = Bench(models, home=a.home, progress=True, provenance={r: describe(r, a.quick) for r in needed})
    done = []
    for name in a.only:
        t1 = time.time()
        sec = build_section(name, bench, plan, img_dir, doc)
        doc.update(sec.name, sec.body, command=command + ("  (make reproduce)" if command.endswith(".py") else ""),
                   heading=sec.heading)
        done.append(sec)
        save_numbers(json_out, [sec], command, runs_dir, bench)
        print(f"\n## {sec.heading}\n\n{sec.body}", flush=True)
        log(f"{name}: {time.time() - t1:.0f}s")
    log(f"wrote {len(done)} section(s) to {results} and numbers to {json_out} in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
