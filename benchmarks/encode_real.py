"""Encode real images and captions with a trained sparse model, as input for fitted_corpus.py.

    python -m benchmarks.corpus encode --model runs/demo/stair-emoji/model \\
        --data emoji:train emoji:val emoji:test openclipart:train openclipart:test --out bench-data/stair-real

Writes OUT/images.npz and OUT/texts.npz (SparseBatch.save format: one row per image, one per
non-empty caption) and OUT/stats.json (rows, mean nnz, dims used). Then:

    python -m benchmarks.corpus fitted bench-data/stair-real/images.npz bench-data/stair-1M \\
        --n 1000000 --queries bench-data/stair-real/texts.npz
    python -m benchmarks.engines speed --corpus-dir bench-data/stair-1M
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import tokenspace  # noqa: E402
from benchmarks.common import run_record, write_json
from tokenspace import pipeline  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a trained model folder (STAIR, Sparse CLIP, ...)")
    ap.add_argument("--data", nargs="+", required=True, help="data specs, e.g. emoji:train openclipart:test")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    model = tokenspace.load(a.model)
    images, ids, records = pipeline.encode_collection(model, a.data)
    texts, _ = pipeline.texts_and_targets(records)
    queries = model.encode_text(texts, progress=True)
    if not isinstance(queries, SparseBatch):
        raise SystemExit(f"{a.model} produces dense text vectors: nothing to fit a sparse corpus to")
    a.out.mkdir(parents=True, exist_ok=True)
    images.save(a.out / "images.npz")
    queries.save(a.out / "texts.npz")
    stats = {"model": str(a.model), "data": a.data, "images": images.stats(), "texts": queries.stats()}
    write_json(a.out / "stats.json", json.loads(json.dumps(stats, default=str)), run_record(__file__, argv))
    print(json.dumps(stats, indent=1, default=str))
    return 0

