"""Images decoded and letterboxed on the model's device: the GPU encode path (encode.py, ``decode="device"``).

The host path (data/loader.py) decodes, letterboxes and normalises every image in DataLoader workers
and ships float32 pixels: on a GPU that caps encoding at what the workers' cores decode (docs/scale.md,
"The GPU encode"). Here the workers only read bytes:

- a JPEG that nvJPEG can take (baseline, extended or progressive Huffman, 8-bit, 1 or 3 components, at
  most ``images.MAX_PIXELS`` pixels; read from its header by ``jpeg_header``) travels as its file bytes and
  is decoded on the GPU in batches (``torchvision.io.decode_jpeg(..., device="cuda")``, nvJPEG; the
  hardware decoder on A100 / H100). On a CPU, or where torchvision cannot decode, Pillow decodes it
  instead (``decode_batch``): the same pixels as the host path's reader;
- any other image (PNG, WebP, SVG, CMYK or 12-bit JPEGs, ...) is decoded on the host by the host path's
  own reader (``images.load_image`` / ``webdataset.decode_image_bytes``) and travels as uint8 pixels.

Then ``letterbox`` does the host path's ``preprocess.to_square`` + normalisation on the device, to the
bit: Pillow's bicubic resample is integer arithmetic (22-bit fixed-point coefficients, a horizontal then
a vertical pass, each rounded and clipped to uint8), which ``resample_matrix`` rebuilds and float64
matrix products reproduce exactly (every partial sum is an integer far below 2**53). So from the same
decoded pixels both paths give identical model inputs; the only difference left on a GPU is nvJPEG's
decode against libjpeg-turbo's (its IDCT and chroma upsampling: a few levels on some pixels; measured
in benchmarks/gpu_run.py's ``encode`` section).
"""
from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tokenspace.data import loader as _loader
from tokenspace.data.images import MAX_PIXELS, ImageLoadError, load_image
from tokenspace.data.loader import loader_options
from tokenspace.data.webdataset import TarCollection, decode_image_bytes

log = logging.getLogger("tokenspace.data")

JPEG, PIXELS = 0, 1  # what an item carries: file bytes for the device's decoder, or host-decoded RGB pixels
PRECISION_BITS = 22  # Pillow's fixed-point coefficients (Resample.c: 32 - 8 - 2)


# ------------------------------------------------------------------------------------ JPEG headers
class JpegHeader(NamedTuple):
    height: int
    width: int
    components: int
    precision: int  # bits per sample
    sof: int  # the start-of-frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ...
    adobe_transform: int | None  # the Adobe APP14 colour transform flag, when the file has one
    component_ids: tuple[int, ...] = ()


def jpeg_header(data) -> JpegHeader | None:
    """The frame header of JPEG bytes (markers up to the first start-of-frame), None when ``data`` is not
    a JPEG or its header cannot be read."""
    b = memoryview(data)
    n = len(b)
    if n < 4 or b[0] != 0xFF or b[1] != 0xD8:
        return None
    i, adobe = 2, None
    while i + 4 <= n:
        if b[i] != 0xFF:
            return None
        marker = b[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image or start of scan before any frame header
            return None
        length = (b[i + 2] << 8) | b[i + 3]
        if length < 2 or i + 2 + length > n:
            return None
        seg = b[i + 4:i + 2 + length]
        if marker == 0xEE and len(seg) >= 12 and bytes(seg[:5]) == b"Adobe":
            adobe = seg[11]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if len(seg) < 6 or len(seg) < 6 + 3 * seg[5]:
                return None
            return JpegHeader(height=(seg[1] << 8) | seg[2], width=(seg[3] << 8) | seg[4], components=seg[5],
                              precision=seg[0], sof=marker, adobe_transform=adobe,
                              component_ids=tuple(seg[6 + 3 * c] for c in range(seg[5])))
        i += 2 + length
    return None


def device_decodable(h: JpegHeader | None) -> bool:
    """A JPEG nvJPEG decodes to the RGB Pillow gives: Huffman-coded (baseline, extended, progressive),
    8-bit, grey or YCbCr (CMYK, and RGB-coded files, which an Adobe transform flag of 0 or the component
    ids 'R', 'G', 'B' mark, stay on the host), within the host reader's pixel limit."""
    return (h is not None and h.sof in (0xC0, 0xC1, 0xC2) and h.precision == 8 and h.components in (1, 3)
            and not (h.components == 3 and (h.adobe_transform == 0 or h.component_ids == (82, 71, 66)))
            and 0 < h.height * h.width <= MAX_PIXELS)


# ------------------------------------------------------------------------------------ worker side
def _rgb(img) -> tuple[np.ndarray, tuple[int, int]]:
    a = np.asarray(img, dtype=np.uint8)  # [h, w, 3]: the readers give RGB
    return a.reshape(-1), (a.shape[0], a.shape[1])


def file_item(path: str, jpeg_bytes: bool = True) -> tuple[int, np.ndarray, tuple[int, int]]:
    """(kind, flat uint8 payload, (height, width) or (0, 0) for JPEG bytes) of an image file; ImageLoadError
    as ``images.load_image`` raises it. ``jpeg_bytes=False``: every image decoded here (no device decoder)."""
    if jpeg_bytes:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b""  # load_image below says why (missing, unreadable, ...)
        if device_decodable(jpeg_header(data)):
            return JPEG, np.frombuffer(data, np.uint8), (0, 0)
    return (PIXELS, *_rgb(load_image(path)))


def bytes_item(data: bytes, where: str, jpeg_bytes: bool = True) -> tuple[int, np.ndarray, tuple[int, int]]:
    """The same for image bytes from a shard (``webdataset.decode_image_bytes``'s reading)."""
    if jpeg_bytes and device_decodable(jpeg_header(data)):
        return JPEG, np.frombuffer(data, np.uint8), (0, 0)
    return (PIXELS, *_rgb(decode_image_bytes(data, where)))


class RawFiles(Dataset):
    """Image files as raw items: ``ds[i]`` = (i, (kind, payload, shape) or None, path, "")."""

    def __init__(self, paths: Sequence[str | os.PathLike], jpeg_bytes: bool = True):
        self.paths, self.jpeg_bytes = [os.fspath(p) for p in paths], jpeg_bytes

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        i = int(i)
        try:
            item = file_item(self.paths[i], self.jpeg_bytes)
        except ImageLoadError as e:
            _loader._skip(self.paths[i], e.reason)
            item = None
        return i, item, self.paths[i], ""


class RawTarRows(Dataset):
    """Rows of a TarCollection as raw items: ``ds[i]`` = (i, item or None, key, text)."""

    def __init__(self, collection: TarCollection, jpeg_bytes: bool = True):
        self.c, self.jpeg_bytes = collection, jpeg_bytes

    def __len__(self) -> int:
        return len(self.c)

    def __getitem__(self, i):
        i = int(i)
        where = f"{self.c.shards[self.c.shard_of[i]]}:{self.c.keys[i]}"
        try:
            item = bytes_item(self.c.image_bytes(i), where, self.jpeg_bytes)
        except ImageLoadError as e:
            _loader._skip(where, e.reason)
            item = None
        return i, item, self.c.keys[i], self.c.texts[i]


def collate_raw(items: list) -> dict:
    """Raw items -> one batch: every payload in one flat uint8 tensor (one shared-memory block per batch,
    not one per image) with ``offsets`` [n + 1], ``kinds`` [n] and ``shapes`` [n, 2]; unreadable items
    left out and counted in ``skipped`` (data/loader.py's per-worker count)."""
    good = [it for it in items if it[1] is not None]
    skipped, _loader._skipped_here = _loader._skipped_here, 0
    sizes = [len(it[1][1]) for it in good]
    data = np.concatenate([it[1][1] for it in good]) if good else np.zeros(0, np.uint8)
    return {"data": torch.from_numpy(data), "offsets": torch.as_tensor(np.concatenate([[0], np.cumsum(sizes)]),
                                                                        dtype=torch.int64),
            "kinds": torch.as_tensor([it[1][0] for it in good], dtype=torch.uint8),
            "shapes": torch.as_tensor([it[1][2] for it in good], dtype=torch.int64).reshape(-1, 2),
            "index": torch.as_tensor([it[0] for it in good], dtype=torch.int64),
            "keys": [it[2] for it in good], "texts": [it[3] for it in good], "skipped": skipped}


def raw_loader(dataset: Dataset, batches: Iterable[Sequence[int]], *, workers: int | None = None, device=None,
               prefetch: int = 2) -> DataLoader:
    """Batches of raw items read in DataLoader workers (pinned for a GPU), in the order of ``batches``."""
    return DataLoader(dataset, batch_sampler=batches, collate_fn=collate_raw,
                      generator=torch.Generator().manual_seed(0), **loader_options(device, workers, prefetch))


# ------------------------------------------------------------------------------------ main side
@functools.cache
def _nvjpeg():
    """torchvision's decode_jpeg and its RGB mode, or None when torchvision cannot be imported."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg  # optional: CPU installs have no torchvision
    except Exception as e:  # noqa: BLE001 - not installed, or built for another torch
        log.info("torchvision not importable (%s): JPEGs are decoded on the host", e)
        return None
    return decode_jpeg, ImageReadMode.RGB


def nvjpeg_available() -> bool:
    return _nvjpeg() is not None


def _host_decode(data: torch.Tensor, where: str) -> torch.Tensor:
    img = decode_image_bytes(data.numpy().tobytes(), where)
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)  # [3, h, w]


def decode_batch(batch: dict, device: torch.device | str) -> tuple[list[torch.Tensor], list[int], list[str]]:
    """A raw batch -> (images [3, h, w] uint8 on ``device``, the batch positions they are, why each other
    position failed). JPEG bytes are decoded by nvJPEG on a CUDA device (in one call), else by Pillow;
    a JPEG nvJPEG refuses is decoded by Pillow, and one Pillow cannot read either is left out."""
    device = torch.device(device)
    data, off = batch["data"], batch["offsets"].tolist()
    kinds, shapes, keys = batch["kinds"].tolist(), batch["shapes"].tolist(), batch["keys"]
    out: dict[int, torch.Tensor] = {}
    failed: list[str] = []
    jpegs = [p for p, k in enumerate(kinds) if k == JPEG]
    views = {p: data[off[p]:off[p + 1]] for p in range(len(kinds))}
    if jpegs and device.type == "cuda" and _nvjpeg() is not None:
        decode, rgb = _nvjpeg()
        try:
            for p, img in zip(jpegs, decode([views[p] for p in jpegs], mode=rgb, device=device)):
                out[p] = img
        except RuntimeError as e:  # one bad image fails the call: each is then read on the host
            log.warning("nvJPEG could not decode a batch (%s); decoding its JPEGs on the host", e)
    for p, kind in enumerate(kinds):
        if p in out:
            continue
        try:
            if kind == JPEG:
                img = _host_decode(views[p], keys[p])
            else:
                h, w = shapes[p]
                img = views[p].reshape(h, w, 3).permute(2, 0, 1)
            out[p] = img.to(device, non_blocking=True)
        except ImageLoadError as e:
            _loader.log.warning("skipped %s: %s", keys[p], e.reason)
            failed.append(keys[p])
    keep = sorted(out)
    return [out[p] for p in keep], keep, failed


def _bicubic(x: np.ndarray) -> np.ndarray:
    """Pillow's bicubic kernel (a = -0.5), evaluated as Resample.c does."""
    a = -0.5
    x = np.abs(x)
    inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    outer = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, inner, np.where(x < 2.0, outer, 0.0))


@functools.lru_cache(maxsize=4096)
def resample_matrix(in_size: int, out_size: int) -> np.ndarray:
    """[out_size, in_size] float64 of Pillow's fixed-point bicubic coefficients (integers, scaled by
    2**22) for resizing one axis from ``in_size`` to ``out_size`` pixels (Resample.c: precompute_coeffs
    with its support, bounds and normalisation, then normalize_coeffs_8bpc's rounding)."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    xx = np.arange(out_size, dtype=np.float64)
    center = (xx + 0.5) * scale
    xmin = np.maximum((center - support + 0.5).astype(np.int64), 0)  # C's (int) truncates: values >= -0.5
    xmax = np.minimum((center + support + 0.5).astype(np.int64), in_size) - xmin
    x = np.arange(ksize)
    w = _bicubic((x[None, :] + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    w = np.where(x[None, :] < xmax[:, None], w, 0.0)
    ww = np.cumsum(w, axis=1)[:, -1]  # sequential, as the C loop sums (np.sum would pair them)
    k = np.where(ww[:, None] != 0.0, w / np.where(ww == 0.0, 1.0, ww)[:, None], w)
    k = np.trunc(np.where(k < 0, -0.5 + k * (1 << PRECISION_BITS), 0.5 + k * (1 << PRECISION_BITS)))
    m = np.zeros((out_size, in_size), np.float64)
    cols = xmin[:, None] + x[None, :]
    valid = x[None, :] < xmax[:, None]
    m[np.broadcast_to(xx.astype(np.int64)[:, None], cols.shape)[valid], cols[valid]] = k[valid]
    return m


@functools.lru_cache(maxsize=4096)
def _matrix_on(in_size: int, out_size: int, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(resample_matrix(in_size, out_size)).to(device)


def _clip8(acc: torch.Tensor) -> torch.Tensor:
    """Resample.c's clip8: round the fixed-point sum to an integer in 0..255."""
    return acc.add_(1 << (PRECISION_BITS - 1)).div_(1 << PRECISION_BITS).floor_().clamp_(0, 255)


def resize_exact(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[n, 3, h, w] float64 pixel values (integers 0..255) -> [n, 3, height, width]: Pillow's
    ``Image.resize((width, height), Image.BICUBIC)`` of uint8 RGB images, to the bit (horizontal pass
    first, each pass rounded to uint8; a pass whose size does not change is skipped, as in Pillow)."""
    h, w = x.shape[-2:]
    if width != w:
        x = _clip8(x @ _matrix_on(w, width, x.device).T)
    if height != h:
        x = _clip8(_matrix_on(h, height, x.device) @ x)
    return x


def fit(h: int, w: int, size: int) -> tuple[int, int]:
    """(height, width) of an h x w image fitted into size x size: ``preprocess.to_square``'s arithmetic."""
    scale = size / max(w, h)
    return max(1, round(h * scale)), max(1, round(w * scale))


GROUP = 64  # images resized in one product: 64 of 500 x 375 are 288 MB in float64


@functools.lru_cache(maxsize=64)
def _stats_on(mean: tuple, std: tuple, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """mean and std as [1, 3, 1, 1] float32 on ``device``, made once (a copy from the host per batch would
    wait for the device's queue)."""
    m = torch.tensor(mean, dtype=torch.float32)[None, :, None, None].to(device)
    s = torch.tensor(std, dtype=torch.float32)[None, :, None, None].to(device)
    return m, s


def letterbox(images: Sequence[torch.Tensor], size: int, mean, std) -> torch.Tensor:
    """[3, h, w] uint8 images (one device) -> [n, 3, size, size] float32, NHWC in memory: each fitted into a
    white square keeping its aspect ratio (bicubic), then (x - mean) / std. Equals the host path's
    ``Preprocess`` (data/preprocess.py: to_square, then pixels) to the bit. Images of one size are
    resized together."""
    if not images:
        return torch.zeros((0, 3, size, size), dtype=torch.float32).contiguous(memory_format=torch.channels_last)
    device = images[0].device
    canvas = torch.full((len(images), 3, size, size), 255.0, dtype=torch.float64, device=device)
    groups: dict[tuple[int, int], list[int]] = {}
    for p, img in enumerate(images):
        groups.setdefault(tuple(img.shape[1:]), []).append(p)
    for (h, w), members in groups.items():
        nh, nw = fit(h, w, size)
        top, left = (size - nh) // 2, (size - nw) // 2
        for s in range(0, len(members), GROUP):
            part = members[s:s + GROUP]
            out = resize_exact(torch.stack([images[p] for p in part]).double(), nh, nw)
            if part[-1] - part[0] == len(part) - 1:  # consecutive positions (a collection of one size): one copy
                canvas[part[0]:part[-1] + 1, :, top:top + nh, left:left + nw] = out
            else:
                for j, p in enumerate(part):
                    canvas[p, :, top:top + nh, left:left + nw] = out[j]
    m, s = _stats_on(tuple(float(v) for v in mean), tuple(float(v) for v in std), device)
    return ((canvas.float() - m) / s).contiguous(memory_format=torch.channels_last)
