"""Readers for COCO-captions JSON and Karpathy-split JSON: one Record per image, all its captions kept.

COCO captions (``captions_train2017.json``)::
    {"images": [{"id": 1, "file_name": "a.jpg", ...}], "annotations": [{"image_id": 1, "id": 9, "caption": "..."}]}
Karpathy splits (``dataset_coco.json``, also Flickr8k/30k)::
    {"dataset": "coco", "images": [{"filepath": "val2014", "filename": "b.jpg", "split": "test",
      "cocoid": 2, "sentences": [{"raw": "..."}]}]}
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from tokenspace.data.manifest import Record


def _load(path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict) or "images" not in data:
        raise ValueError(f"{path}: expected an object with an 'images' list")
    return data


def _clean(captions) -> list[str]:
    return [c.strip() for c in captions if isinstance(c, str) and c.strip()]


def read_coco_captions(path: str | os.PathLike, image_root: str | os.PathLike, split: str,
                       source: str = "coco") -> tuple[list[Record], int]:
    """Records from a COCO captions file; returns (records, n_skipped images without any caption)."""
    data = _load(path)
    caps: dict = {}
    for ann in data.get("annotations", []):
        caps.setdefault(ann["image_id"], []).append(ann.get("caption", ""))
    records, skipped = [], 0
    for img in data["images"]:
        texts = _clean(caps.get(img["id"], []))
        if not texts:
            skipped += 1  # an image with no usable caption cannot be a training pair
            continue
        records.append(Record(
            id=f"{source}:{img['id']}", image=str(Path(image_root) / img["file_name"]), text=texts[0],
            split=split, source=source, captions=tuple(texts),
        ))
    return records, skipped


# Karpathy's "restval" images are extra training data carved out of COCO val2014.
KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "val", "test": "test"}


def read_karpathy(path: str | os.PathLike, image_root: str | os.PathLike,
                  splits: dict[str, str] = KARPATHY_SPLITS) -> tuple[list[Record], int]:
    """Records from a Karpathy-split file, with its split names mapped by ``splits`` (unmapped: dropped).
    Returns (records, n_skipped images without any caption)."""
    data = _load(path)
    source = data.get("dataset", "karpathy")
    records, skipped = [], 0
    for i, img in enumerate(data["images"]):
        split = splits.get(img.get("split", ""))
        if split is None:
            continue
        texts = _clean(s.get("raw", "") for s in img.get("sentences", []))
        if not texts:
            skipped += 1
            continue
        key = img.get("cocoid", img.get("imgid", i))
        rel = os.path.join(img.get("filepath", ""), img["filename"])
        records.append(Record(
            id=f"{source}:{key}", image=str(Path(image_root) / rel), text=texts[0], split=split,
            source=source, captions=tuple(texts),
        ))
    return records, skipped
