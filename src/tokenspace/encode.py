"""Encode a large image collection into an index in parts, resumable at any point.

    python -m tokenspace.encode --model runs/stair/model --shards 'data/shard-{000000..000999}.tar' \\
        --index indexes/big --work indexes/big.parts

The collection is cut into parts of ``part_size`` rows (in collection order). For each part:
1. encode it and write ``part-NNNNNN.npz`` (SparseBatch.save: temp file + rename) after its ids file
   ``part-NNNNNN.ids`` (also temp + rename): a part exists whole or not at all;
2. add it to the index (``InvertedIndex.add``, one segment) and ``save`` (an atomic manifest swap).
A kill anywhere leaves complete parts and an index holding whole parts. A rerun skips parts already on
disk and parts whose ids the index already holds, so no row is encoded into the index twice.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tokenspace.sparse import SparseBatch


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def encode_images(model, images, batch_size: int = 256) -> SparseBatch:
    """``model.encode_images`` with a fast path: images already at the tower's square size skip the
    letterbox resize (an identity for them) and are stacked directly; the result is the same."""
    import torch

    t = model.image_tower
    S = t.image_size
    if not images or any(im.size != (S, S) or im.mode != "RGB" for im in images):
        return model.encode_images(images, batch_size=batch_size)
    mean = np.asarray(t.pixel_mean, np.float32)
    std = np.asarray(t.pixel_std, np.float32)
    model.eval()
    outs = []
    for s in range(0, len(images), batch_size):
        x = (np.stack([np.asarray(im, np.float32) for im in images[s:s + batch_size]]) - mean) / std
        with torch.no_grad():
            grid = model.image_grid(torch.from_numpy(x).permute(0, 3, 1, 2).to(model.device))  # [b, C, h, w]
        outs.append(model.encode_image_grids(grid))
    return SparseBatch.concat(outs)


def encode_parts(model, collection, work_dir, part_size: int = 8192, batch_size: int = 256,
                 on_part: Callable[[int, SparseBatch, list[str]], None] | None = None) -> int:
    """Encode ``collection`` (a TarCollection: ``keys`` and ``image(i)``) part by part into
    ``work_dir``; ``on_part(k, batch, ids)`` runs after each part is on disk. Returns the part count."""
    from tokenspace.data.images import ImageLoadError

    if part_size < 1 or batch_size < 1:
        raise ValueError(f"part_size and batch_size must be >= 1, got {part_size} and {batch_size}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    n_parts = (len(collection) + part_size - 1) // part_size
    for k in range(n_parts):
        npz, ids_file = work / f"part-{k:06d}.npz", work / f"part-{k:06d}.ids"
        if npz.exists() and ids_file.exists():
            batch, ids = SparseBatch.load(npz, vocab=model.vocab), ids_file.read_text().split("\n")[:-1]
        else:
            rows = range(k * part_size, min((k + 1) * part_size, len(collection)))
            images, ids = [], []
            for i in rows:
                try:
                    images.append(collection.image(i))
                    ids.append(collection.keys[i])
                except ImageLoadError:
                    continue  # unreadable: skipped (not indexed), as everywhere in tokenspace
            batch = encode_images(model, images, batch_size)
            _atomic_text(ids_file, "".join(f"{i}\n" for i in ids))
            batch.save(npz)
        if on_part is not None:
            on_part(k, batch, ids)
    return n_parts


def encode_to_index(model, collection, index_dir, work_dir, part_size: int = 8192, batch_size: int = 256):
    """Encode and ingest incrementally (see the module doc); returns the InvertedIndex."""
    from tokenspace.index import InvertedIndex
    from tokenspace.index.storage import MANIFEST

    index_dir = Path(index_dir)
    if (index_dir / MANIFEST).exists():
        index = InvertedIndex.load(index_dir, verify=False)
    else:
        index = InvertedIndex(len(model.vocab), model.vocab)
    present = set(index.ids())

    def ingest(k: int, batch: SparseBatch, ids: list[str]) -> None:
        if not ids:
            return
        there = [i in present for i in ids]
        if all(there):
            return  # ingested before the interruption
        if any(there):  # cannot happen with atomic saves; refuse rather than duplicate rows
            raise RuntimeError(f"part {k} is partly in the index {index_dir}: rebuild it")
        index.add(batch, ids)
        index.save(index_dir)
        present.update(ids)

    encode_parts(model, collection, work_dir, part_size, batch_size, on_part=ingest)
    return index


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    import tarfile

    from tokenspace.data.webdataset import TarCollection
    from tokenspace.models.registry import load

    p = argparse.ArgumentParser(description="encode a webdataset collection into an index, resumably")
    p.add_argument("--model", required=True)
    p.add_argument("--shards", required=True, nargs="+", help="tar paths, globs or {000..099} ranges")
    p.add_argument("--index", required=True)
    p.add_argument("--work", required=True, help="folder for the encoded parts")
    p.add_argument("--part-size", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=256)
    a = p.parse_args(argv)
    try:
        model = load(a.model)
        collection = TarCollection.open(a.shards)
        index = encode_to_index(model, collection, a.index, a.work, a.part_size, a.batch_size)
    except (ValueError, KeyError, OSError, RuntimeError, tarfile.TarError) as e:  # one line, no traceback
        print(f"tokenspace.encode: error: {e.args[0] if isinstance(e, KeyError) and e.args else e}", file=sys.stderr)
        return 1
    print(f"indexed {len(index)} of {len(collection)} samples ({collection.skipped} incomplete samples skipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
