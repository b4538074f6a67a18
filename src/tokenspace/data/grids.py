"""Cached frozen-backbone features: run the image tower once per collection, train heads many times.

On 2 CPU cores EfficientNet-Lite0 runs at ~5-25 images/s, so recomputing it every step would make
CPU training impractical. Grids are stored as float16 .npy (memory-mapped) with a ``ok`` mask of the
images that could be read; the cache is filled in chunks and resumes where it stopped.

``at=k`` caches the tower's activations at the input of block k instead of its final grid (the
frozen trunk), so a recipe can train the top of the tower (``train_image_from``) on them. The cache
key includes a digest of the tower's weights: a model whose tower was trained gets its own grids.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from tokenspace import atomic
from tokenspace.data import images


@dataclass
class GridCache:
    grids: np.ndarray  # [N, C, h, w] float16 (memmap); float32 for a trunk cache (at=k)
    ok: np.ndarray  # [N] bool: False where the image could not be read (skipped, counted)
    errors: dict[int, str]  # row -> reason, for the skipped ones

    @property
    def n_skipped(self) -> int:
        return int((~self.ok).sum())


def weights_digest(module: torch.nn.Module) -> str:
    """sha1 of a module's parameters and buffers (names, shapes, float32 bytes)."""
    h = hashlib.sha1()
    for name, t in module.state_dict().items():
        h.update(f"{name}|{tuple(t.shape)}|".encode())
        h.update(t.detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def cache_key(tower_spec: dict, image_size: int, paths: Sequence[str], weights: str = "",
              at: int | None = None, packed: Sequence[int] = ()) -> str:
    spec = {"tower": tower_spec, "size": image_size}
    if packed:
        spec["packed"] = list(packed)
    if weights:
        spec["weights_sha1"] = weights
    if at is not None:
        spec["at"] = at
    h = hashlib.sha1(json.dumps(spec, sort_keys=True).encode())
    for p in paths:
        st = os.stat(p) if os.path.exists(p) else None
        h.update(f"{p}|{st.st_size if st else -1}|{int(st.st_mtime) if st else -1}\n".encode())
    return h.hexdigest()[:16]


@torch.no_grad()
def cache_image_grids(model, paths: Sequence[str | os.PathLike], cache_dir: str | os.PathLike,
                      batch_size: int = 32, progress: bool = True, at: int | None = None) -> GridCache:
    """Backbone grids for every path (or, with ``at=k``, the activations at block k's input), computed
    once (resumable) and memory-mapped back."""
    paths = [os.fspath(p) for p in paths]
    tower = model.image_tower
    was_training = tower.training
    tower.eval()  # eval-mode BatchNorm (and no drop-connect): the cache must not depend on the caller's mode
    try:
        # a fused model reading images at several sizes packs their cells into one grid (models/fused.py):
        # its cache must not be another model's at the same tower and size
        key = cache_key(model.config.image_tower, tower.image_size, paths, weights_digest(tower), at,
                        model.packed_sizes)
        root = Path(cache_dir) / key
        root.mkdir(parents=True, exist_ok=True)
        # one filler per cache: two processes filling one folder would each save their own `ok` mask
        # over the other's (rows the other had done read back as unreadable); the second one waits,
        # then finds the cache complete
        with open(root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return _fill(model, paths, root, batch_size, progress, at)
    finally:
        tower.train(was_training)


def _fill(model, paths: list[str], root: Path, batch_size: int, progress: bool, at: int | None) -> GridCache:
    tower = model.image_tower
    extract = model.image_grid if at is None else (lambda px: tower.trunk(px, at))  # noqa: E731
    root.mkdir(parents=True, exist_ok=True)
    state_path = root / "state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"done": 0, "errors": {}}
    # probe the grid shape on a blank image so the memmap can be allocated before any real work
    device = model.device  # the caller's model.to(device): pixels go where the weights are
    probe = extract(torch.zeros(1, 3, tower.image_size, tower.image_size, device=device))
    shape = (len(paths), *probe.shape[1:])
    grid_file, ok_file = root / "grids.npy", root / "ok.npy"
    mode = "r+" if grid_file.exists() and state["done"] > 0 else "w+"
    # final grids in float16 (1280 x h x w each: size matters, heads tolerate it); a trunk in float32,
    # so training the top on it runs the very forward of the full tower (and it has fewer channels)
    dtype = np.float16 if at is None else np.float32
    grids = np.lib.format.open_memmap(grid_file, mode=mode, dtype=dtype, shape=shape)
    ok = np.load(ok_file) if ok_file.exists() and state["done"] > 0 else np.zeros(len(paths), bool)
    bar = tqdm(total=len(paths), initial=state["done"], disable=not progress, desc="backbone features")
    for s in range(state["done"], len(paths), batch_size):
        chunk = list(range(s, min(s + batch_size, len(paths))))
        imgs, keep = [], []
        for i in chunk:
            try:
                imgs.append(images.load_image(paths[i]))
                keep.append(i)
            except images.ImageLoadError as e:
                state["errors"][str(i)] = str(e)
        if imgs:
            g = extract(model.preprocess(imgs).to(device))
            grids[keep] = g.cpu().numpy().astype(dtype)
            ok[keep] = True
        grids.flush()
        np.save(ok_file, ok)
        state["done"] = chunk[-1] + 1
        atomic.write_text(state_path, json.dumps(state))  # committed only after the rows it covers are written
        bar.update(len(chunk))
    bar.close()
    if not paths:
        np.save(ok_file, ok)
    del grids
    return GridCache(
        np.load(grid_file, mmap_mode="r"), np.load(ok_file), {int(k): v for k, v in state["errors"].items()}
    )


@torch.no_grad()
def grids_from_trunk(model, trunk: np.ndarray, at: int, batch_size: int = 256) -> np.ndarray:
    """Cached block-k activations -> the tower's final grids with its current (trained) top, for
    evaluating a model whose top is being trained on such a cache."""
    tower = model.image_tower
    was_training = tower.training
    tower.eval()
    try:
        out = [tower.top(torch.from_numpy(np.array(trunk[s : s + batch_size], dtype=np.float32)), at).numpy()
               for s in range(0, len(trunk), batch_size)]
    finally:
        tower.train(was_training)
    return np.concatenate(out) if out else np.zeros((0, tower.out_channels, 0, 0), np.float32)
