"""Localization heatmaps: per-grid-cell scores of a few query tokens on fixed images (paper App. E.1)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from benchmarks.reproduce_sections.bench import Bench, Section, models_line
from benchmarks.reproduce_sections.labels import clean_classname, concept, showcase_rows
from benchmarks.reproduce_sections.plan import Plan
from tokenspace.data.images import ImageLoadError, load_image
from tokenspace.eval import ResultsDoc, query_heatmap
from tokenspace.eval.plots import save_heatmaps
from tokenspace.sparse import SparseBatch


def cell_scores(model, grid: np.ndarray) -> np.ndarray:
    """(h, w, V) per-cell token scores p(h_j) for one image grid [C, h, w]. Raw scores, not log(1+ReLU):
    the max-pooled embedding keeps only each token's best cell, the map shows all of them."""
    with torch.no_grad():
        s = model.image_scores(torch.as_tensor(np.asarray(grid, np.float32))[None])[0]
    h, w = np.asarray(grid).shape[-2:]
    return s.float().numpy().reshape(h, w, -1)


def heatmap_queries(model, record, image_emb: SparseBatch, n: int = 3) -> list[str]:
    """The concept's words (the label) plus the image's own top token: what a reader would ask for."""
    special = set(model.vocab.special_ids.tolist())
    words = [w for w in clean_classname(concept(record)).lower().split() if len(w) > 1]
    top = [t for t, _ in model.decode(image_emb, top_k=3)[0]]
    out: list[str] = []
    for q in words + top:
        if q not in out and any(i not in special for i in model.tokenizer.token_ids(q)):
            out.append(q)
    return out[:n]


def _thumbnail(path: str, size: int = 128) -> np.ndarray | None:
    try:
        return np.asarray(load_image(path).resize((size, size)))
    except ImageLoadError:
        return None  # the panel still shows the heatmaps


def build_localization(bench: Bench, plan: Plan, img_dir: Path, doc: ResultsDoc,
                       run: str = "stair-emoji") -> Section:
    """Per-grid-cell activation of a few query tokens on a few fixed images, one PNG per image."""
    model = bench.models[run]
    enc = bench.encoded(plan.localize, run)
    rows = showcase_rows(enc.records, plan.n_heatmaps)
    special = set(model.vocab.special_ids.tolist())
    lines, numbers = [], {}
    for i in rows:
        rec = enc.records[i]
        cells = cell_scores(model, enc.grids[i])
        queries = heatmap_queries(model, rec, bench.images(run, plan.localize)[[i]])
        maps = {q: query_heatmap(cells, [t for t in model.tokenizer.token_ids(q) if t not in special]) for q in queries}
        slug = re.sub(r"[^a-z0-9]+", "-", concept(rec).lower()).strip("-") or str(i)
        png = save_heatmaps(maps, Path(img_dir) / f"localization_{slug}.png", _thumbnail(rec.image))
        lines.append(f"![{concept(rec)}: {', '.join(queries)}]({doc.relpath(png)})")
        numbers[rec.id] = {q: {"peak_cell": int(np.argmax(m)), "max": float(m.max()), "min": float(m.min())}
                           for q, m in maps.items()}
    grid = enc.grids.shape[-2:] if len(enc.grids) else (0, 0)
    body = (models_line(bench, [run])
            + f"Each panel: an image from {plan.localize}, then per query token its score p(h_j) on each of the "
              f"{grid[0]}×{grid[1]} backbone grid cells (before max pooling; multi-token queries averaged), "
              "min-max normalised per map. Queries: the concept's words and the image's top token.\n\n"
            + "\n".join(lines) + "\n")
    return Section("localization", "Localization heatmaps (paper App. E.1)", body, numbers, [run])
