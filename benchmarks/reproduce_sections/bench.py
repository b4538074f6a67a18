"""Bench (models + memoised encodings, shared by the sections), Section, and the retrieval row that
several sections use."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.reproduce_sections.runs import RUNS
from tokenspace import pipeline
from tokenspace.eval import RetrievalEvaluator, sparsity_stats
from tokenspace.models.lexicon import vocabulary_embeddings
from tokenspace.sparse import SparseBatch


class Bench:
    """Models + their encoded data, with memoised embeddings (sections share the same encodings).

    ``data`` may be given pre-encoded (tests); otherwise each spec is loaded and its backbone grids
    read from the feature cache on first use, once per distinct image tower.
    """

    def __init__(self, models: dict, data: dict[str, pipeline.BackboneFeatures] | None = None, home=None,
                 progress: bool = False, provenance: dict[str, str] | None = None):
        self.models = models
        self.home, self.progress = home, progress
        self.provenance = provenance or {}
        self._data: dict[tuple[str, str], pipeline.BackboneFeatures] = {}
        self._given = dict(data or {})
        self._emb: dict[tuple, object] = {}

    def label(self, run: str) -> str:
        return RUNS[run].label if run in RUNS else run

    def present(self, runs: Sequence[str]) -> list[str]:
        return [r for r in runs if r in self.models]

    def encoded(self, spec: str, run: str) -> pipeline.BackboneFeatures:
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
        return self._memo(("vocab", run), lambda: vocabulary_embeddings(self.models[run]))

    def texts(self, run: str, spec: str):
        """(text embeddings of every caption, caption -> image index)."""
        texts, target = pipeline.texts_and_targets(self.records(spec, run))
        return self._memo(("txt", run, spec), lambda: self.models[run].encode_text(texts)), target


@dataclass
class Section:
    """One docs/results.md section plus the numbers it shows (for reproduce.json)."""

    name: str
    heading: str
    body: str
    numbers: dict
    runs: list[str]


def models_line(bench: Bench, runs: Sequence[str]) -> str:
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

