"""Data specs -> records -> backbone grids: the one place a collection is named and read.

Data is named by specs ``DATASET:SPLIT[:LIMIT]`` (e.g. ``emoji:train``, ``openclipart:test:300``) over
the manifests built from the offline assets, or ``path/to/manifest.jsonl:SPLIT``. A LIMIT takes a
deterministic subsample (by a hash of the record id), so every run and every model sees the same one.
``image_grids`` turns records into the model's backbone grids through the feature cache (data/grids.py):
training, evaluation and indexing all read images this way.

Importing this module stays light, without torch (the pipeline imports it, and serve / the CLI import
the pipeline for its light steps): the grid cache is imported where it is used. The builders (render,
icons, emoji...) are imported at the top: the package's __init__, which runs before any of its modules,
imports them already, so importing them late saved nothing.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace import assets
from tokenspace.data.build import build_manifests
from tokenspace.data.manifest import Record, drop_empty_texts, read_manifest

BUILT_DATASETS = ("emoji", "icons", "openclipart", "fashion-mnist", "mnist", "photos")  # tokenspace.data.build


def note(msg: str) -> None:
    """One line on stderr about a long step (records skipped, images unreadable, training started)."""
    print(f"[tokenspace] {msg}", file=sys.stderr, flush=True)


def home_dir(home=None) -> Path:
    return Path(home).expanduser() if home is not None else assets.default_home()


def shard_pattern(spec) -> str | None:
    """The shard pattern of a webdataset spec ``wds:PATTERN`` (pixels streamed from tar shards, for
    recipes that train the image tower); None for a spec of records (``DATASET:SPLIT``, a manifest)."""
    spec = str(spec)
    return spec[len("wds:"):] if spec.startswith("wds:") else None


def load_split(spec: str, home=None, drop_empty: bool = True) -> list[Record]:
    """Records for one spec; with ``drop_empty`` (training, evaluation) those with an empty text are
    dropped and counted in the log (an index keeps them: the image is what it indexes)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ValueError(f"data spec {spec!r} is not DATASET:SPLIT[:LIMIT]")
    name, split = parts[0], parts[1]
    limit = None
    if len(parts) == 3:
        if not (parts[2].isdigit() and int(parts[2]) > 0):  # 0 gave NaN metrics, -1 dropped a record
            raise ValueError(f"data spec {spec!r}: LIMIT must be a positive integer, got {parts[2]!r}")
        limit = int(parts[2])
    if name.endswith(".jsonl"):
        path = Path(name)
    elif name in BUILT_DATASETS:
        path = build_manifests(home_dir(home), progress=False, names=[name])[name]
    else:
        raise ValueError(f"unknown dataset {name!r}: use one of {BUILT_DATASETS} or a .jsonl manifest path")
    records, dropped = read_manifest(path, split=split), []
    if drop_empty:
        records, dropped = drop_empty_texts(records)
    if dropped:
        note(f"{spec}: skipped {len(dropped)} records with empty text")
    if not records:
        raise ValueError(f"{spec}: no records in split {split!r} of {path}")
    if limit is not None and limit < len(records):
        key = lambda r: hashlib.sha1(r.id.encode()).hexdigest()  # noqa: E731 - stable across runs
        keep = {r.id for r in sorted(records, key=key)[:limit]}
        records = [r for r in records if r.id in keep]
    return records


def load_data(specs: Sequence[str] | str, home=None, drop_empty: bool = True) -> list[Record]:
    specs = [specs] if isinstance(specs, str) else list(specs)
    return [r for s in specs for r in load_split(s, home, drop_empty)]


@dataclass
class BackboneFeatures:
    """A collection's backbone feature grids (the frozen tower's output, not encoded rows: the model's
    ``encode_image_grids`` turns them into those) with the records whose images could be read."""

    grids: np.ndarray  # [N, C, h, w]; with ``image_grids(at=k)`` the activations at block k's input
    records: list[Record]
    skipped: dict[str, str]  # record id -> reason


def image_grids(model, records: Sequence[Record], home=None, progress: bool = True,
                at: int | None = None) -> BackboneFeatures:
    """Backbone grids of the records' images from the feature cache (computed once, resumable);
    unreadable images are skipped and counted, never a crash. ``at=k``: the activations at the input
    of the tower's block k instead (for training the tower's top, recipe.train_image_from)."""
    from tokenspace.data.grids import cache_image_grids  # start-up: torch (see the module doc)

    cache = cache_image_grids(model, [r.image for r in records], home_dir(home) / "features", progress=progress, at=at)
    keep = np.flatnonzero(cache.ok)
    skipped = {records[i].id: cache.errors.get(i, "unreadable") for i in np.flatnonzero(~cache.ok)}
    if skipped:
        # too large is its own count: such an image is fine, only over the decoding limit (images.MAX_PIXELS)
        large = sum("too large to decode" in reason for reason in skipped.values())
        what = ", ".join(f"{n} {kind}" for n, kind in ((large, "too large to decode"),
                                                       (len(skipped) - large, "unreadable")) if n)
        note(f"skipped {len(skipped)} images ({what}; e.g. {next(iter(skipped.items()))})")
    return BackboneFeatures(np.asarray(cache.grids[keep]), [records[i] for i in keep], skipped)
