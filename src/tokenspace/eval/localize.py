"""Text-encoder-free localization (stair.txt App. E.1): a query's activation on each image grid cell.

The model side hands over per-cell vocabulary activations (the token projection applied to each
patch, before pooling). A query is tokenized into vocabulary ids; a multi-token query uses the mean
of its tokens' activations (the paper's footnote 4). Plot the result with report.save_heatmaps.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenspace.sparse import SparseBatch


def query_heatmap(cell_activations, query_ids: Sequence[int], grid: tuple[int, int] | None = None) -> np.ndarray:
    """(H, W) map: mean over ``query_ids`` of each cell's activation.

    ``cell_activations`` is (H, W, V) dense, or (H*W, V) dense / SparseBatch with ``grid=(H, W)``.
    """
    ids = np.asarray(list(query_ids), np.int64)
    if not len(ids):
        raise ValueError("query has no in-vocabulary tokens")
    if isinstance(cell_activations, SparseBatch):
        flat = np.asarray(cell_activations.to_scipy()[:, ids].toarray(), np.float32)
    else:
        a = np.asarray(cell_activations, np.float32)
        if a.ndim == 3:
            grid = grid or a.shape[:2]
            a = a.reshape(-1, a.shape[-1])
        flat = a[:, ids]
    if grid is None:
        side = round(float(np.sqrt(flat.shape[0])))
        if side * side != flat.shape[0]:
            raise ValueError(f"{flat.shape[0]} cells are not a square grid; pass grid=(H, W)")
        grid = (side, side)
    return flat.mean(axis=1).reshape(grid)
