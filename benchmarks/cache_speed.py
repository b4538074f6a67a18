"""Images/s of the frozen-backbone feature cache (train/features.py) on a sample of the new images,
and the time the full training cache would take at that rate.

    python benchmarks/cache_speed.py --n 500 --threads 2

The sample is a deterministic subsample (pipeline specs with a LIMIT) of the new training splits;
it is cached into a temporary folder, so the shared cache is left alone.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch

from tokenspace import pipeline
from tokenspace.train.features import cache_image_grids
from tokenspace.train.recipe import Recipe

TRAIN_SPECS = ["emoji:train", "emoji:train-extra", "icons:train", "openclipart:train"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--recipe", default="stair-emoji")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = {s: len(pipeline.load_split(s)) for s in TRAIN_SPECS}
    total = sum(sizes.values())
    per = {s: max(1, round(args.n * k / total)) for s, k in sizes.items()}  # the mix of the full set
    records = [r for s in TRAIN_SPECS for r in pipeline.load_split(f"{s}:{per[s]}")]
    model = pipeline.build_seeded(Recipe.load(args.recipe))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        cache = cache_image_grids(model, [r.image for r in records], tmp, progress=False)
        dt = time.perf_counter() - t0
    rate = len(records) / dt
    print(f"training splits: {sizes} = {total} images")
    print(f"sample: {len(records)} images ({per}), {cache.n_skipped} unreadable; {dt:.1f}s on {args.threads} "
          f"threads = {rate:.1f} images/s")
    print(f"full training cache at this rate: {total / rate / 60:.0f} min")


if __name__ == "__main__":
    main()
