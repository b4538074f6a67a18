"""Training at scale: one entry for a single process or every torchrun rank.

Data specs in ``recipe.data.train``:
    wds:PATTERN     webdataset shards (``shard-{000000..000999}.tar``, globs): pixels decoded on demand,
                    for recipes that train the image tower end to end (``train_image_tower: true``)
    anything else   the pipeline's specs (emoji:train, manifest.jsonl:SPLIT): cached backbone grids,
                    computed by rank 0 first so ranks never write the same cache files at once
"""
from __future__ import annotations

import sys

from tokenspace.train import distributed


def _log(msg: str) -> None:
    if distributed.context().is_main:
        print(f"[tokenspace] {msg}", file=sys.stderr, flush=True)


def load_pairs(recipe, model, home=None, progress: bool = True):
    """PairData for a recipe's training specs: lazy pixels for wds: shards, cached grids otherwise."""
    import numpy as np

    from tokenspace.train.trainer import PairData

    specs = recipe.data.get("train") or []
    specs = [specs] if isinstance(specs, str) else list(specs)
    if not specs:
        raise ValueError(f"recipe {recipe.name!r} has no data.train")
    wds = [s[len("wds:"):] for s in specs if s.startswith("wds:")]
    if wds:
        if len(wds) != len(specs):
            raise ValueError("mix of wds: and other data specs; convert one kind to the other")
        if not recipe.train_image_tower:
            raise ValueError("wds: data streams pixels: set train_image_tower: true (or cache grids "
                             "from a manifest instead)")
        from tokenspace.data.webdataset import LazyPixels, TarCollection

        c = TarCollection.open(wds)
        t = model.image_tower
        if c.skipped:
            _log(f"skipped {c.skipped} incomplete samples (no image or no text)")
        texts = c.texts
        keep = [i for i, x in enumerate(texts) if x]
        if len(keep) < len(texts):
            raise ValueError(f"{len(texts) - len(keep)} empty captions in the shards; filter them first")
        return PairData.from_texts(LazyPixels(c, t.image_size, t.pixel_mean, t.pixel_std), texts)
    if recipe.train_image_tower:
        raise ValueError("train_image_tower needs pixels: give wds: shards as data.train")
    from tokenspace import pipeline

    ctx = distributed.context()
    records = pipeline.load_data(specs, home)
    if ctx.enabled and not ctx.is_main:
        ctx.barrier()  # wait for rank 0 to fill the grid cache
    enc = pipeline.image_grids(model, records, home, progress and ctx.is_main, at=pipeline.trunk_block(recipe, model))
    if ctx.enabled and ctx.is_main:
        ctx.barrier()
    return pipeline.caption_pairs(np.asarray(enc.grids), enc.records)  # every caption, not just the first


def train(recipe, out_dir, home=None, resume: bool = False, progress: bool = True, **overrides):
    """Train a recipe (name, path or Recipe) here or on every rank of a torchrun launch."""
    from tokenspace import pipeline
    from tokenspace.train.recipe import Recipe
    from tokenspace.train.trainer import Trainer

    if not isinstance(recipe, Recipe):
        recipe = Recipe.load(recipe, **overrides)
    ctx = distributed.context()
    if recipe.batch_size % ctx.world:
        raise ValueError(f"batch_size {recipe.batch_size} is not a multiple of the {ctx.world} ranks")
    model = pipeline.build_seeded(recipe)  # identical initial weights on every rank (DDP also broadcasts them)
    data = load_pairs(recipe, model, home, progress)
    _log(f"training {recipe.name}: {len(data)} pairs, {recipe.total_steps} steps, "
         f"{ctx.world} rank(s) x {recipe.batch_size // ctx.world} per step")
    return Trainer(model, recipe, data, out_dir, progress=progress).fit(resume=resume)
