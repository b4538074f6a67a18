"""The one road from images to an index: a collection encoded in parts, resumable at any point.

    tokenspace encode --model runs/stair/model --shards 'data/shard-{000000..000999}.tar' \\
        --index indexes/big --work indexes/big.parts
    tokenspace index build --model runs/stair/model --data emoji:test --out indexes/emoji

Both commands encode through ``encode_parts``: `encode` a TarCollection (webdataset shards), `index build`
a FileCollection (the image files of data specs). ``encode_to_index`` adds each part to the index as it
is written (searchable part by part, extensible with more shards); ``build_index`` builds the index
once every part is on disk (what reordering, generic-token factors and a hub prior need: they see the
whole collection), commits it in one save and removes its parts. Either way each row carries its
caption (from files also its image, label and source: index/folder.py: row_fields) and the index records the
model and ranking (``InvertedIndex.info``), so searcher.py opens it from the folder alone.

The collection is cut into parts of ``part_size`` rows (in collection order). For each part:
1. encode it and write ``part-NNNNNN.npz`` (SparseBatch.save: temp file + rename) after its ids file
   ``part-NNNNNN.ids`` (also temp + rename): a part exists whole or not at all;
2. add it to the index (``InvertedIndex.add``, one segment) and ``save`` (an atomic manifest swap).
A kill anywhere leaves complete parts and an index holding whole parts. A rerun skips parts already on
disk and rows whose ids the index already holds, so no row is encoded into the index twice.

Parts are found by number, so a part is reused only when it was made from the same rows by the same
model: the work folder's ``encode.json`` (written atomically before the first part) records the shards
in order (path, row count, a hash of their keys and image sizes), ``part_size`` and the model
(``model_fingerprint``: config name, vocabulary size, hashes of the config and the weights). A rerun
- with the same shards, part size and model resumes;
- whose shards are the recorded ones followed by more (same model and part size) extends: the last part,
  if short, is encoded again with the new rows that complete it, and the new parts follow;
- with anything else is refused (ValueError naming the work folder and what differs), parts untouched.
A work folder from before ``encode.json`` is adopted with a warning (the model that made its parts cannot
be checked): a part whose ids are not its rows' keys is encoded again, as is a damaged part (an npz or
ids file that cannot be read, or that disagree), each with a warning naming the file.

Images are decoded and preprocessed in DataLoader worker processes (data/loader.py, ``--workers``), a
few batches ahead of the model, so the main thread only runs the model: decode overlaps compute.
On the CPU the image tower runs in ONNX Runtime when it is installed (``tower="auto"``; checked against
PyTorch to 1e-4 before use, ~5x faster than PyTorch's tower here: docs/scale.md).

On a GPU (``decode="auto"`` on a CUDA model, or ``decode="device"``) the workers only read bytes: JPEGs
are decoded on the GPU by nvJPEG, letterboxed there exactly as the host path does it
(data/device_decode.py), each row's top-n tokens are picked on the device and only those come back,
one batch behind the device so that the host's work overlaps the next batch's, and ``encode_parts``
writes each part in a thread while the next part encodes. ``precision="bf16"`` / ``"fp16"`` autocasts
the image tower and runs the heads' vocabulary products in that type (models/capabilities.py:
LowPrecisionHeads); the default, fp32, is the host path's arithmetic. nvJPEG's pixels differ from
Pillow's by a few levels (docs/scale.md); ``jpeg="pillow"`` has the workers decode JPEGs as the host
path does, which gives its model inputs to the bit.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
import weakref
import zipfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from tokenspace import atomic
from tokenspace.data import device_decode
from tokenspace.data.loader import ImageFiles, Preprocess, SkipCounter, TarRows, files_loader, map_loader
from tokenspace.data.manifest import Record
from tokenspace.data.specs import home_dir, load_split
from tokenspace.data.webdataset import TarCollection
from tokenspace.explain.ranking import HubBank, ModelRanking, Ranking, encode_bank
from tokenspace.index import InvertedIndex
from tokenspace.index.dense import DenseIndex  # faiss itself loads only when a dense index is built
from tokenspace.index.folder import COLLECTION_FILE, row_fields, write_dense_collection
from tokenspace.index.storage import MANIFEST
from tokenspace.models.capabilities import LowPrecisionHeads
from tokenspace.models.onnx_export import export_module, missing_runtime, session
from tokenspace.sparse import SparseBatch

log = logging.getLogger("tokenspace.encode")


class OnnxImageTower:
    """The image tower exported to ONNX and run by ONNX Runtime on the CPU (``pip install onnxruntime
    onnx``): the fast CPU path for encoding (~5x PyTorch's tower, docs/scale.md), used when asked
    (``tower="onnx"``, or ``"auto"`` on a CPU model) and only after a probe batch matched the PyTorch
    tower to ``tol`` (max absolute difference of the grids)."""

    def __init__(self, model, tol: float = 1e-4, threads: int | None = None, probe: int = 4):
        t = model.image_tower
        x = torch.randn(probe, 3, t.image_size, t.image_size, generator=torch.Generator().manual_seed(0))
        model.eval()
        # the .onnx file lives only until the session has read it (13 MB for EfficientNet-Lite0), in a
        # folder removed on every way out; one a killed run left is swept by the next (atomic.scratch_folder)
        with atomic.scratch_folder("tokenspace-onnx-") as tmp:
            # the one road to ONNX (models/onnx_export.py, which export-onnx takes too); the probe below guards it
            path = export_module(t, (x,), str(tmp / "image_tower.onnx"), ["pixels"], ["grid"],
                                 {"pixels": {0: "b"}, "grid": {0: "b"}})
            self.session = session(path, threads)
        with torch.no_grad():
            ref = t(x.contiguous(memory_format=torch.channels_last)).float().numpy()
        self.max_diff = float(np.abs(self._run(x.numpy()) - ref).max())
        if not self.max_diff <= tol:
            raise RuntimeError(f"the ONNX image tower differs from PyTorch by {self.max_diff:.2e} > {tol:g}")

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"pixels": np.ascontiguousarray(x, dtype=np.float32)})[0]

    def __call__(self, x):
        return torch.from_numpy(self._run(x.cpu().numpy()))


TOWERS = ("auto", "torch", "onnx")
# model -> (its tower's parameter versions, OnnxImageTower): an export costs seconds, so it is reused
# while the weights are unchanged (in-place updates, e.g. an optimizer step, bump a tensor's _version)
_onnx_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_version(model) -> tuple[int, ...]:
    return tuple(p._version for p in model.image_tower.parameters())


def _onnxruntime_missing() -> str | None:
    return missing_runtime()  # a name of its own: tests stand in for it


def check_tower(model, kind: str) -> None:
    """Refuse, in words a command can show as they are, a tower ``model`` cannot run, before any image is
    read (the ONNX export itself is only tried, and checked, on the first batch)."""
    if kind not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(repr(t) for t in TOWERS)}, not {kind!r}")
    if kind != "onnx":
        return
    if model.packed_sizes:
        sizes = ", ".join(str(s) for s in model.packed_sizes)
        raise ValueError(f"the ONNX image tower cannot run this model: it reads each image at several sizes "
                         f"({sizes} pixels) and the ONNX export has one; the PyTorch tower runs it")
    if model.device.type != "cpu":
        raise ValueError(f"the ONNX image tower runs on the CPU and this model is on {model.device}")
    missing = _onnxruntime_missing()
    if missing:
        raise RuntimeError(f"the ONNX image tower needs onnxruntime and onnx (pip install 'tokenspace[onnx]'): "
                           f"{missing}")


def image_tower(model, kind: str = "torch"):
    """The callable that turns pixels into grids: ``torch`` (None: the model's own tower, any device),
    ``onnx`` (OnnxImageTower, CPU models only; an error if it cannot be built or does not match) or
    ``auto`` (onnx for a CPU model when onnxruntime is installed and the probe matches, else torch)."""
    if kind not in TOWERS:
        raise ValueError(f"tower must be one of {', '.join(repr(t) for t in TOWERS)}, not {kind!r}")
    if kind == "torch" or (kind == "auto" and (model.device.type != "cpu" or model.packed_sizes
                                                or _onnxruntime_missing())):
        return None
    check_tower(model, kind)
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


def encode_pixels(model, x, channels_last: bool = True, tower=None, precision: str = "fp32") -> SparseBatch:
    """Normalised pixels [b, 3, S, S] (a loader batch, pinned when the model is on a GPU) -> encoded
    rows: copied to the model's device without blocking, NHWC (the layout ``model.encode_image``
    feeds its tower too), the tower (or ``tower``, e.g. an OnnxImageTower) and heads in inference mode
    (``precision``: see the module doc)."""
    model.eval()
    with torch.inference_mode():
        if tower is not None:
            grid = tower(x).to(model.device)
        else:
            x = x.to(model.device, non_blocking=True)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with _autocast(model, precision):
                grid = model.image_grid(x)  # [b, C, h, w]
    with _head_dtype(model, precision):
        return model.encode_image_grids(grid.float(), batch_size=max(1, len(grid)))


PRECISIONS = ("fp32", "bf16", "fp16")
DECODES = ("auto", "host", "device")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, not {precision!r}")


def _autocast(model, precision: str):
    """The image tower's autocast for ``precision`` (none for fp32)."""
    _check_precision(precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(model.device.type, dtype=_DTYPES[precision])


@contextlib.contextmanager
def _head_dtype(model, precision: str):
    """The vocabulary products of the model's heads (and of a fused model's parts) in ``precision``; put
    back after."""
    _check_precision(precision)
    heads = [m for m in (model, *getattr(model, "parts", ())) if isinstance(m, LowPrecisionHeads)]
    saved = [m.compute_dtype for m in heads]
    if precision != "fp32":
        for m in heads:
            m.compute_dtype = _DTYPES[precision]
    try:
        yield
    finally:
        for m, d in zip(heads, saved):
            m.compute_dtype = d


def decode_path(model, decode: str = "auto") -> str:
    """Where images are decoded and letterboxed: ``host`` (DataLoader workers: data/loader.py) or
    ``device`` (on the model's device: data/device_decode.py); ``auto`` is ``device`` for a CUDA model."""
    if decode not in DECODES:
        raise ValueError(f"decode must be one of {', '.join(map(repr, DECODES))}, not {decode!r}")
    if decode == "auto":
        return "device" if model.device.type == "cuda" else "host"
    return decode


JPEG_DECODERS = ("nvjpeg", "pillow")


def _jpeg_bytes(model, jpeg: str = "nvjpeg") -> bool:
    """Whether JPEGs travel as bytes to be decoded on the device (``jpeg="nvjpeg"`` on a CUDA model with
    torchvision); else the workers decode them with Pillow, as the host path does (``"pillow"``: the
    device path's model inputs are then the host path's, to the bit)."""
    if jpeg not in JPEG_DECODERS:
        raise ValueError(f"jpeg must be one of {', '.join(map(repr, JPEG_DECODERS))}, not {jpeg!r}")
    return jpeg == "nvjpeg" and model.device.type == "cuda" and device_decode.nvjpeg_available()


class _Stages:
    """Seconds per stage of the device path (``profile``): each stage's device work is waited for before
    its clock stops, so the stages do not overlap while profiled (a profiled run is slower)."""

    def __init__(self, into: dict | None, device: torch.device):
        self.into, self.device, self.t = into, device, time.perf_counter()

    def __call__(self, stage: str) -> None:
        if self.into is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.into[stage] = self.into.get(stage, 0.0) + now - self.t
        self.t = now


class _DeviceEncoder:
    """The device path's model side: raw batches (device_decode.collate_raw) -> (SparseBatch or dense
    rows, kept batch positions), one batch behind the device."""

    def __init__(self, model, tower=None, precision: str = "fp32", channels_last: bool = True,
                 profile: dict | None = None):
        _check_precision(precision)
        self.model, self.tower, self.precision, self.channels_last = model, tower, precision, channels_last
        self.prep = Preprocess.for_model(model)
        self.device = model.device
        self.profile = profile

    def run(self, batches: Iterable[dict], count: SkipCounter) -> Iterator[tuple[object, dict, list[int]]]:
        """Per raw batch, in order: (rows or None when no image of it was readable, the batch, the
        positions in it that the rows are)."""
        clock = _Stages(self.profile, self.device)
        pending = None
        it = iter(batches)
        while True:
            clock.t = time.perf_counter()
            b = next(it, None)
            if b is None:
                break
            clock("read")
            imgs, keep, failed = device_decode.decode_batch(b, self.device)
            b["skipped"] = int(b["skipped"]) + len(failed)
            count(b)
            clock("decode")
            finish = self._submit(imgs, clock) if imgs else None
            if pending is not None:
                yield self._finish(*pending, clock)
            pending = (finish, b, keep)
        if pending is not None:
            yield self._finish(*pending, clock)

    def _finish(self, finish, b, keep, clock):
        rows = finish() if finish is not None else None
        clock("top-n")
        return rows, b, keep

    def _submit(self, imgs: list[torch.Tensor], clock: _Stages) -> Callable[[], object]:
        """Enqueue one batch's device work; return what waits for its rows and builds them on the host."""
        m, p = self.model, self.prep
        m.eval()
        cudnn = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True  # one input shape per batch size: tuned once, kept
        try:
            with torch.inference_mode():
                x = device_decode.letterbox(imgs, p.image_size, p.mean, p.std)  # NHWC float32
                if not self.channels_last:
                    x = x.contiguous()
                clock("resize")
                if self.tower is not None:
                    grid = self.tower(x).to(self.device)
                else:
                    with _autocast(m, self.precision):
                        grid = m.image_grid(x)
                clock("tower")
                with _head_dtype(m, self.precision):
                    emb = m.image_embed(grid.float())
                clock("heads")
                return _rows_from_device(m, emb)
        finally:
            torch.backends.cudnn.benchmark = cudnn


def _rows_from_device(model, emb: torch.Tensor) -> Callable[[], object]:
    """``model._to_output(emb, model.image_top_n)`` with the top-n picked on the device: only each row's
    n heaviest (value, column) pairs come back, copied without blocking; the returned callable waits for
    them and builds the rows (the same SparseBatch, to the bit: the same values, non-zeros in column
    order). Models without a top-n or with dense rows take the plain road."""
    rows = model.rows(emb, model.image_top_n)  # keep_top + normalise: the host path's own arithmetic
    k = model.image_top_n
    if not model.sparse:
        dense = rows.to("cpu", non_blocking=True)
        done = _event(rows.device)
        return lambda: (done(), dense.numpy())[1]
    if not k or k >= rows.shape[1]:
        return lambda: SparseBatch.from_torch(rows, vocab=model.vocab)
    vals, cols = rows.topk(k, dim=1)  # a row has at most k non-zeros (keep_top), so all are among its top k
    cols, order = cols.sort(dim=1)
    vals = vals.gather(1, order)
    hv, hc = vals.to("cpu", non_blocking=True), cols.to(torch.int32).to("cpu", non_blocking=True)
    done = _event(rows.device)

    def build() -> SparseBatch:
        done()
        v, c = hv.numpy(), hc.numpy()
        keep = v > 0  # SparseBatch.from_torch's threshold
        indptr = np.zeros(len(v) + 1, np.int64)
        np.cumsum(keep.sum(1), out=indptr[1:])
        return SparseBatch(indptr, c[keep], v[keep], rows.shape[1], model.vocab)

    return build


def _event(device: torch.device) -> Callable[[], None]:
    """A wait for the work enqueued so far on ``device`` (nothing to wait for on a CPU)."""
    if device.type != "cuda":
        return lambda: None
    ev = torch.cuda.Event()
    ev.record()
    return ev.synchronize


def encode_files(model, paths, batch_size: int = 256, workers: int | None = None, tower: str = "torch",
                 decode: str = "auto", precision: str = "fp32", profile: dict | None = None, jpeg: str = "nvjpeg"):
    """Image files -> (SparseBatch, kept positions): decoded and preprocessed in DataLoader workers
    while the model encodes the previous batch (``decode="host"``), or on the model's device
    (``"device"``; ``"auto"``: on a CUDA model; module doc); unreadable files are skipped, counted and
    logged. ``profile``: a dict that gets the device path's seconds per stage (slower: each stage waits
    for the device). ``jpeg``: on the device path, ``"nvjpeg"`` decodes JPEGs on the GPU (pixels within a
    few levels of Pillow's: docs/scale.md), ``"pillow"`` in the workers (the host path's model inputs, to the
    bit: the same rows on the CPU; on a GPU up to its kernels' rounding)."""
    run = image_tower(model, tower)
    _check_precision(precision)
    outs, kept = [], []
    count = SkipCounter("images")
    if decode_path(model, decode) == "device":
        ds = device_decode.RawFiles(paths, jpeg_bytes=_jpeg_bytes(model, jpeg))
        batches = [list(range(s, min(s + batch_size, len(paths)))) for s in range(0, len(paths), batch_size)]
        loader = device_decode.raw_loader(ds, batches, workers=workers, device=model.device)
        for rows, b, keep in _DeviceEncoder(model, run, precision, profile=profile).run(loader, count):
            if rows is not None:
                outs.append(rows)
                kept += [int(b["index"][p]) for p in keep]
    else:
        for b in files_loader(paths, Preprocess.for_model(model), batch_size, workers=workers, device=model.device):
            count(b)
            if len(b["index"]):
                outs.append(encode_pixels(model, b["pixels"], tower=run, precision=precision))
                kept += b["index"].tolist()
    return (SparseBatch.concat(outs) if outs else model.encode_image([])), kept


RECORD = "encode.json"  # in the work folder: what its parts were made from (module doc)


def model_fingerprint(model) -> dict:
    """What identifies the model that encoded a part: its config's name, its vocabulary's size, and
    sha256 hashes of its config and of its weights. The weights are what tell a retrained checkpoint
    from the one before it (same config, same vocabulary); hashing them reads every parameter once,
    about a second per GB, little beside encoding a collection big enough to need parts."""
    config = getattr(model, "config", None)
    d = dict(config.to_dict()) if config is not None else {}
    d.pop("vocab", None)  # where the vocabulary file was found, not what it holds (hashed below)
    weights = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        weights.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        weights.update(t.reshape(-1).view(torch.uint8).numpy())  # the raw bytes, for any dtype
    tokens = getattr(model.vocab, "tokens", None) or [str(i) for i in range(len(model.vocab))]
    return {"name": d.get("name", type(model).__name__), "vocab_size": len(model.vocab),
            "config_sha256": hashlib.sha256(json.dumps([d, tokens], sort_keys=True).encode()).hexdigest(),
            "weights_sha256": weights.hexdigest()}


def _shard_records(collection) -> list[dict]:
    """Per shard, in order: its resolved path, its rows and a hash of their keys and image sizes (a
    shard rewritten under the same name shows there; a moved one is refused: its path differs). A
    FileCollection's sources are its data specs instead (FileCollection.sources)."""
    if isinstance(collection, FileCollection):
        return collection.sources()
    hashes = [hashlib.sha256() for _ in collection.shards]
    rows = [0] * len(collection.shards)
    for key, si, size in zip(collection.keys, collection.shard_of.tolist(), collection.size.tolist()):
        hashes[si].update(f"{key}\0{size}\n".encode())
        rows[si] += 1
    return [{"path": str(Path(s).resolve()), "rows": n, "sha256": h.hexdigest()}
            for s, n, h in zip(collection.shards, rows, hashes)]


def _model_change(old: dict, new: dict) -> str:
    said = []
    if old.get("name") != new["name"]:
        said.append(f"{old.get('name')} then, {new['name']} now")
    if old.get("vocab_size") != new["vocab_size"]:
        said.append(f"a vocabulary of {old.get('vocab_size')} then, {new['vocab_size']} now")
    elif old.get("config_sha256") != new["config_sha256"]:  # the hash covers the vocabulary's tokens too
        said.append("its config or vocabulary differs")
    if old.get("weights_sha256") != new["weights_sha256"]:
        said.append("its weights differ")
    return ", ".join(said)


def _shard_change(old: list[dict], new: list[dict]) -> str:
    for i, (o, n) in enumerate(zip(old, new)):
        if o["path"] != n["path"]:
            return f"shard {i + 1} is {n['path']}, was {o['path']}"
        if o != n:
            return (f"{n['path']} changed since ({o['rows']} samples then, {n['rows']} now, "
                    "or other keys or images)")
    return f"{len(old)} shard(s) then, {len(new)} now"


def _check_work(work: Path, made: dict) -> None:
    """Compare the work folder's record with this run (``made``, the record it would write) and raise
    ValueError when the folder's parts cannot be reused; write the record when it is new or extended."""
    path = work / RECORD
    has_parts = next(work.glob("part-*"), None) is not None
    if not has_parts or not path.exists():  # nothing to protect, or a folder from before the record
        if has_parts:
            log.warning("%s has parts but no %s (from an older tokenspace): they are kept where their ids "
                        "are their rows' keys, but the model that encoded them cannot be checked",
                        work, RECORD)
        atomic.write_text(path, json.dumps(made, indent=1) + "\n")
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        old_shards, old_size, old_model = old["shards"], int(old["part_size"]), old["model"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: damaged ({e}); delete it to keep the parts in {work} (the model that made "
                         f"them is then not checked), or delete {work} to encode them again") from None
    if old_model != made["model"]:
        raise ValueError(f"{work}: its parts were encoded by another model "
                         f"({_model_change(old_model, made['model'])}): rerun with that model to resume, "
                         "or use a new --index for this one")
    if old_size != made["part_size"]:
        raise ValueError(f"{work}: its parts hold {old_size} images each, not {made['part_size']}: "
                         f"rerun with --part-size {old_size} to resume, or use a new --index")
    new_shards = made["shards"]
    if new_shards == old_shards:
        return
    if len(new_shards) <= len(old_shards) or new_shards[:len(old_shards)] != old_shards:
        raise ValueError(f"{work}: its parts were encoded from other shards "
                         f"({_shard_change(old_shards, new_shards)}): rerun with the same --shards to resume "
                         "(more shards may follow them), or use a new --index for these")
    # more shards after the recorded ones: the recorded rows keep their numbers, so every full part stays
    # valid, and a short last part gets rows from the new shards, so it is encoded again. Its files go
    # before the new record is written: a kill in between leaves the old record and no stale part.
    old_rows = sum(sh["rows"] for sh in old_shards)
    if old_rows % old_size and old_rows < sum(sh["rows"] for sh in new_shards):
        last = old_rows // old_size
        for f in (work / f"part-{last:06d}.npz", work / f"part-{last:06d}.ids"):
            f.unlink(missing_ok=True)
    atomic.write_text(path, json.dumps(made, indent=1) + "\n")
    log.info("%s: extending its parts with %d new shard(s)", work, len(new_shards) - len(old_shards))


class _Damaged(Exception):
    """A part on disk that cannot be used; the message names the file and why."""


def _why(e: BaseException) -> str:
    cause = e.__cause__ or e  # SparseBatch.load wraps the reader's error in one that repeats the path
    return f"{type(cause).__name__}: {cause}" if isinstance(cause, zipfile.BadZipFile) else str(cause)


def _concat(model, outs: list):
    """One part's rows from its batches: a SparseBatch, or float32 rows [n, d] for a dense model."""
    if not outs:
        return model.encode_image([])
    return np.concatenate(outs) if isinstance(outs[0], np.ndarray) else SparseBatch.concat(outs)


def _save_rows(rows, npz: Path) -> None:
    """A part's rows, written atomically: SparseBatch.save, or a dense model's rows as ``dense`` in an npz."""
    if isinstance(rows, SparseBatch):
        rows.save(npz)
        return
    with atomic.atomic_open(npz, "wb") as f:
        np.savez(f, dense=np.asarray(rows, np.float32))


def _load_rows(npz: Path, vocab):
    with np.load(npz) as z:
        if "dense" in z.files:
            return np.asarray(z["dense"])
    return SparseBatch.load(npz, vocab=vocab)


def _read_part(npz: Path, ids_file: Path, vocab, rows: set[str]) -> tuple[SparseBatch, list[str]]:
    """A part's rows and ids, or _Damaged: an unreadable file, ids that do not count its rows, or ids
    that are not keys of the rows the part covers."""
    try:
        text = ids_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _Damaged(f"{ids_file} is damaged ({e})") from None
    if text and not text.endswith("\n"):  # written whole, one id per line: a missing end is a cut file
        raise _Damaged(f"{ids_file} is damaged (cut short)")
    ids = text.split("\n")[:-1]
    try:
        batch = _load_rows(npz, vocab)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise _Damaged(f"{npz} is damaged ({_why(e)})") from None
    if len(ids) != len(batch):
        raise _Damaged(f"{ids_file} is damaged ({len(ids)} ids for the {len(batch)} rows of {npz.name})")
    if not rows.issuperset(ids):
        raise _Damaged(f"{ids_file} is damaged or from other shards (its ids are not keys of the samples "
                       "this part covers)")
    return batch, ids


class _Parts:
    """A work folder's parts: the rows each covers (``size`` rows, the last one shorter), their batches
    (never crossing a part, so each part is a whole number of loader batches) and their two files."""

    def __init__(self, work: Path, n_rows: int, size: int, batch_size: int):
        self.work, self.n_rows, self.size, self.batch_size = work, n_rows, size, batch_size
        self.count = (n_rows + size - 1) // size

    def files(self, k: int) -> tuple[Path, Path]:
        return self.work / f"part-{k:06d}.npz", self.work / f"part-{k:06d}.ids"

    def rows(self, k: int) -> range:
        return range(k * self.size, min((k + 1) * self.size, self.n_rows))

    def batches(self, k: int) -> list[list[int]]:
        rows = list(self.rows(k))
        return [rows[s:s + self.batch_size] for s in range(0, len(rows), self.batch_size)]

    def missing(self) -> list[int]:
        return [k for k in range(self.count) if not all(f.exists() for f in self.files(k))]


class _Reader:
    """The collection's images as the model takes them, batch by batch: decoded and preprocessed by
    DataLoader workers (data/loader.py), or raw bytes for the device's decoder (data/device_decode.py)."""

    def __init__(self, model, collection, on_device: bool, jpeg_bytes: bool, workers: int | None):
        self.model, self.collection, self.on_device, self.jpeg_bytes = model, collection, on_device, jpeg_bytes
        self.workers = workers

    def stream(self, batches: list[list[int]]):
        if not batches:
            return iter(())
        if self.on_device:
            raw = _raw_rows(self.collection, self.jpeg_bytes)
            return iter(device_decode.raw_loader(raw, batches, workers=self.workers, device=self.model.device))
        return iter(map_loader(_rows(self.collection, Preprocess.for_model(self.model)), batches,
                               workers=self.workers, device=self.model.device))


class _Encoder:
    """A part's rows and ids from its batches of a reader's stream: the image tower (built once, and
    only when a part is encoded), the count of unreadable images skipped, the progress bar."""

    def __init__(self, model, tower: str, precision: str, profile: dict | None, on_device: bool, bar):
        self.model, self.precision, self.profile, self.on_device, self.bar = model, precision, profile, on_device, bar
        self.tower = functools.cache(lambda: image_tower(model, tower))
        self.count = SkipCounter("images")

    def part(self, stream, batches: list[list[int]]) -> tuple[SparseBatch, list[str]]:
        outs, ids = [], []
        if self.on_device:
            enc = _DeviceEncoder(self.model, self.tower(), self.precision, profile=self.profile)
            for rows, (got, b, keep) in zip(batches, enc.run(islice(stream, len(batches)), self.count)):
                self.bar.update(len(rows))
                if got is not None:
                    outs.append(got)
                    ids += [b["keys"][p] for p in keep]
        else:
            for rows in batches:
                b = self.count(next(stream))
                self.bar.update(len(rows))
                if len(b["index"]):
                    outs.append(encode_pixels(self.model, b["pixels"], tower=self.tower(), precision=self.precision))
                    ids += b["keys"]
        return _concat(self.model, outs), ids


class _Writer:
    """Each part's files (the ids, then the rows: each file whole or absent) and the caller's
    ``on_part``, in part order. ``threaded`` (the device path): in one thread while the next part
    encodes, one part at a time; a failed write stops the run at the next part, its error raised there."""

    def __init__(self, parts: _Parts, on_part, profile: dict | None, threaded: bool):
        self.parts, self.on_part, self.profile = parts, on_part, profile
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tokenspace-encode-write") if threaded else None
        self.last: Future | None = None

    def __enter__(self) -> "_Writer":
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def put(self, k: int, batch, ids: list[str], write: bool) -> None:
        self.wait()
        if self.pool is None:
            self._finish(k, batch, ids, write)
        else:
            self.last = self.pool.submit(self._finish, k, batch, ids, write)

    def wait(self) -> None:
        if self.last is not None:
            self.last.result()

    def _finish(self, k: int, batch, ids: list[str], write: bool) -> None:
        t0 = time.perf_counter()
        if write:
            npz, ids_file = self.parts.files(k)
            atomic.write_text(ids_file, "".join(f"{i}\n" for i in ids))
            _save_rows(batch, npz)
        if self.on_part is not None:
            self.on_part(k, batch, ids)
        if self.profile is not None:
            self.profile["write"] = self.profile.get("write", 0.0) + time.perf_counter() - t0


def _open_work(work: Path, made: dict, replace_stale: bool) -> None:
    """The work folder, checked against what its parts must come from (``_check_work``). With
    ``replace_stale`` (build_index: its parts are its own scratch, worth nothing once the build they served
    changed) parts of another build are removed instead of refused."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        _check_work(work, made)
    except ValueError as e:
        if not replace_stale:
            raise
        log.warning("%s; encoding them again", str(e).split(":", 1)[0] + ": parts of another build")
        _remove_parts(work)
        work.mkdir(parents=True, exist_ok=True)
        _check_work(work, made)


def encode_parts(model, collection, work_dir, part_size: int = 8192, batch_size: int = 256,
                 on_part: Callable[[int, SparseBatch, list[str]], None] | None = None,
                 workers: int | None = None, tower: str = "torch", progress: bool = False,
                 decode: str = "auto", precision: str = "fp32", profile: dict | None = None,
                 jpeg: str = "nvjpeg", replace_stale: bool = False) -> int:
    """Encode ``collection`` (a TarCollection or a FileCollection) part by part into
    ``work_dir``; ``on_part(k, batch, ids)`` runs after each part is on disk. Returns the part count.
    One DataLoader (``workers`` processes, data/loader.py) decodes the rows of every part still to do,
    in order, while the model encodes; unreadable images are skipped (not indexed), counted and logged.
    ``tower="onnx"``: the image tower runs in ONNX Runtime (OnnxImageTower). Parts already in
    ``work_dir`` are reused only when its record says they come from these shards, this part size and
    this model, or from shards these extend (module doc); otherwise ValueError, nothing changed.
    ``progress``: a tqdm bar of the samples done (parts found on disk count at once). ``decode``,
    ``precision``, ``profile``, ``jpeg``: as for ``encode_files``; on the device path the parts are written (and
    ``on_part`` runs) in one thread, in order, while the next part encodes (``profile["write"]``).

    Three pieces: a reader (``_Reader``: the images, decoded), an encoder (``_Encoder``: a part's rows)
    and a writer (``_Writer``: a part's files and ``on_part``), over the parts' plan (``_Parts``)."""
    if part_size < 1 or batch_size < 1:
        raise ValueError(f"part_size and batch_size must be >= 1, got {part_size} and {batch_size}")
    _check_precision(precision)
    on_device = decode_path(model, decode) == "device"
    jpeg_bytes = _jpeg_bytes(model, jpeg)  # before the work folder is made: a bad option changes nothing
    work = Path(work_dir)
    _open_work(work, {"format": 1, "part_size": part_size, "shards": _shard_records(collection),
                      "model": model_fingerprint(model)}, replace_stale)
    parts = _Parts(work, len(collection), part_size, batch_size)
    per_part = {k: parts.batches(k) for k in parts.missing()}
    batches = [b for k in per_part for b in per_part[k]]
    if workers is None and len(batches) <= 1:
        workers = 0  # one batch: starting a worker process costs more than it overlaps
    reader = _Reader(model, collection, on_device, jpeg_bytes, workers)
    stream = reader.stream(batches)  # one stream for every part still to do, in order
    bar = tqdm(total=len(collection), unit="img", desc="encode", disable=not progress)
    encoder = _Encoder(model, tower, precision, profile, on_device, bar)
    with bar, _Writer(parts, on_part, profile, threaded=on_device) as writer:
        for k in range(parts.count):
            batch, write = None, False
            if k not in per_part:
                npz, ids_file = parts.files(k)
                try:
                    batch, ids = _read_part(npz, ids_file, model.vocab, {collection.keys[r] for r in parts.rows(k)})
                    bar.update(len(parts.rows(k)))
                except _Damaged as e:
                    # parts are derived data: encoding this one again from the shards loses nothing
                    log.warning("%s: encoding part %d again", e, k)
            if batch is None:
                if k in per_part:
                    batch, ids = encoder.part(stream, per_part[k])
                else:  # a damaged part was not in the shared stream's plan: it gets a stream of its own
                    own = parts.batches(k)
                    batch, ids = encoder.part(reader.stream(own), own)
                write = True
            writer.put(k, batch, ids, write)
        writer.wait()
    return parts.count


def check_index_dir(index_dir) -> None:
    """``index_dir`` can take the index: a folder holding an index (resumed), an empty one or none. A
    file, or a folder of other files, is refused (ValueError) before anything is encoded or written."""
    p = Path(index_dir)
    if p.exists() and not p.is_dir():
        raise ValueError(f"index folder {p} is a file: give a folder (new, empty or a previous encode's)")
    if p.is_dir() and not (p / MANIFEST).exists() and any(p.iterdir()):
        raise ValueError(f"index folder {p} is not empty and holds no index: choose a new or empty folder")


# ---------------------------------------------------------------------------------------- collections
class FileCollection:
    """Image files with ids and captions: the records of data specs (``DATASET:SPLIT[:LIMIT]``,
    data/specs.py), which `tokenspace index build` encodes; the same interface as a TarCollection for
    ``encode_parts`` (``keys``, ``texts``, ``len``), rows read by DataLoader workers as files."""

    def __init__(self, records: list[Record], specs: list[tuple[str, int]] | None = None):
        self.records = list(records)
        self.keys = [r.id for r in self.records]
        self.texts = [r.text for r in self.records]
        self.specs = specs if specs is not None else [("records", len(self.records))]
        self.skipped = 0

    @classmethod
    def from_specs(cls, specs, home=None) -> FileCollection:
        """The records of ``specs`` in order (records with an empty caption included: search finds images,
        the caption is only shown beside a hit)."""
        specs = [specs] if isinstance(specs, str) else list(specs)
        per = [(spec, load_split(spec, home, drop_empty=False)) for spec in specs]
        return cls([r for _, recs in per for r in recs], [(spec, len(recs)) for spec, recs in per])

    def __len__(self) -> int:
        return len(self.records)

    def sources(self) -> list[dict]:
        """Per data spec, in order (what the work folder's record compares): the spec, its rows and a
        hash of their ids, image paths and file sizes (an image replaced by another shows there)."""
        out, start = [], 0
        for spec, n in self.specs:
            h = hashlib.sha256()
            for r in self.records[start:start + n]:
                p = Path(r.image)
                size = p.stat().st_size if p.is_file() else -1
                h.update(f"{r.id}\0{r.image}\0{size}\n".encode())
            out.append({"path": spec, "rows": n, "sha256": h.hexdigest()})
            start += n
        return out

    def fields(self, i: int) -> dict:
        r = self.records[i]
        return row_fields(image=r.image, text=r.text, label=r.label, source=r.source)


class _Keyed:
    """A dataset of image files whose rows carry the collection's ids and captions instead of the paths
    (picklable: DataLoader workers get a copy)."""

    def __init__(self, inner, keys: list[str], texts: list[str]):
        self.inner, self.keys, self.texts = inner, keys, texts
        self.prep = getattr(inner, "prep", None)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i):
        j, x, _, _ = self.inner[i]
        return j, x, self.keys[int(i)], self.texts[int(i)]


def _rows(collection, prep: Preprocess):
    if isinstance(collection, FileCollection):
        return _Keyed(ImageFiles([r.image for r in collection.records], prep), collection.keys, collection.texts)
    return TarRows(collection, prep)


def _raw_rows(collection, jpeg_bytes: bool):
    if isinstance(collection, FileCollection):
        return _Keyed(device_decode.RawFiles([r.image for r in collection.records], jpeg_bytes=jpeg_bytes),
                      collection.keys, collection.texts)
    return device_decode.RawTarRows(collection, jpeg_bytes=jpeg_bytes)


def _row_metadata(collection, extra: dict[str, dict] | None = None) -> Callable[[list[str]], list[dict]]:
    """ids -> each row's metadata: what the collection knows of it (caption; for files also the image,
    label and source: index/folder.py: row_fields) and the caller's own fields (``extra``: id -> fields, they win)."""
    where = {k: i for i, k in enumerate(collection.keys)}
    extra = extra or {}

    def rows(ids: list[str]) -> list[dict]:
        out = []
        for i in ids:
            j = where[i]
            base = collection.fields(j) if isinstance(collection, FileCollection) else row_fields(text=collection.texts[j])
            out.append({**base, **extra.get(i, {})})
        return out

    return rows


# ---------------------------------------------------------------------------------------- into an index
def encode_to_index(model, collection, index_dir, work_dir, part_size: int = 8192, batch_size: int = 256,
                    workers: int | None = None, tower: str = "torch", progress: bool = False,
                    decode: str = "auto", precision: str = "fp32", profile: dict | None = None,
                    jpeg: str = "nvjpeg", *, info: dict | None = None, metadata: dict[str, dict] | None = None,
                    top_n: int | None = None, ranking: ModelRanking | None = None, home=None):
    """Encode and ingest incrementally (see the module doc); returns the InvertedIndex. ``index_dir``
    must be new, empty or an index (``check_index_dir``). Each row carries its caption (and, from image
    files, its image, label and source) plus ``metadata[id]``; the index records ``info`` (the model that
    encoded it, its ranking: searcher.py reads both). ``top_n``: each row keeps its n heaviest tokens.
    ``ranking``: the index's ranking (a model's ranking.json, as `index build` applies it): recorded in
    ``info`` and its hub prior given to the index before the first part, so each part's rows get their
    hubness as they are added (the bank's captions: ``hub_bank_queries``, from ``home``'s data). A
    generic share needs the whole collection (``build_index``): not applied here, and said so.
    ``decode``, ``precision``, ``profile``, ``jpeg``: as for ``encode_parts``."""
    index_dir = Path(index_dir)
    check_index_dir(index_dir)
    if (index_dir / MANIFEST).exists():
        index = InvertedIndex.load(index_dir, verify=False)
    else:
        index = InvertedIndex(len(model.vocab), model.vocab)
    info = _ranked_info(info, ranking)
    if info:
        index.info = dict(info)
    if ranking is not None and ranking.generic_share:
        log.warning("generic_share %g: down-weighting generic tokens needs the whole collection at once "
                    "(`tokenspace index build`); this index keeps its rows as encoded", ranking.generic_share)
    if ranking is not None and ranking.hub is not None and index.hub_prior is None:
        _hub_prior(index, model, ranking, home, progress)
        if len(index):  # rows ingested before the prior was asked for: their hubness is saved now
            index.save(index_dir)
    present = set(index.ids())
    fields = _row_metadata(collection, metadata)

    def ingest(k: int, batch: SparseBatch, ids: list[str]) -> None:
        if not ids:
            return
        new = [r for r, i in enumerate(ids) if i not in present]
        if not new:
            return  # ingested before the interruption
        if len(new) < len(ids):
            # the short last part of a run whose shards this one extends: its first rows are in already
            batch, ids = batch[new], [ids[r] for r in new]
        index.add(batch.prune_topk(top_n) if top_n else batch, ids, metadata=fields(ids))
        index.save(index_dir)
        present.update(ids)

    encode_parts(model, collection, work_dir, part_size, batch_size, on_part=ingest, workers=workers, tower=tower,
                 progress=progress, decode=decode, precision=precision, profile=profile, jpeg=jpeg)
    return index


def build_index(model, collection, index_dir, work_dir, part_size: int = 8192, batch_size: int = 256, *,
                workers: int | None = None, tower: str = "torch", progress: bool = False, decode: str = "auto",
                precision: str = "fp32", jpeg: str = "nvjpeg", info: dict | None = None,
                metadata: dict[str, dict] | None = None, top_n: int | None = None, reorder: bool = False,
                impact_heads: bool = True, generic_share: float | None = None,
                finish: Callable[[InvertedIndex], None] | None = None, keep_parts: bool = False,
                ranking: ModelRanking | None = None, home=None):
    """The index of a whole collection at once (`tokenspace index build`, the demo): the rows are encoded
    into parts in ``work_dir`` exactly as ``encode_to_index`` encodes them (resumable: a killed build rerun
    reuses every part on disk), then built in one go, which the options that see the whole collection
    need (``reorder``, ``generic_share``: InvertedIndex.build; ``finish(index)`` runs before the save,
    e.g. a hub prior), and saved in ``index_dir`` (one atomic commit: an index that was there is replaced
    whole, never mixed). Parts in ``work_dir`` from another collection or model are encoded again. Rows and ``info`` as for ``encode_to_index``. The parts are removed after the
    save unless ``keep_parts``; ``index_dir`` None: nothing saved. ``ranking``: the index's ranking (a
    model's ranking.json, changed by a user's flags): recorded in ``info``, its generic share and hub
    prior applied (the bank's captions: ``hub_bank_queries``, from ``home``'s data). Returns the index
    (None when no image of the collection could be read)."""
    parts: dict[int, tuple[SparseBatch, list[str]]] = {}
    encode_parts(model, collection, work_dir, part_size, batch_size, workers=workers, tower=tower,
                 progress=progress, decode=decode, precision=precision, jpeg=jpeg, replace_stale=True,
                 on_part=lambda k, batch, ids: parts.__setitem__(k, (batch, ids)))
    ids = [i for k in sorted(parts) for i in parts[k][1]]
    if not ids:
        if not keep_parts:
            _remove_parts(Path(work_dir))
        return None
    vectors = _concat(model, [parts[k][0] for k in sorted(parts) if parts[k][1]])
    if not getattr(model, "sparse", True):  # float rows: a DenseIndex, the dense half of a hybrid search
        return _dense_index(vectors, ids, index_dir, info, Path(work_dir), keep_parts)
    if top_n:
        vectors = vectors.prune_topk(top_n)
    if ranking is not None and generic_share is None:
        generic_share = ranking.generic_share
    index = InvertedIndex.build(vectors, ids, metadata=_row_metadata(collection, metadata)(ids), reorder=reorder,
                                impact_heads=impact_heads, generic_share=generic_share)
    if ranking is not None and ranking.hub is not None:
        _hub_prior(index, model, ranking, home, progress)
    if finish is not None:
        finish(index)
    index.info = _ranked_info(info, ranking)
    if index_dir is not None:
        index.save(index_dir)
        # an older build's collection.json: a second copy of what the index now records itself
        (Path(index_dir) / COLLECTION_FILE).unlink(missing_ok=True)
    if not keep_parts:
        _remove_parts(Path(work_dir))
    return index


# ------------------------------------------------------------------------------------ the index's ranking
HUB_BANKS = "hub-banks"  # under the asset home: a model's encoded hub bank captions, one file per bank


def hub_bank_queries(model, bank: HubBank, ranking: Ranking, home=None, progress: bool = False) -> SparseBatch:
    """``bank``'s captions encoded and shaped as ``ranking``'s queries, computed once and kept in
    ``<home>/hub-banks/`` under a key of the model (``model_fingerprint``: its config and weights), the
    captions and the shaping: a later index of any collection with the same model and bank reads them
    back, so its prior costs one sparse product (a release model's 8,000 captions took ~2 minutes to
    encode on a CPU, each build). A damaged cache file is encoded again."""
    texts = bank.texts(home)
    key = json.dumps({"model": model_fingerprint(model), "expansion": ranking.expansion,
                      "floor": ranking.expansion_floor,
                      "texts": hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()}, sort_keys=True)
    path = home_dir(home) / HUB_BANKS / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"
    if path.is_file():
        try:
            queries = SparseBatch.load(path, vocab=model.vocab)
            if len(queries) == len(texts):
                return queries
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            pass  # written by a run that was killed, or by hand: encoded again below
    queries = encode_bank(model, texts, ranking, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    queries.save(path)  # atomic (SparseBatch.save): a reader never sees half a bank
    return queries


def _hub_prior(index: InvertedIndex, model, ranking: ModelRanking, home, progress: bool) -> None:
    """The hub prior of ``ranking``'s bank on ``index`` (its rows' hubness: a sparse product with the
    bank's encoded captions), at the weight the ranking records."""
    queries = hub_bank_queries(model, ranking.hub, ranking.search, home, progress)
    started = time.perf_counter()
    index.set_hub_prior(queries, k=ranking.hub.k, weight=ranking.hub.weight)
    log.info("hub prior: %d rows against %d bank captions in %.1fs", len(index), len(queries),
             time.perf_counter() - started)


def _ranked_info(info: dict | None, ranking: ModelRanking | None) -> dict:
    """``info`` with ``ranking``'s search levers recorded (what a search of the index starts from)."""
    out = dict(info or {})
    if ranking is not None:
        out["ranking"] = ranking.search.to_dict()
    return out


def _dense_index(vectors: np.ndarray, ids: list[str], index_dir, info: dict | None, work: Path, keep_parts: bool):
    """A dense model's rows as a DenseIndex (faiss), with the collection.json that names its model (a
    DenseIndex folder has no manifest to record it in)."""
    index = DenseIndex.build(vectors, ids)
    if index_dir is not None:
        index.save(index_dir)
        write_dense_collection(index_dir, (info or {}).get("model"))
    if not keep_parts:
        _remove_parts(work)
    return index


def _remove_parts(work: Path) -> None:
    """A work folder's parts and record, then the folder when nothing else is in it (never others' files)."""
    for f in [*work.glob("part-*.npz"), *work.glob("part-*.ids"), work / RECORD]:
        f.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        work.rmdir()


def open_shards(specs: list[str], option: str = "--shards") -> TarCollection:
    """TarCollection.open of ``specs`` (paths, globs, {000..099} ranges), its errors (a pattern that
    matches no file) named after the option they came from."""
    try:
        return TarCollection.open(specs)
    except ValueError as e:
        raise ValueError(f"{option} {e}") from None
