"""Images -> normalised pixel tensors for an image tower (letterboxed on white, resized, normalised)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

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


def pixels(images: Sequence[Image.Image | str | Path], size: int, mean, std) -> torch.Tensor:
    """PIL images or paths -> [B, 3, size, size] float tensor, (x - mean) / std on 0..255 values."""
    arrs = []
    for im in images:
        if not isinstance(im, Image.Image):
            im = load_image(im)
        arrs.append(np.asarray(to_square(im, size), dtype=np.float32))
    x = torch.from_numpy(np.stack(arrs)).permute(0, 3, 1, 2)  # [B, 3, H, W]
    m = torch.tensor(mean, dtype=torch.float32)[None, :, None, None]
    s = torch.tensor(std, dtype=torch.float32)[None, :, None, None]
    return (x - m) / s
