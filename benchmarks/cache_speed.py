"""Images/s of the frozen-backbone feature cache (data/grids.py) on a sample of the new images,
and the time the full training cache would take at that rate.

    python benchmarks/cache_speed.py --n 500 --threads 2
    nice -n 10 python benchmarks/cache_speed.py --full   # fill the real cache for TRAIN_SPECS (resumable)

The sample is a deterministic subsample (pipeline specs with a LIMIT) of the new training splits;
it is cached into a temporary folder, so the shared cache is left alone. ``--full`` caches exactly the
image list a recipe with ``data.train: [emoji:train, emoji:train-extra, icons:train, openclipart:train]``
(in that order) reads, into ``<home>/features`` like training does; stop it any time and run it again.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch

from tokenspace import pipeline
from tokenspace.data.grids import cache_image_grids
from tokenspace.train.recipe import Recipe

TRAIN_SPECS = ["emoji:train", "emoji:train-extra", "icons:train", "openclipart:train"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--recipe", default="stair-emoji")
    ap.add_argument("--full", action="store_true", help="cache the whole training set into the real cache")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.full:
        model = pipeline.build_seeded(Recipe.load(args.recipe))
        t0 = time.perf_counter()
        enc = pipeline.image_grids(model, pipeline.load_data(TRAIN_SPECS), progress=True)
        print(f"cached {len(enc.records)} images ({len(enc.skipped)} unreadable) in {time.perf_counter() - t0:.0f}s")
        return
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
