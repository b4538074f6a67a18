"""Images -> normalised pixel tensors for an image tower (letterboxed on white, resized, normalised)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from tokenspace.data.images import load_image


def to_square(img: Image.Image, size: int) -> Image.Image:
    """Fit the image into a size x size white square keeping its aspect ratio (drawings stay whole)."""
    img = img.convert("RGB")
    w, h = img.size
    scale = size / max(w, h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    img = img.resize((nw, nh), Image.BICUBIC)
    canvas = Image.new("RGB", (size, size), (255, 255, 255))
    canvas.paste(img, ((size - nw) // 2, (size - nh) // 2))
    return canvas


def pixels(images, size: int, mean, std) -> torch.Tensor:
    """PIL images or paths (one, or a sequence) -> [B, 3, size, size] float tensor, (x - mean) / std on
    0..255 values. Pixels already made by this function (``model.preprocess``'s [B, 3, size, size], or one
    image's [3, size, size], as open_clip users pass its preprocess output) are taken as they are, so
    ``model.encode_image(model.preprocess(images))`` works."""
    if isinstance(images, torch.Tensor):
        return _as_pixels(images, size)
    if isinstance(images, (Image.Image, str, Path)):
        images = [images]
    parts, arrs = [], []
    m = torch.tensor(mean, dtype=torch.float32)[None, :, None, None]
    s = torch.tensor(std, dtype=torch.float32)[None, :, None, None]

    def flush():
        if arrs:
            x = torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2)  # [B, 3, H, W]
            parts.append((x - m) / s)
            arrs.clear()

    for im in images:
        if isinstance(im, torch.Tensor):  # already pixels: kept in their place among the images
            flush()
            parts.append(_as_pixels(im, size))
            continue
        if not isinstance(im, Image.Image):
            im = load_image(im)
        arrs.append(np.asarray(to_square(im, size), dtype=np.float32))
    flush()
    if not parts:
        return torch.zeros((0, 3, size, size), dtype=torch.float32)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _as_pixels(x: torch.Tensor, size: int) -> torch.Tensor:
    """A preprocessed tensor as a [B, 3, size, size] float32 batch, or a plain-words refusal."""
    if x.dim() == 3:
        x = x.unsqueeze(0)
    if x.dim() != 4 or x.shape[1] != 3 or tuple(x.shape[2:]) != (size, size) or not x.is_floating_point():
        raise ValueError(f"an image tensor must be the model's own preprocessed pixels, [3, {size}, {size}] or "
                         f"[N, 3, {size}, {size}] floats (model.preprocess(images)), got {list(x.shape)} "
                         f"{str(x.dtype).replace('torch.', '')}; or pass the PIL images or their paths")
    return x.float()
