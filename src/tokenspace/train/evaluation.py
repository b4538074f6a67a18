"""Held-out retrieval metrics of a model: what `tokenspace eval` reports and what both trainers log
at ``eval_every`` steps of a recipe with ``data.eval``.

One road for both trainers (pipeline.train over cached grids and train/scale.py over pixels): the eval
split's images are encoded once, at the trunk block the recipe trains from, and each evaluation runs the
model's current tower top over them (``with_final_grids``), so a tower-training run is measured with the
tower it has at that step.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tokenspace.data.manifest import Record
from tokenspace.data.specs import BackboneFeatures, image_grids, load_data
from tokenspace.sparse import SparseBatch
from tokenspace.train.pairs import pair_layout


def texts_and_targets(records: Sequence[Record]) -> tuple[list[str], np.ndarray]:
    """Every caption with the index of its image (several captions per image, COCO style): the training
    pairs' layout (train/pairs.py pair_layout), so evaluation and training read captions one way."""
    image_of, texts = pair_layout(records)
    return texts, image_of


def with_final_grids(model, enc: BackboneFeatures, at: int | None) -> BackboneFeatures:
    """``enc`` with final grids from the model's current tower top when it holds block-``at`` activations."""
    if at is None:
        return enc
    # start-up: torch; importing the pipeline stays torch-free
    from tokenspace.data.grids import grids_from_trunk

    return BackboneFeatures(grids_from_trunk(model, enc.grids, at), enc.records, enc.skipped)


def evaluate_retrieval(model, enc: BackboneFeatures, folds: int | None = None) -> dict[str, float]:
    """R@1/5/10 both directions plus sparsity on one encoded split; ``folds=5`` adds the COCO-1K
    protocol (5 folds of the images, ``folds5/...`` keys) beside the whole-split numbers (COCO-5K)."""
    from tokenspace.eval import RetrievalEvaluator, SparsityEvaluator  # start-up: scipy, for evaluation only

    texts, target = texts_and_targets(enc.records)
    img = model.encode_image_grids(enc.grids)
    txt = model.encode_text(texts)
    out = RetrievalEvaluator(target, folds=folds)(img, txt)
    if isinstance(img, SparseBatch):
        out.update(SparsityEvaluator()(img, txt))
    out["n_images"], out["n_texts"] = float(len(enc.records)), float(len(texts))
    return out


def held_out_evaluator(recipe, model, home, progress: bool, at: int | None) -> Callable | None:
    """The trainer's ``evaluate(model)`` for ``recipe.data.eval`` (None without it). ``eval_every`` with
    no eval data would evaluate nothing: refused rather than ignored."""
    specs = recipe.data.get("eval")
    if not specs:
        if recipe.eval_every:
            raise ValueError(f"recipe {recipe.name!r} sets eval_every={recipe.eval_every} but no data.eval: "
                             "name the held-out split(s) in data.eval, or set eval_every=0")
        return None
    enc = image_grids(model, load_data(specs, home), home, progress, at=at)
    return lambda m: evaluate_retrieval(m, with_final_grids(m, enc, at))
