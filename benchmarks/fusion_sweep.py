"""Issue O's training-free levers on the validation splits: the tagger fused into the release's image
vectors (weight w) and the lexical anchor on its text vectors (weight a), at three backbone settings.

    python benchmarks/fusion_sweep.py --stair runs/release/stair-v1      # ~40 min on a busy 2-core machine

Arms (--arms): "128" = both parts read the images at 128 px (STAIR's training size), "224" = both at 224 (the
ImageNet classifier's), "128+224" = STAIR at 128 and the tagger at 224 (two backbone forwards per image).

Model: models/fused.py, parts = [the trained STAIR model (image 1, text 1), tagger-bag (image w, text 0)],
anchor a, each row pruned to its 100 (image) / 40 (text) heaviest tokens as release v2 ships. Validation
only: emoji:val and openclipart:val (T→I R@1, mean recall) and fashion-mnist:val (zero-shot top-1, the
tagger_zeroshot prompts; 1,000 of Fashion-MNIST's training images); no test split is read here.
Choice: the highest ``score`` = mean(T→I R@1 on the two drawing sets) / 2 + Fashion-MNIST val top-1 / 2
(drawings and photos count the same). Also: the share of val captions whose every content word piece is
among its encoded query tokens (the anchor's target). Writes benchmarks/results/fusion_sweep.json.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
from tagger_zeroshot import TEMPLATES

from tokenspace import pipeline
from tokenspace.atomic import write_text
from tokenspace.eval import RetrievalEvaluator, ZeroShotEvaluator
from tokenspace.models.fused import fused_config
from tokenspace.models.registry import build_model

ROOT = Path(__file__).resolve().parent.parent
DRAWINGS = ("emoji:val", "openclipart:val")
PHOTOS = "fashion-mnist:val"
TOP_N = {"image_top_n": 100, "text_top_n": 40}


def log(msg: str) -> None:
    print(f"[fusion_sweep] {msg}", file=sys.stderr, flush=True)


def coverage(model, texts) -> float:
    """Share of texts whose every content word piece (the anchor's bag) is among their encoded tokens."""
    enc = model.encode_texts(texts)
    ids, mask = model.tokenize(texts)
    bag = model.bag(ids, mask).numpy() > 0
    got = enc.to_dense() > 0
    return float(np.mean((got >= bag).all(axis=1)))


def zeroshot(model, img, records) -> float:
    classes = sorted({r.label for r in records})
    labels = np.array([classes.index(r.label) for r in records])
    return ZeroShotEvaluator(classes, labels, list(TEMPLATES), metric="cosine")(img, model.encode_texts)["acc1"]


def sweep(stair: str, arm: str, weights, anchors, home) -> list[dict]:
    sizes = [int(x) for x in arm.split("+")]
    stair_size, tagger_size = sizes[0], sizes[-1]
    model = build_model(fused_config([(stair, 1.0, 1.0, stair_size), ("tagger-bag", 0.0, 0.0, tagger_size)],
                                     image_size=max(sizes), **TOP_N))
    sets = {s: pipeline.image_grids(model, pipeline.load_split(s, home), home) for s in (*DRAWINGS, PHOTOS)}
    texts = {s: pipeline.texts_and_targets(sets[s].records) for s in DRAWINGS}
    rows = []
    img = {}
    for w in weights:
        model.image_weights = [1.0, w]
        img[w] = {s: model.encode_image_grids(e.grids) for s, e in sets.items()}
    for a in anchors:
        model.anchor = a
        txt = {s: model.encode_texts(texts[s][0]) for s in DRAWINGS}
        cov = coverage(model, [t for s in DRAWINGS for t in texts[s][0]])
        for w in weights:
            row = {"arm": arm, "w": w, "a": a, "content_coverage": cov}
            for s in DRAWINGS:
                r = RetrievalEvaluator(texts[s][1])(img[w][s], txt[s])
                row[f"{s} T→I R@1"] = r["image_retrieval_recall@1"]
                row[f"{s} mean_recall"] = r["mean_recall"]
                row[f"{s} tokens/image"] = float(img[w][s].row_nnz().mean())
            row[f"{PHOTOS} acc1"] = zeroshot(model, img[w][PHOTOS], sets[PHOTOS].records)
            row["score"] = np.mean([row[f"{s} T→I R@1"] for s in DRAWINGS]) / 2 + row[f"{PHOTOS} acc1"] / 2
            rows.append(row)
            log(f"{arm}px w={w} a={a}: score {100 * row['score']:.1f}, fmnist {100 * row[f'{PHOTOS} acc1']:.1f}, "
                + ", ".join(f"{s} {100 * row[f'{s} T→I R@1']:.1f}" for s in DRAWINGS) + f", cov {100 * cov:.1f}")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stair", default=str(ROOT / "models" / "tokenspace-stair-drawings"),
                    help="the trained STAIR model folder (part 0)")
    ap.add_argument("--arms", nargs="+", default=["128+224", "128", "224"])
    ap.add_argument("--weights", type=float, nargs="+", default=[0.0, 1.0, 2.0, 3.0])
    ap.add_argument("--anchors", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "fusion_sweep.json"))
    ap.add_argument("--home", default=None)
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = []
    for arm in args.arms:  # the file is rewritten after each arm: a stopped run keeps what it measured
        rows += sweep(args.stair, arm, args.weights, args.anchors, args.home)
        best = max(rows, key=lambda r: r["score"])
        doc = {"date": time.strftime("%Y-%m-%d %H:%M"), "stair": args.stair, "top_n": TOP_N, "rows": rows,
               "chosen": best, "seconds": round(time.time() - t0, 1),
               "command": "python benchmarks/fusion_sweep.py " + " ".join(argv or sys.argv[1:])}
        write_text(args.json, json.dumps(doc, indent=1) + "\n")
    log(f"chosen: {best['arm']} px w={best['w']} a={best['a']} (score {100 * best['score']:.1f}); {args.json}")


if __name__ == "__main__":
    main()
