"""DataLoader input pipelines: images are decoded and preprocessed in worker processes, batched, pinned
and prefetched, so the training step and the encoder never wait on a JPEG decode in the main thread.

Three sources, one batch format (a dict: ``pixels`` [b, 3, S, S] float32, normalised as the image
tower expects by ``data.preprocess.pixels``; ``index`` [b] int64; ``skipped`` int; plus ``keys`` and
``texts`` for shards):

- ``stream_shards``: webdataset shards streamed with the ``webdataset`` library (``WebDataset`` +
  ``WebLoader``): brace-expanded shard lists, shards split per rank (``torch.distributed`` or
  RANK/WORLD_SIZE) then per DataLoader worker, an optional shuffle buffer, decode + preprocess +
  batching in the workers. One sequential pass, no header scan at start-up: for encoding a collection
  and for streaming training. It cannot resume exactly (a shuffle buffer's state is not saved).
- ``rows_loader``: a map-style Dataset (``TarRows``) over the random-access ``TarCollection``
  (data/webdataset.py), driven by a batch sampler. The collection is kept, not replaced: the trainer's
  group-aware sampler and exact resume pick rows by number (train/scale.py feeds the sampler's batches
  to the workers), and ``tokenspace encode`` cuts the collection into parts by row.
- ``files_loader``: a map-style Dataset (``ImageFiles``) over image paths, e.g. a manifest's records.

Corrupt samples (undecodable bytes, a broken tar member) are counted in the worker that meets them and
logged there (logger ``tokenspace.data``); each batch carries the count since the previous batch of that
worker, so the consumer can sum an exact total (``SkipCounter``). ``on_bad="skip"`` drops them (encoding:
an unreadable image is not indexed); ``on_bad="blank"`` keeps a white image in their place (training: a
global batch must keep its shape on every rank).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from tokenspace.data.images import ImageLoadError, load_image
from tokenspace.data.preprocess import pixels
from tokenspace.data.webdataset import IMAGE_EXTS, TEXT_EXTS, TarCollection, decode_image_bytes, expand_shards

log = logging.getLogger("tokenspace.data")

# samples skipped in this process since the last batch it collated (one counter per worker process:
# the worker that decodes a sample also collates its batch, so the count travels with that batch)
_skipped_here = 0


def _skip(where: str, err: BaseException | str) -> None:
    global _skipped_here
    _skipped_here += 1
    log.warning("skipped %s: %s", where, err)


def default_workers() -> int:
    """Cores left after the main process (which runs the model), at most 8; 0 on a single core."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        n = os.cpu_count() or 1
    return max(0, min(8, n - 1))


def loader_options(device: torch.device | str | None, workers: int | None, prefetch: int = 2) -> dict:
    """DataLoader keywords for a consumer on ``device``: pinned host memory only when batches go to a
    GPU (page-locked buffers let ``.to(device, non_blocking=True)`` overlap the copy with compute)."""
    workers = default_workers() if workers is None else int(workers)
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    opts = {"num_workers": workers, "pin_memory": dev.type == "cuda"}
    if workers:
        opts["prefetch_factor"] = max(1, int(prefetch))
    return opts


def to_device(batch: dict, device: torch.device | str, channels_last: bool = False) -> torch.Tensor:
    """A batch's pixels on ``device``: asynchronous from pinned memory, NHWC if asked."""
    x = batch["pixels"].to(device, non_blocking=True)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


@dataclass
class Preprocess:
    """Decoded image -> the tower's normalised pixels (data.preprocess: letterbox on white, resize,
    (x - mean) / std). A picklable callable: DataLoader workers get a copy."""

    image_size: int
    mean: Sequence[float]
    std: Sequence[float]

    @classmethod
    def for_model(cls, model) -> Preprocess:
        t = model.image_tower
        return cls(int(t.image_size), tuple(t.pixel_mean), tuple(t.pixel_std))

    def __call__(self, img) -> torch.Tensor:
        return pixels([img], self.image_size, self.mean, self.std)[0]  # [3, S, S]

    def blank(self) -> torch.Tensor:
        return self(Image.new("RGB", (self.image_size, self.image_size), (255, 255, 255)))


def collate(items: list, on_bad: str = "skip", prep: Preprocess | None = None) -> dict:
    """Stack ``(index, pixels or None, key, text)`` items into a batch; None marks a corrupt sample."""
    global _skipped_here
    if on_bad == "blank":
        items = [(i, x if x is not None else prep.blank(), k, t) for i, x, k, t in items]
    good = [it for it in items if it[1] is not None]
    skipped, _skipped_here = _skipped_here, 0
    if good:
        # NHWC in memory (channels_last): what data.preprocess.pixels gives too; CPU convolutions run
        # ~1.5x faster on it than on NCHW here (EfficientNet-Lite0, 128 px)
        px = torch.stack([it[1] for it in good]).contiguous(memory_format=torch.channels_last)
    else:
        s = prep.image_size if prep is not None else 1
        px = torch.zeros((0, 3, s, s), dtype=torch.float32)
    return {"pixels": px, "index": torch.as_tensor([it[0] for it in good], dtype=torch.int64),
            "keys": [it[2] for it in good], "texts": [it[3] for it in good], "skipped": skipped}


class _Collate:
    """``collate`` with its options bound (picklable for workers)."""

    def __init__(self, on_bad: str, prep: Preprocess):
        if on_bad not in ("skip", "blank"):
            raise ValueError(f"on_bad must be 'skip' or 'blank', not {on_bad!r}")
        self.on_bad, self.prep = on_bad, prep

    def __call__(self, items):
        return collate(items, self.on_bad, self.prep)


# ---------------------------------------------------------------------------------- map-style sources
class TarRows(Dataset):
    """Rows of a random-access TarCollection: ``ds[i]`` = (i, pixels or None, key, text), decoded in
    the worker (each worker opens its own file handles: TarCollection keeps them per process)."""

    def __init__(self, collection: TarCollection, prep: Preprocess):
        self.c, self.prep = collection, prep

    def __len__(self) -> int:
        return len(self.c)

    def __getitem__(self, i):
        i = int(i)
        try:
            x = self.prep(self.c.image(i))
        except ImageLoadError as e:
            _skip(f"{self.c.shards[self.c.shard_of[i]]}:{self.c.keys[i]}", e.reason)  # e repeats the place
            x = None
        return i, x, self.c.keys[i], self.c.texts[i]


class ImageFiles(Dataset):
    """Image files (PNG, JPEG, WebP, GIF, SVG: data.images.load_image): ``ds[i]`` = (i, pixels or
    None, path, "")."""

    def __init__(self, paths: Sequence[str | os.PathLike], prep: Preprocess):
        self.paths, self.prep = [os.fspath(p) for p in paths], prep

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        i = int(i)
        try:
            x = self.prep(load_image(self.paths[i]))
        except ImageLoadError as e:
            _skip(self.paths[i], e.reason)
            x = None
        return i, x, self.paths[i], ""


def _batches(rows: Iterable[int], batch_size: int) -> list[list[int]]:
    rows = list(rows)
    return [rows[s:s + batch_size] for s in range(0, len(rows), batch_size)]


def map_loader(dataset: Dataset, batches: Iterable[Sequence[int]], *, workers: int | None = None,
               device=None, prefetch: int = 2, on_bad: str = "skip") -> DataLoader:
    """A DataLoader over a map-style ``dataset`` that yields ``batches`` (lists of rows) in order;
    ``batches`` may be an endless iterator (the trainer's predicted batches)."""
    # a generator of its own: starting an iterator draws the workers' base seed from it, and drawing it
    # from torch's global RNG would shift the dropout masks of a resumed run away from the original's
    return DataLoader(dataset, batch_sampler=batches, collate_fn=_Collate(on_bad, dataset.prep),
                      generator=torch.Generator().manual_seed(0), **loader_options(device, workers, prefetch))


def rows_loader(collection: TarCollection, prep: Preprocess, rows: Iterable[int] | None = None,
                batch_size: int = 256, **kw) -> DataLoader:
    """Rows of a TarCollection (all, in order, unless ``rows`` says which) in batches."""
    rows = range(len(collection)) if rows is None else rows
    return map_loader(TarRows(collection, prep), _batches(rows, batch_size), **kw)


def files_loader(paths: Sequence[str | os.PathLike], prep: Preprocess, batch_size: int = 256,
                 **kw) -> DataLoader:
    """Image files in order, in batches (a corrupt file is skipped and counted)."""
    return map_loader(ImageFiles(paths, prep), _batches(range(len(paths)), batch_size), **kw)


# ---------------------------------------------------------------------------------- streamed shards
def _by_rank(src, rank: int | None = None, world: int | None = None):
    """webdataset nodesplitter: this rank's shards (every world-th from its rank). Explicit rank/world
    win; else webdataset's reading of torch.distributed or RANK/WORLD_SIZE."""
    if rank is None or world is None:
        import webdataset as wds  # start-up: only the streaming loader needs webdataset

        yield from wds.split_by_node(src)
    else:
        yield from islice(src, rank, None, world)


def _count_errors(exn: BaseException) -> bool:
    """webdataset handler: a broken tar member or stream is skipped, counted and logged."""
    _skip("webdataset sample", f"{type(exn).__name__}: {exn}")
    return True


class _DecodeSample:
    """webdataset sample dict -> (row, pixels or None, key, text); None drops a sample without an image
    or a text (not corrupt, incomplete: TarCollection skips those the same way)."""

    def __init__(self, prep: Preprocess):
        self.prep = prep

    def __call__(self, sample: dict):
        image = next((sample[k] for k in sample if k.rsplit(".", 1)[-1].lower() in IMAGE_EXTS), None)
        text = next((sample[k] for k in sample if k.rsplit(".", 1)[-1].lower() in TEXT_EXTS), None)
        if image is None or text is None:
            return None
        key = sample["__key__"]
        where = f"{sample.get('__url__', '?')}:{key}"
        try:
            x = self.prep(decode_image_bytes(image, where))
        except ImageLoadError as e:
            _skip(where, e.reason)
            x = None
        return -1, x, key, text.decode("utf-8", "replace").strip()


def stream_shards(spec: str | Sequence[str], prep: Preprocess, batch_size: int = 256, *,
                  workers: int | None = None, device=None, prefetch: int = 2, shuffle: int = 0,
                  shard_shuffle: bool = False, seed: int = 0, rank: int | None = None,
                  world: int | None = None, on_bad: str = "skip") -> DataLoader:
    """Stream webdataset shards (brace ranges, globs, lists) as batches decoded in DataLoader workers.

    Shards are split per rank then per worker: with W ranks x K workers give at least W*K shards or some
    workers idle. ``shuffle``: a sample shuffle buffer of that many samples (0: shard order). Batches are
    formed in the workers (``batch_size`` each, the last of a worker may be short) and ``index`` is -1
    (streamed samples have no row number: use ``keys``)."""
    import webdataset as wds  # start-up: only the streaming loader needs webdataset

    shards = expand_shards(spec)
    if not shards:
        raise ValueError(f"no shards match {spec!r}")
    missing = [s for s in shards if not os.path.exists(s)]
    if missing:
        raise FileNotFoundError(f"{len(missing)} shard(s) not found, e.g. {missing[0]}")
    opts = loader_options(device, workers, prefetch)
    ranks = world or 1
    if len(shards) < ranks * max(1, opts["num_workers"]):
        log.warning("%d shards for %d rank(s) x %d worker(s): some workers get no shard",
                    len(shards), ranks, max(1, opts["num_workers"]))
    ds = wds.WebDataset(shards, handler=_count_errors, shardshuffle=len(shards) if shard_shuffle else False,
                        nodesplitter=partial(_by_rank, rank=rank, world=world), seed=seed,
                        workersplitter=wds.split_by_worker, empty_check=False)
    if shuffle:
        ds = ds.shuffle(shuffle, seed=seed)
    ds = ds.map(_DecodeSample(prep), handler=_count_errors)
    ds = ds.batched(batch_size, collation_fn=_Collate(on_bad, prep), partial=True)
    # batching happens in the workers; the loader passes their batches through (batch_size=None)
    return wds.WebLoader(ds, batch_size=None, generator=torch.Generator().manual_seed(seed), **opts)


class SkipCounter:
    """Sums the ``skipped`` counts of batches and logs the running total when it grows."""

    def __init__(self, what: str = "samples", logger: Callable[[str], None] | None = None):
        self.total, self.what = 0, what
        self.logger = logger or log.warning

    def __call__(self, batch: dict) -> dict:
        n = int(batch.get("skipped", 0))
        if n:
            self.total += n
            self.logger(f"skipped {self.total} corrupt {self.what} so far")
        return batch
