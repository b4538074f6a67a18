"""Webdataset shards (tar files of ``key.jpg`` + ``key.txt`` members) with random access by row.

Large collections (CC12M, LAION subsets) ship as webdataset tars. Reading them needs no webdataset
package: a tar is a sequence of 512-byte headers and member data, so one pass over the headers (no
image is decoded) gives each sample's byte offsets, and any row is then one seek + read. Random access
is what the trainer's group-aware sampler and exact resume need, and what lets each DDP rank read only
its own shard of a global batch.

Naming follows webdataset: a member ``dir/abc.def.jpg`` belongs to sample key ``dir/abc`` with field
``def.jpg``; samples are the runs of consecutive members sharing a key. A sample needs an image field
(jpg, jpeg, png, webp, ppm, bmp) and a text field (txt, caption); others are skipped and counted.
"""
from __future__ import annotations

import glob
import io
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tokenspace.data.images import ImageLoadError, _on_white

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "ppm", "bmp")
TEXT_EXTS = ("txt", "caption")


def expand_shards(spec: str | Sequence[str]) -> list[str]:
    """``shard-{000000..000099}.tar`` brace ranges (webdataset syntax), globs, or lists of either."""
    if not isinstance(spec, str):
        return [p for s in spec for p in expand_shards(s)]
    m = re.search(r"\{(\d+)\.\.(\d+)\}", spec)
    if m:
        lo, hi = m.group(1), m.group(2)
        width = len(lo)
        return [p for i in range(int(lo), int(hi) + 1)
                for p in expand_shards(spec[:m.start()] + str(i).zfill(width) + spec[m.end():])]
    if any(c in spec for c in "*?["):
        return sorted(glob.glob(spec))
    return [spec]


def _split_key(name: str) -> tuple[str, str]:
    d, base = os.path.split(name)
    stem, _, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


@dataclass
class TarCollection:
    """Samples of a list of shards: ``keys[i]``, ``texts[i]`` and the image bytes' location."""

    shards: list[str]
    keys: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    shard_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [N]
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [N] image data offset
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [N] image data bytes
    skipped: int = 0  # samples without an image or a text

    @classmethod
    def open(cls, spec: str | Sequence[str], rank: int = 0, world: int = 1,
             gather: Callable[[object], list] | None = None) -> TarCollection:
        """Scan the shards' headers. Under data parallelism each of ``world`` ranks scans every
        world-th shard from its ``rank`` and ``gather`` (e.g. ``torch.distributed.all_gather_object``
        wrapped to return the list) brings all ranks' parts together, so start-up reads each header
        once across the job instead of once per rank; every rank ends with the same collection."""
        specs = [spec] if isinstance(spec, str) else list(spec)
        per_spec = [expand_shards(s) for s in specs]
        empty = [s for s, found in zip(specs, per_spec) if not found]
        if empty:  # else the collection silently lacks that pattern's shards
            raise ValueError(f"{empty[0]}: no shard file matches this pattern")
        shards = [p for found in per_spec for p in found]
        missing = [s for s in shards if not os.path.exists(s)]
        if missing:
            raise FileNotFoundError(f"{len(missing)} shard(s) not found, e.g. {missing[0]}")
        part = cls._scan_part(shards, rank, world)
        parts = gather(part) if world > 1 and gather is not None else [part]
        if world > 1 and gather is None:
            raise ValueError("world > 1 needs a gather function to merge the ranks' scans")
        scanned = {si: rows for p in parts for si, rows in p.items()}
        c = cls(shards)
        shard_of, offset, size = [], [], []
        for si in range(len(shards)):
            for key, text, off, n in scanned[si]:
                if text is None or off is None:
                    c.skipped += 1
                    continue
                c.keys.append(key)
                c.texts.append(text)
                shard_of.append(si)
                offset.append(off)
                size.append(n)
        c.shard_of = np.asarray(shard_of, np.int32)
        c.offset = np.asarray(offset, np.int64)
        c.size = np.asarray(size, np.int64)
        return c

    @staticmethod
    def _scan_part(shards: list[str], rank: int, world: int) -> dict[int, list]:
        """{shard number: [(key, text, image offset, image size), ...]} for this rank's shards."""
        return {si: list(_scan(shards[si])) for si in range(rank, len(shards), world)}

    def __len__(self) -> int:
        return len(self.keys)

    def image_bytes(self, i: int) -> bytes:
        # one open handle per shard and process (opening a file per image costs as much as decoding it)
        handles = self.__dict__.setdefault("_handles", {})
        si = int(self.shard_of[i])
        if si not in handles:
            if len(handles) >= 64:  # bound the open files when reading across many shards
                handles.pop(next(iter(handles))).close()
            handles[si] = open(self.shards[si], "rb")  # noqa: SIM115 - kept open across calls
        f = handles[si]
        f.seek(int(self.offset[i]))
        return f.read(int(self.size[i]))

    def image(self, i: int):
        """Row i's image (PIL, RGB); ImageLoadError when it cannot be decoded."""
        return decode_image_bytes(self.image_bytes(i), f"{self.shards[self.shard_of[i]]}:{self.keys[i]}")


def decode_image_bytes(data: bytes, where: str):
    """Image bytes -> RGB PIL image, transparency composited on white as for image files
    (data.images.load_image); ImageLoadError(where, cause) when they cannot be decoded."""
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
        return _on_white(img)
    except Exception as e:  # PIL raises many types for broken data
        # PIL names the in-memory file ("cannot identify image file <_io.BytesIO object at 0x...>")
        raise ImageLoadError(where, "not a readable image (" + _OBJECT_REPR.sub("", str(e)) + ")") from e


_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")


def _scan(path: str) -> Iterable[tuple[str, str | None, int | None, int]]:
    """(key, text, image offset, image size) per sample of one tar, reading headers and texts only."""
    key, text, off, n = None, None, None, 0
    with tarfile.open(path, "r:") as tar:  # "r:": uncompressed, so offsets are file offsets
        for m in tar:
            if not m.isfile():
                continue
            k, ext = _split_key(m.name)
            if k != key:
                if key is not None:
                    yield key, text, off, n
                key, text, off, n = k, None, None, 0
            last = ext.rsplit(".", 1)[-1]
            if last in IMAGE_EXTS and off is None:
                off, n = m.offset_data, m.size
            elif last in TEXT_EXTS and text is None:
                text = tar.extractfile(m).read().decode("utf-8", "replace").strip()
        if key is not None:
            yield key, text, off, n


class LazyPixels:
    """Rows of a TarCollection as normalised pixels, decoded on demand: ``pixels[idx]`` ->
    [len(idx), 3, S, S] float32. Stands in for cached grids when the image tower trains end to end.
    An undecodable image becomes a blank one (counted in ``bad``): a batch must keep its shape."""

    def __init__(self, collection: TarCollection, image_size: int, mean, std):
        self.c, self.size, self.mean, self.std = collection, image_size, mean, std
        self.bad = 0

    def __len__(self) -> int:
        return len(self.c)

    def __getitem__(self, idx) -> np.ndarray:
        from tokenspace.data.preprocess import pixels  # start-up: torch, which only decoding to pixels needs

        imgs = []
        for i in np.atleast_1d(idx):
            try:
                imgs.append(self.c.image(int(i)))
            except ImageLoadError:
                self.bad += 1
                imgs.append(Image.new("RGB", (self.size, self.size), (255, 255, 255)))
        return pixels(imgs, self.size, self.mean, self.std).numpy()


def write_shards(samples: Iterable[tuple[str, bytes, str]], pattern: str, per_shard: int = 10000,
                 image_ext: str = "png") -> list[str]:
    """Write (key, image bytes, text) samples as webdataset tars named ``pattern % shard_number``."""
    paths, tar, count = [], None, 0
    for key, image, text in samples:
        if tar is None or count == per_shard:
            if tar is not None:
                tar.close()
            paths.append(pattern % len(paths))
            Path(paths[-1]).parent.mkdir(parents=True, exist_ok=True)
            tar, count = tarfile.open(paths[-1], "w"), 0  # noqa: SIM115 - closed at the shard end
        for ext, data in ((image_ext, image), ("txt", text.encode())):
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        count += 1
    if tar is not None:
        tar.close()
    return paths
