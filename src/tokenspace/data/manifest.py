"""The manifest: one JSON object per line, ``{id, image, text, split, label?, source?, captions?}``.

Design: one Record per *image*. Datasets with several captions per image (COCO, Karpathy splits)
keep them all in ``captions`` and the first one in ``text``, so ids and images stay one-to-one
(the index is keyed by image id) and every consumer that only wants one text can read ``text``.
``record.texts`` gives all captions either way. ``image`` is a path, absolute or relative to the
manifest file's folder; ``read_manifest`` resolves it to an absolute path, ``write_manifest`` writes
it relative to the manifest's folder when it lies below the folder's parent tree.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenspace.atomic import atomic_open

FIELDS = ("id", "image", "text", "split", "label", "source", "captions")


class ManifestError(ValueError):
    """A malformed manifest line; the message names the file and the line number."""


@dataclass(frozen=True)
class Record:
    """One image with its text. ``captions`` (optional) holds all captions, ``text`` is the first."""

    id: str
    image: str
    text: str
    split: str
    label: str | None = None
    source: str | None = None
    captions: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.captions is not None:
            object.__setattr__(self, "captions", tuple(self.captions))

    @property
    def texts(self) -> tuple[str, ...]:
        """Every caption of this image (just ``(text,)`` for single-caption datasets)."""
        return self.captions if self.captions else (self.text,)

    def to_json(self) -> dict:
        d = {"id": self.id, "image": self.image, "text": self.text, "split": self.split}
        for k in ("label", "source"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.captions and len(self.captions) > 1:
            d["captions"] = list(self.captions)
        return d


def _parse(obj, where: str, base: Path) -> Record:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("id", "image", "text", "split") if k not in obj]
    if missing:
        raise ManifestError(f"{where}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(FIELDS)}")
    for k in ("id", "image", "text", "split"):
        if not isinstance(obj[k], str):
            raise ManifestError(f"{where}: field {k!r} must be a string, got {type(obj[k]).__name__}")
    caps = obj.get("captions")
    if caps is not None and (not isinstance(caps, list) or not all(isinstance(c, str) for c in caps)):
        raise ManifestError(f"{where}: 'captions' must be a list of strings")
    label = obj.get("label")
    image = obj["image"]
    if not os.path.isabs(image):
        image = os.path.normpath(os.path.join(base, image))
    return Record(obj["id"], image, obj["text"], obj["split"],
                  None if label is None else str(label), obj.get("source"), caps)


def read_manifest(path: str | os.PathLike, split: str | None = None) -> list[Record]:
    """Records of a JSONL manifest (blank lines ignored), optionally only one split.

    Raises ManifestError naming the line for bad JSON, missing fields or duplicate ids.
    """
    path = Path(path)
    base = path.resolve().parent
    out: list[Record] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ManifestError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            rec = _parse(obj, where, base)
            if rec.id in seen:
                raise ManifestError(f"{where}: duplicate id {rec.id!r} (first on line {seen[rec.id]})")
            seen[rec.id] = n
            if split is None or rec.split == split:
                out.append(rec)
    return out


def write_manifest(records: Iterable[Record], path: str | os.PathLike, relative: bool = True) -> Path:
    """Write records as JSONL atomically (tokenspace.atomic). Image paths become relative to the
    manifest's folder when ``relative`` (so a dataset folder can be moved as a whole)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.resolve().parent
    with atomic_open(path, "w", encoding="utf-8") as f:
        for rec in records:
            d = rec.to_json()
            if relative and os.path.isabs(d["image"]):
                d["image"] = os.path.relpath(d["image"], base)
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    return path


def drop_empty_texts(records: Sequence[Record]) -> tuple[list[Record], list[Record]]:
    """(kept, dropped): records whose text is empty or whitespace are dropped, never trained on."""
    kept, dropped = [], []
    for r in records:
        (kept if r.text and r.text.strip() else dropped).append(r)
    return kept, dropped


def split_counts(records: Iterable[Record]) -> dict[str, int]:
    """Number of records per split, in first-seen order."""
    out: dict[str, int] = {}
    for r in records:
        out[r.split] = out.get(r.split, 0) + 1
    return out
