"""Encode a large image collection into an index in parts, resumable at any point.

    python -m tokenspace.encode --model runs/stair/model --shards 'data/shard-{000000..000999}.tar' \\
        --index indexes/big --work indexes/big.parts

The collection is cut into parts of ``part_size`` rows (in collection order). For each part:
1. encode it and write ``part-NNNNNN.npz`` (SparseBatch.save: temp file + rename) after its ids file
   ``part-NNNNNN.ids`` (also temp + rename): a part exists whole or not at all;
2. add it to the index (``InvertedIndex.add``, one segment) and ``save`` (an atomic manifest swap).
A kill anywhere leaves complete parts and an index holding whole parts. A rerun skips parts already on
disk and parts whose ids the index already holds, so no row is encoded into the index twice.

Images are decoded and preprocessed in DataLoader worker processes (data/loader.py, ``--workers``), a
few batches ahead of the model, so the main thread only runs the model: decode overlaps compute.
On the CPU the image tower runs in ONNX Runtime when it is installed (``tower="auto"``; checked against
PyTorch to 1e-4 before use, ~5x faster than PyTorch's tower here: docs/scale.md).
"""
from __future__ import annotations

import argparse
import logging
import sys
import tarfile
import tempfile
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from tokenspace import atomic
from tokenspace.data.loader import Preprocess, SkipCounter, TarRows, files_loader, map_loader
from tokenspace.data.webdataset import TarCollection
from tokenspace.index import InvertedIndex
from tokenspace.index.storage import MANIFEST
from tokenspace.models.registry import load
from tokenspace.sparse import SparseBatch

log = logging.getLogger("tokenspace.encode")


def encode_images(model, images, batch_size: int = 256) -> SparseBatch:
    """``model.encode_images`` with a fast path: images already at the tower's square size skip the
    letterbox resize (an identity for them) and are stacked directly; the result is the same."""
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


class OnnxImageTower:
    """The image tower exported to ONNX and run by ONNX Runtime on the CPU (``pip install onnxruntime
    onnx``): the fast CPU path for encoding (~5x PyTorch's tower, docs/scale.md), used when asked
    (``tower="onnx"``, or ``"auto"`` on a CPU model) and only after a probe batch matched the PyTorch
    tower to ``tol`` (max absolute difference of the grids)."""

    def __init__(self, model, tol: float = 1e-4, threads: int | None = None, probe: int = 4):
        import onnxruntime as ort  # optional dependency: the onnx extra


        t = model.image_tower
        x = torch.randn(probe, 3, t.image_size, t.image_size, generator=torch.Generator().manual_seed(0))
        self._dir = tempfile.TemporaryDirectory(prefix="tokenspace-onnx-")
        path = f"{self._dir.name}/image_tower.onnx"
        model.eval()
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            # the exporter's notes (deprecation, constant folding skipped) say nothing a user can act on;
            # the probe below is what guards the result
            warnings.simplefilter("ignore")
            # the TorchScript-based exporter: the tower is a plain feed-forward network
            torch.onnx.export(t, (x,), path, dynamo=False, input_names=["pixels"], output_names=["grid"],
                              dynamic_axes={"pixels": {0: "b"}, "grid": {0: "b"}}, opset_version=17)
            ref = t(x.contiguous(memory_format=torch.channels_last)).float().numpy()
        so = ort.SessionOptions()
        # as many threads as torch uses, and no spin-waiting: DataLoader workers decode on the same cores,
        # and spinning threads take their time (measured: equal or faster wall time, less CPU, docs/scale.md)
        so.intra_op_num_threads = int(threads or torch.get_num_threads())
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.max_diff = float(np.abs(self._run(x.numpy()) - ref).max())
        if not self.max_diff <= tol:
            raise RuntimeError(f"the ONNX image tower differs from PyTorch by {self.max_diff:.2e} > {tol:g}")

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"pixels": np.ascontiguousarray(x, dtype=np.float32)})[0]

    def __call__(self, x):
        return torch.from_numpy(self._run(x.cpu().numpy()))


TOWERS = ("auto", "torch", "onnx")
TOWER_HELP = ("image tower runtime: onnx = ONNX Runtime (CPU, checked against PyTorch to 1e-4 before use; "
              "pip install 'tokenspace[onnx]'), torch = PyTorch, auto = onnx when installed on a CPU model "
              "(default: auto)")

# model -> (its tower's parameter versions, OnnxImageTower): an export costs seconds, so it is reused
# while the weights are unchanged (in-place updates, e.g. an optimizer step, bump a tensor's _version)
_onnx_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_version(model) -> tuple[int, ...]:
    return tuple(p._version for p in model.image_tower.parameters())


def _onnxruntime_missing() -> str | None:
    try:
        import onnx  # noqa: F401  # optional dependency: the exporter needs it
        import onnxruntime  # noqa: F401  # optional dependency: the runtime
    except ImportError as e:
        return str(e)
    return None


def image_tower(model, kind: str = "torch"):
    """The callable that turns pixels into grids: ``torch`` (None: the model's own tower, any device),
    ``onnx`` (OnnxImageTower, CPU models only; an error if it cannot be built or does not match) or
    ``auto`` (onnx for a CPU model when onnxruntime is installed and the probe matches, else torch)."""
    if kind not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(repr(t) for t in TOWERS)}, not {kind!r}")
    if kind == "torch" or (kind == "auto" and (model.device.type != "cpu" or _onnxruntime_missing())):
        return None
    if model.device.type != "cpu":
        raise ValueError("the ONNX tower runs on the CPU; the model is on " + str(model.device))
    missing = _onnxruntime_missing()
    if missing:
        raise RuntimeError(f"tower='onnx' needs onnxruntime and onnx (pip install 'tokenspace[onnx]'): {missing}")
    version = _weights_version(model)
    cached = _onnx_cache.get(model)
    if cached is not None and cached[0] == version:
        return cached[1]
    try:
        tower = OnnxImageTower(model)
    except Exception as e:  # an exporter or runtime failure, or a mismatch beyond 1e-4
        if kind == "onnx":
            raise RuntimeError(f"the ONNX image tower could not be used: {e}") from e
        log.warning("ONNX image tower not used (%s); encoding with PyTorch", e)
        return None
    _onnx_cache[model] = (version, tower)
    return tower


def encode_pixels(model, x, channels_last: bool = True, tower=None) -> SparseBatch:
    """Normalised pixels [b, 3, S, S] (a loader batch, pinned when the model is on a GPU) -> encoded
    rows: copied to the model's device without blocking, NHWC (the layout ``model.encode_images``
    feeds its tower too), the tower (or ``tower``, e.g. an OnnxImageTower) and heads in inference mode."""
    model.eval()
    with torch.inference_mode():
        if tower is not None:
            grid = tower(x).to(model.device)
        else:
            x = x.to(model.device, non_blocking=True)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            grid = model.image_grid(x)  # [b, C, h, w]
    return model.encode_image_grids(grid, batch_size=max(1, len(grid)))


def encode_files(model, paths, batch_size: int = 256, workers: int | None = None, tower: str = "torch"):
    """Image files -> (SparseBatch, kept positions): decoded and preprocessed in DataLoader workers
    while the model encodes the previous batch; unreadable files are skipped, counted and logged."""
    run = image_tower(model, tower)
    outs, kept = [], []
    count = SkipCounter("images")
    for b in files_loader(paths, Preprocess.for_model(model), batch_size, workers=workers, device=model.device):
        count(b)
        if len(b["index"]):
            outs.append(encode_pixels(model, b["pixels"], tower=run))
            kept += b["index"].tolist()
    return (SparseBatch.concat(outs) if outs else encode_images(model, [], batch_size)), kept


def encode_parts(model, collection, work_dir, part_size: int = 8192, batch_size: int = 256,
                 on_part: Callable[[int, SparseBatch, list[str]], None] | None = None,
                 workers: int | None = None, tower: str = "torch") -> int:
    """Encode ``collection`` (a TarCollection: ``keys`` and ``image(i)``) part by part into
    ``work_dir``; ``on_part(k, batch, ids)`` runs after each part is on disk. Returns the part count.
    One DataLoader (``workers`` processes, data/loader.py) decodes the rows of every part still to do,
    in order, while the model encodes; unreadable images are skipped (not indexed), counted and logged.
    ``tower="onnx"``: the image tower runs in ONNX Runtime (OnnxImageTower)."""
    if part_size < 1 or batch_size < 1:
        raise ValueError(f"part_size and batch_size must be >= 1, got {part_size} and {batch_size}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    n_parts = (len(collection) + part_size - 1) // part_size

    def files(k: int) -> tuple[Path, Path]:
        return work / f"part-{k:06d}.npz", work / f"part-{k:06d}.ids"

    todo = [k for k in range(n_parts) if not all(f.exists() for f in files(k))]
    run = image_tower(model, tower) if todo else None
    # batches never cross a part boundary, so each part is a whole number of loader batches
    batches, per_part = [], {}
    for k in todo:
        rows = list(range(k * part_size, min((k + 1) * part_size, len(collection))))
        part = [rows[s:s + batch_size] for s in range(0, len(rows), batch_size)]
        batches += part
        per_part[k] = len(part)
    stream = iter(map_loader(TarRows(collection, Preprocess.for_model(model)), batches, workers=workers,
                             device=model.device)) if batches else iter(())
    count = SkipCounter("images")
    for k in range(n_parts):
        npz, ids_file = files(k)
        if k not in per_part:
            batch, ids = SparseBatch.load(npz, vocab=model.vocab), ids_file.read_text().split("\n")[:-1]
        else:
            outs, ids = [], []
            for _ in range(per_part[k]):
                b = count(next(stream))
                if len(b["index"]):
                    outs.append(encode_pixels(model, b["pixels"], tower=run))
                    ids += b["keys"]
            batch = SparseBatch.concat(outs) if outs else encode_images(model, [], batch_size)
            atomic.write_text(ids_file, "".join(f"{i}\n" for i in ids))
            batch.save(npz)
        if on_part is not None:
            on_part(k, batch, ids)
    return n_parts


def encode_to_index(model, collection, index_dir, work_dir, part_size: int = 8192, batch_size: int = 256,
                    workers: int | None = None, tower: str = "torch"):
    """Encode and ingest incrementally (see the module doc); returns the InvertedIndex."""
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

    encode_parts(model, collection, work_dir, part_size, batch_size, on_part=ingest, workers=workers, tower=tower)
    return index


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="encode a webdataset collection into an index, resumably")
    p.add_argument("--model", required=True)
    p.add_argument("--shards", required=True, nargs="+", help="tar paths, globs or {000..099} ranges")
    p.add_argument("--index", required=True)
    p.add_argument("--work", required=True, help="folder for the encoded parts")
    p.add_argument("--part-size", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=None, help="decoding processes (default: cores - 1)")
    p.add_argument("--tower", choices=TOWERS, default="auto", help=TOWER_HELP)
    a = p.parse_args(argv)
    try:
        model = load(a.model)
        collection = TarCollection.open(a.shards)
        index = encode_to_index(model, collection, a.index, a.work, a.part_size, a.batch_size, a.workers, a.tower)
    except (ValueError, KeyError, OSError, RuntimeError, tarfile.TarError) as e:  # one line, no traceback
        print(f"tokenspace.encode: error: {e.args[0] if isinstance(e, KeyError) and e.args else e}", file=sys.stderr)
        return 1
    print(f"indexed {len(index)} of {len(collection)} samples ({collection.skipped} incomplete samples skipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
