"""What an index folder holds, by name: the one place that knows the layout, for the road that writes a
folder (encode.py) and the session that reads one (searcher.py), so neither learns it from the other.

- an InvertedIndex folder (`tokenspace index build` / `encode`): ``MANIFEST.json`` (index/storage.py),
  whose ``info`` records the model that encoded the rows and the default ranking, and each row's
  metadata (``row_fields``: caption, source, label, image);
- an older InvertedIndex folder: the same, plus a ``collection.json`` beside it ({model, ranking, items:
  id -> {image, text, label, source}}), read when the manifest records no info;
- a DenseIndex folder (`index build` with a dense model, the dense half of a hybrid search): ``ids.json``
  and ``flat-NNNNNN.faiss`` (index/dense.py) and a ``collection.json`` naming the model that encodes its queries
  (it has no manifest).

Plain JSON: no torch, as everywhere in index/.
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenspace import atomic
from tokenspace.index import manifest as _manifest
from tokenspace.index.storage import MANIFEST

COLLECTION_FILE = "collection.json"  # an older index's collection metadata; a dense index's model
DENSE_IDS = "ids.json"  # what a DenseIndex folder holds beside its FAISS file (index/dense.py)

__all__ = ["COLLECTION_FILE", "DENSE_IDS", "MANIFEST", "holds_index", "index_model", "read_collection_json",
           "row_fields", "write_dense_collection"]


def row_fields(*, image=None, text=None, label=None, source=None) -> dict:
    """The metadata fields an index row carries about its item (the ones a search shows and filters on):
    ``caption`` (the text), ``source``, ``label``, ``image`` (its file), each only when it has a value."""
    return {k: v for k, v in (("source", source), ("caption", text), ("label", label), ("image", image))
            if v not in (None, "")}


def holds_index(folder) -> str | None:
    """"sparse" for an InvertedIndex folder, "dense" for a DenseIndex folder, None for anything else."""
    p = Path(folder)
    return "sparse" if (p / MANIFEST).exists() else "dense" if (p / DENSE_IDS).exists() else None


def read_collection_json(index_dir) -> dict:
    """An older index folder's collection.json ({model, items: id -> {image, text, ...}, ranking}); an
    empty one when the folder has none. A damaged file is a ValueError naming it."""
    path = Path(index_dir) / COLLECTION_FILE
    if not path.exists():
        return {"model": None, "items": {}}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not readable JSON ({e}); write it again with `tokenspace index build`") from None
    items = meta.get("items", {}) if isinstance(meta, dict) else None
    if (not isinstance(items, dict) or not isinstance(meta.get("model"), (str, type(None)))
            or not all(isinstance(v, dict) for v in items.values())):
        shape = '{"model": a path or null, "items": {id: {"image": ..., "text": ...}}}'
        raise ValueError(f"{path}: expected {shape}; write it again with `tokenspace index build`")
    return {"model": None, **meta, "items": items}


def write_dense_collection(index_dir, model_ref) -> None:
    """A dense index folder's collection.json: the model that encodes its queries (it has no manifest)."""
    doc = {"model": str(model_ref) if model_ref else None, "items": {}}
    atomic.write_text(Path(index_dir) / COLLECTION_FILE, json.dumps(doc))


def index_model(index_dir) -> str | None:
    """The model reference an index folder records (its manifest's info, else its collection.json: a
    dense index's); None when it names none. Reads the manifest only: the index itself is not opened."""
    root = Path(index_dir)
    if (root / MANIFEST).exists():
        info = _manifest.read(root).info or {}
        if info:
            return info.get("model")
    return read_collection_json(root).get("model")
