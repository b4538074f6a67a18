"""The library's end-to-end steps, shared by the CLI, the demo and the benchmarks.

Data is named by specs ``DATASET:SPLIT[:LIMIT]`` (e.g. ``emoji:train``, ``openclipart:test:300``) over
the manifests built from the offline assets, or ``path/to/manifest.jsonl:SPLIT``. A LIMIT takes a
deterministic subsample (by a hash of the record id), so every run and every model sees the same one.
Data specs, records and backbone grids come from data/specs.py (``load_split``, ``load_data`` and
``image_grids`` are this module's steps too); training pairs from train/pairs.py, held-out metrics from
train/evaluation.py (the scale trainer uses both, and train/ never imports the pipeline).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from tokenspace import atomic
from tokenspace.data.manifest import Record
from tokenspace.data.specs import BackboneFeatures, home_dir, image_grids, load_data, load_split, note  # noqa: F401
from tokenspace.train.evaluation import evaluate_retrieval, held_out_evaluator, texts_and_targets  # noqa: F401
from tokenspace.train.pairs import build_seeded, caption_pairs, trunk_block  # noqa: F401


# ---------------------------------------------------------------------------------------------- train
def train(recipe, out_dir, home=None, resume: bool = False, progress: bool = True, **overrides):
    """Train a model from a recipe (name, path or Recipe) on its data; returns the trained model."""
    from tokenspace.train.recipe import Recipe  # start-up: torch; importing the pipeline stays torch-free
    from tokenspace.train.trainer import (  # start-up: torch (Trainer looked up at call time)
        Trainer,
        check_run_folder,
        teacher_scores,
    )

    if not isinstance(recipe, Recipe):
        recipe = Recipe.load(recipe, **overrides)
    check_run_folder(out_dir, resume)  # before the data and feature cache, which take minutes
    if "train" not in recipe.data:
        raise ValueError(f"recipe {recipe.name!r} has no data.train")
    model = build_seeded(recipe)
    at = trunk_block(recipe, model)
    enc = image_grids(model, load_data(recipe.data["train"], home), home, progress, at=at)
    data = caption_pairs(enc.grids, enc.records)
    note(f"training {recipe.name}: {len(data)} pairs ({len(enc.records)} images), {recipe.total_steps} steps")
    teacher = teacher_scores(recipe, enc.records, home, progress)  # None unless the recipe distils
    evaluate = held_out_evaluator(recipe, model, home, progress, at)
    return Trainer(model, recipe, data, out_dir, evaluate=evaluate, progress=progress,
                   teacher=teacher).fit(resume=resume)


# ---------------------------------------------------------------------------------------------- eval
def evaluate(model, specs: Sequence[str] | str, home=None, progress: bool = True,
             folds: int | None = None) -> dict[str, dict]:
    """Retrieval metrics per data spec (``folds``: see evaluate_retrieval)."""
    specs = [specs] if isinstance(specs, str) else list(specs)
    return {s: evaluate_retrieval(model, image_grids(model, load_split(s, home), home, progress), folds)
            for s in specs}


# ---------------------------------------------------------------------------------------------- index
def encode_collection(model, specs: Sequence[str] | str, home=None, progress: bool = True):
    """(image vectors, ids, records) of a collection in memory, through the feature cache (the grids
    training and evaluation share; records with an empty caption included). The vectors are a
    SparseBatch, or float32 rows [n, d] for a dense model. Indexes are built through encode.py
    (``build_index``: resumable parts, the rows and metadata `index build` and `encode` both write);
    this is for experiments and benchmarks that want the vectors themselves."""
    enc = image_grids(model, load_data(specs, home, drop_empty=False), home, progress)
    return model.encode_image_grids(enc.grids), [r.id for r in enc.records], enc.records


def write_collection_meta(index_dir, records: Sequence[Record], model_path=None, ranking: dict | None = None) -> None:
    """An older index's collection.json beside ``index_dir`` (id -> image path and text, the model, the
    ranking). The index itself records these now (searcher.py reads both; `index build` and `encode`
    write no collection.json): for tools and tests that make an index in the older layout."""
    meta = {r.id: {"image": r.image, "text": r.text, "label": r.label, "source": r.source} for r in records}
    doc = {"model": str(model_path) if model_path else None, "items": meta}
    if ranking:
        doc["ranking"] = ranking
    atomic.write_text(Path(index_dir) / "collection.json", json.dumps(doc))


def read_collection_meta(index_dir) -> dict:
    """An older index folder's collection.json (index/folder.py: read_collection_json)."""
    from tokenspace.index.folder import read_collection_json  # start-up: the index package loads numba

    return read_collection_json(index_dir)
