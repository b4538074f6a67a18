"""Training at scale: one entry for a single process or every torchrun rank.

Data specs in ``recipe.data.train``:
    wds:PATTERN     webdataset shards (``shard-{000000..000999}.tar``, globs): pixels decoded on demand,
                    for recipes that train the image tower end to end (``train_image_tower: true``)
    anything else   the pipeline's specs (emoji:train, manifest.jsonl:SPLIT): cached backbone grids,
                    computed by rank 0 first so ranks never write the same cache files at once

``ScaleTrainer`` is the Trainer fed by DataLoader workers (data/loader.py) on the model's device:
- pixels are decoded and preprocessed in worker processes, ``prefetch x workers`` batches ahead of the
  step, never on the main thread. The rows still come from the random-access TarCollection, drawn by the
  trainer's own group-aware sampler, so a resume is exact: a shadow copy of that sampler (same seed, or
  the checkpoint's RNG state and queue) predicts the coming batches for the workers, and every step
  checks that the batch it receives is the one the sampler drew (a mismatch is logged and that step
  decodes its own batch; prefetching then stops, results stay exact);
- batches arrive in pinned memory when the device is a GPU and are copied with ``non_blocking``;
  ``channels_last`` and ``gradient_checkpointing`` come from the recipe, bf16 / fp16 autocast from its
  ``precision`` (``auto``: bf16 on GPUs that have it); the recipe's ``compile: blocks`` compiles the
  towers' repeated blocks (the Trainer's regional compilation), ``compile=True`` wraps the whole towers'
  forward in ``torch.compile`` instead (slow to compile at paper shapes);
- the device is the rank's GPU under torchrun, the first GPU in a single process when there is one
  (the plain Trainer stays on the CPU in a single process), else the CPU;
- ``data.eval`` and ``eval_every`` work as in pipeline.train (train/evaluation.py): rank 0 encodes the
  held-out split once and logs its retrieval metrics every ``eval_every`` steps.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch
import torch.distributed as dist

from tokenspace.data.loader import Preprocess, TarRows, map_loader
from tokenspace.data.specs import image_grids, load_data, note, shard_pattern
from tokenspace.data.webdataset import LazyPixels, TarCollection
from tokenspace.train import pairs, precision, ranks
from tokenspace.train.evaluation import held_out_evaluator
from tokenspace.train.recipe import Recipe
from tokenspace.train.trainer import BatchSampler, PairData, Trainer, check_run_folder


def _log(msg: str) -> None:
    if ranks.context().is_main:  # one line per run, not one per rank
        note(msg)


def _all_gather(obj) -> list:
    """Every rank's ``obj``, in rank order (each rank scans its share of the shard headers)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def load_pairs(recipe, model, home=None, progress: bool = True):
    """PairData for a recipe's training specs: lazy pixels for wds: shards, cached grids otherwise."""
    specs = recipe.data.get("train") or []
    specs = [specs] if isinstance(specs, str) else list(specs)
    if not specs:
        raise ValueError(f"recipe {recipe.name!r} has no data.train")
    wds = [p for p in map(shard_pattern, specs) if p is not None]
    if wds:
        if len(wds) != len(specs):
            raise ValueError("mix of wds: and other data specs; convert one kind to the other")
        if not recipe.train_image_tower:
            raise ValueError("wds: data streams pixels: set train_image_tower: true (or cache grids "
                             "from a manifest instead)")
        ctx = ranks.context()
        c = TarCollection.open(wds, ctx.rank, ctx.world, gather=_all_gather if ctx.enabled else None)
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
    ctx = ranks.context()
    records = load_data(specs, home)
    if ctx.enabled and not ctx.is_main:
        ctx.barrier()  # wait for rank 0 to fill the grid cache
    enc = image_grids(model, records, home, progress and ctx.is_main, at=pairs.trunk_block(recipe, model))
    if ctx.enabled and ctx.is_main:
        ctx.barrier()
    return pairs.caption_pairs(np.asarray(enc.grids), enc.records)  # every caption, not just the first


class ScaleTrainer(Trainer):
    """Trainer with DataLoader-fed pixels and explicit device handling (see the module doc)."""

    def __init__(self, model, recipe, data, out_dir, *, device=None, workers: int | None = None,
                 prefetch: int = 2, compile: bool = False, **kw):
        super().__init__(model, recipe, data, out_dir, **kw)
        self.device = torch.device(device) if device is not None else self.dist.device
        self.precision = precision.resolve(recipe.precision, self.device)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        if compile:
            self._embed = torch.compile(self._embed)
            self._forward = self._embed
        self.workers, self.prefetch = workers, prefetch
        g = data.inputs
        self._rows = TarRows(g.c, Preprocess(g.size, tuple(g.mean), tuple(g.std))) \
            if isinstance(g, LazyPixels) else None
        self._stream = None
        self._resume_state = None
        self.predicted = self.mispredicted = self.skipped = 0

    def _load_checkpoint(self):
        out = super()._load_checkpoint()
        self._resume_state = (out[3], list(self._resume_queue))  # the sampler's state at the checkpoint
        return out

    def fit(self, resume: bool = False):
        try:
            return super().fit(resume=resume)
        finally:
            self._stream = None  # shuts the workers down
            if self.skipped:
                _log(f"{self.skipped} corrupt images replaced by blank ones")

    def _predicted_batches(self):
        """This rank's shards of the batches the trainer's sampler will draw, from its starting state."""
        r = self.recipe
        shadow = BatchSampler(self.data.groups, r.batch_size, np.random.default_rng(r.seed))
        if self._resume_state is not None:
            shadow.rng.bit_generator.state, shadow._queue = self._resume_state[0], list(self._resume_state[1])
        while True:
            yield [int(i) for i in self.dist.shard(shadow.next())]

    def _loader(self, batches):
        return map_loader(self._rows, batches, workers=self.workers, device=self.device,
                          prefetch=self.prefetch, on_bad="blank")

    def _pixels(self, shard: np.ndarray) -> torch.Tensor:
        b = None
        if self.mispredicted == 0:
            if self._stream is None:
                self._stream = iter(self._loader(self._predicted_batches()))
            b = next(self._stream)
            if np.array_equal(b["index"].numpy(), shard):
                self.predicted += 1
            else:
                self.mispredicted += 1
                self._stream = b = None
                logging.getLogger("tokenspace.train").warning(
                    "the prefetched batch is not the sampler's: prefetching stops (results stay exact)")
        if b is None:  # this step's own batch, still decoded in the workers
            (b,) = list(self._loader([[int(i) for i in shard]]))
        if b["skipped"]:
            self.skipped += b["skipped"]
            _log(f"{self.skipped} corrupt images so far (replaced by blank ones)")
        return b["pixels"]

    def _inputs(self, idx: np.ndarray):
        shard = self.dist.shard(idx)
        if self._rows is not None:
            x = self._pixels(shard)  # decoded in workers, pinned for a GPU
        else:  # cached grids or activations: an array slice
            x = torch.from_numpy(np.asarray(self.data.inputs[shard], dtype=np.float32))
            if self.device.type == "cuda":
                x = x.pin_memory()
        x = x.to(self.device, non_blocking=True)
        if self.recipe.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        ids, mask = self.model.tokenize([self.data.texts[i] for i in shard])
        return x, ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)


_RECIPES_OWN = object()  # train's ``compile`` not given: the recipe's own value


def train(recipe, out_dir, home=None, resume: bool = False, progress: bool = True, *, workers: int | None = None,
          compile=_RECIPES_OWN, device=None, **overrides):
    """Train a recipe (name, path or Recipe) here or on every rank of a torchrun launch, with the
    ScaleTrainer (``workers`` decoding processes per rank; default: cores - 1, at most 8).

    ``compile``: ``True`` wraps the whole towers' forward in ``torch.compile`` (ScaleTrainer's flag);
    anything else is the recipe's key, which ``--set compile=blocks`` reaches here as: ``"blocks"``
    (regional compilation), ``None`` or ``False`` (off)."""
    whole = compile is True
    if not whole and compile is not _RECIPES_OWN:
        overrides["compile"] = compile
    if not isinstance(recipe, Recipe):
        recipe = Recipe.load(recipe, **overrides)
    elif "compile" in overrides:
        recipe = dataclasses.replace(recipe, compile=overrides["compile"])
    if recipe.distill:
        # the teacher's vectors are cached per pair before training (train/distill.py, pipeline.train);
        # doing that over webdataset shards (a teacher encoding pass per shard, sharded over ranks) is a
        # job of its own, not wired here yet
        raise ValueError("loss.distill is trained by `tokenspace train` (the single-process trainer); "
                         "the scale trainer does not distil yet: set loss.distill=0")
    check_run_folder(out_dir, resume)  # before the data loads (minutes): Trainer.fit checks too late to save them
    ctx = ranks.context()
    if recipe.batch_size % ctx.world:
        raise ValueError(f"batch_size {recipe.batch_size} is not a multiple of the {ctx.world} ranks")
    model = pairs.build_seeded(recipe)  # identical initial weights on every rank (DDP also broadcasts them)
    data = load_pairs(recipe, model, home, progress)
    # rank 0 evaluates (Trainer._eval); the other ranks skip encoding the eval split
    evaluate = held_out_evaluator(recipe, model, home, progress, pairs.trunk_block(recipe, model)) \
        if ctx.is_main else None
    _log(f"training {recipe.name}: {len(data)} pairs, {recipe.total_steps} steps, "
         f"{ctx.world} rank(s) x {recipe.batch_size // ctx.world} per step")
    return ScaleTrainer(model, recipe, data, out_dir, progress=progress, workers=workers, compile=whole,
                        device=device, evaluate=evaluate).fit(resume=resume)
