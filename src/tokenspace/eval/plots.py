"""Small matplotlib PNG plots for docs/results.md (Agg backend: no display on the build machines).

Each function writes one PNG and returns its path; the figure is closed so long reproduce runs do not
accumulate memory.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tokenspace.atomic import atomic_path


def _plt():
    import matplotlib  # start-up: matplotlib is slow to import; only plots need it

    matplotlib.use("Agg", force=True)  # before pyplot: headless, deterministic PNGs
    import matplotlib.pyplot as plt  # start-up: as above

    return plt


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        with atomic_path(path) as tmp:  # a reader never sees half a PNG; the temporary ends in .png
            fig.savefig(tmp, dpi=120)
    finally:
        _plt().close(fig)
    return path


def scatter_plot(points: Sequence[tuple[str, float, float]], path, xlabel: str, ylabel: str, title: str = "",
                 logx: bool = False) -> Path:
    """Labelled points, e.g. (``lambda=1e-3``, nnz, accuracy) for the FLOPs-lambda ablation (STAIR Fig. 8)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for label, x, y in points:
        ax.scatter([x], [y], s=30)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if logx:
        ax.set_xscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def line_plot(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path, xlabel: str, ylabel: str,
              title: str = "", logx: bool = False) -> Path:
    """One line per series name: e.g. L0 vs logit-scale cap, or recall@K vs top-n terms kept."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", label=name)
    if logx:
        ax.set_xscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def modality_plot(score: np.ndarray, density: np.ndarray, path, title: str = "") -> Path:
    """Sparse CLIP Fig. 3b: features by modality score (x) and activation density (y, log)."""
    plt = _plt()
    live = ~np.isnan(score) & (density > 0)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(8, 3.4))
    ax0.hist(score[live], bins=20, range=(0, 1))
    ax0.set(xlabel="modality score (0 text-only, 1 image-only)", ylabel="features")
    ax1.scatter(score[live], density[live], s=4, alpha=0.5)
    ax1.set_yscale("log")
    ax1.set(xlabel="modality score", ylabel="activation density")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def save_heatmaps(heatmaps: Mapping[str, np.ndarray], path, image: np.ndarray | None = None) -> Path:
    """Localization panels (STAIR Fig. 9): the image, then one heatmap per query, each min-max normalised."""
    plt = _plt()
    n = len(heatmaps) + (image is not None)
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n, 2.8), squeeze=False)
    axes = list(axes[0])
    if image is not None:
        ax = axes.pop(0)
        ax.imshow(image)
        ax.set_title("image", fontsize=9)
        ax.axis("off")
    for ax, (query, hm) in zip(axes, heatmaps.items()):
        hm = np.asarray(hm, np.float32)
        span = float(hm.max() - hm.min())
        norm = (hm - hm.min()) / span if span > 0 else np.zeros_like(hm)  # colours are relative, as in the paper
        if image is not None:
            ax.imshow(image)
            h, w = np.asarray(image).shape[:2]
            ax.imshow(norm, cmap="jet", alpha=0.5, extent=(0, w, h, 0), interpolation="bilinear")
        else:
            ax.imshow(norm, cmap="jet", interpolation="nearest")
        ax.set_title(query, fontsize=9)
        ax.axis("off")
    return _save(fig, path)
