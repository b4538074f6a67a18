"""Where a query's tokens fire on an image: STAIR's per-cell vocabulary scores as a heatmap.

STAIR pools an image as max over grid cells of log(1 + ReLU(cell score)) per token, so the cells a
token's image weight comes from are exactly the cells where its score is high. For a query we sum,
over the query's tokens, query weight x log1p(relu(cell score)): the same terms the hit's score is
made of, before max-pooling. Only the model call touches torch; the rest is numpy and PIL, so this
module imports without torch.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from tokenspace.models.capabilities import CellScores
from tokenspace.sparse import SparseBatch

# anchor colours of a perceptually ordered map (dark purple -> orange -> light yellow, like "inferno"):
# interpolated in numpy so that rendering does not import matplotlib (a slow first import in a server)
_ANCHORS = np.array([[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], np.float32)


def has_cell_scores(model) -> bool:
    """True for models with per-cell vocabulary scores (models.capabilities.CellScores: STAIR,
    VisualSparta, the tagger); others cannot localise tokens."""
    return isinstance(model, CellScores)


def cell_activation(model, image: Image.Image, query: SparseBatch) -> np.ndarray:
    """[h, w] activation of the query's tokens on the image's grid cells (>= 0; zeros if none fire)."""
    if not has_cell_scores(model):
        raise TypeError(f"{getattr(model, 'family', type(model).__name__)} models have no per-cell token "
                        "scores to localise (heatmaps need a STAIR model)")
    if len(query) != 1:
        raise ValueError("cell_activation takes a single query row")
    qi, qv = query.row(0)
    grid = model.image_grid(model.preprocess([image]))  # [1, C, h, w]
    h, w = int(grid.shape[2]), int(grid.shape[3])
    # only the query's columns are needed: [cells, nq], detached (no autograd graph for a picture)
    cols = model.image_scores(grid)[0][:, qi.astype(np.int64)].detach().float().cpu().numpy()
    act = np.log1p(np.maximum(cols, 0.0)) @ qv.astype(np.float32)
    if len(act) != h * w:  # scores of one part of a packed grid (models/fused.py): its cells, square
        h = w = int(round(len(act) ** 0.5))
    return act.reshape(h, w)


def letterbox(image: Image.Image, size: int) -> Image.Image:
    """The square the model sees (the image fitted on white, as in data.preprocess.to_square): the
    heatmap's grid covers this square, so the overlay must be drawn on it."""
    img = image.convert("RGB")
    scale = size / max(img.size)
    nw, nh = max(1, round(img.size[0] * scale)), max(1, round(img.size[1] * scale))
    canvas = Image.new("RGB", (size, size), (255, 255, 255))
    canvas.paste(img.resize((nw, nh), Image.BICUBIC), ((size - nw) // 2, (size - nh) // 2))
    return canvas


def colorize(heat: np.ndarray) -> np.ndarray:
    """Values in [0, 1] -> uint8 RGB through the anchor colour map."""
    x = np.clip(heat, 0.0, 1.0) * (len(_ANCHORS) - 1)
    lo = np.floor(x).astype(np.int64).clip(0, len(_ANCHORS) - 2)
    t = (x - lo)[..., None]
    return ((1 - t) * _ANCHORS[lo] + t * _ANCHORS[lo + 1]).astype(np.uint8)


def overlay(image: Image.Image, activation: np.ndarray, size: int = 256, alpha: float = 0.55) -> Image.Image:
    """The letterboxed image with the activation upsampled (bilinear) and blended on top; alpha scales
    with the activation so cold cells leave the picture visible."""
    base = np.asarray(letterbox(image, size), np.float32)
    peak = float(activation.max()) if activation.size else 0.0
    if peak <= 0:  # nothing fires: say so by showing the image untouched
        return Image.fromarray(base.astype(np.uint8))
    norm = Image.fromarray((activation / peak).astype(np.float32), mode="F").resize((size, size), Image.BILINEAR)
    heat = np.clip(np.asarray(norm), 0.0, 1.0)
    a = (alpha * heat)[..., None]
    return Image.fromarray(((1 - a) * base + a * colorize(heat)).astype(np.uint8))


def to_png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def heatmap_png(model, image: Image.Image, query: SparseBatch, size: int = 256) -> bytes:
    """PNG bytes of ``image`` overlaid with where ``query``'s tokens fire (STAIR models)."""
    return to_png(overlay(image, cell_activation(model, image, query), size=size))
