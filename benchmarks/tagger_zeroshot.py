"""The tagger (training-free photo baseline): zero-shot on the photo sets and retrieval on the drawings.

    nice -n 10 python -m benchmarks.tagger_zeroshot                     # every arm, ~15 min on 2 cores
    python -m benchmarks.tagger_zeroshot --arms tagger tagger-bag --sets fashion-mnist

The tagger reads EfficientNet-Lite0's own ImageNet classifier on each grid cell (224 px, 7x7 cells) and
turns class probabilities into the WordPiece tokens of the classes' WordNet lemmas and hypernyms
(models/tagger.py). Nothing is trained. Each arm changes one option of the shipped `tagger` config
(SPLADE-tiny text side, 2 hypernym levels, per-cell pooling, top-5 classes per cell, scale 1).

Zero-shot: Fashion-MNIST and MNIST test manifests (1,000 images, 100 per class: data/photos.py), prompts
"a photo of a {c}." / "a drawing of a {c}." / "{c}", each alone and as a cosine prompt ensemble
(eval/zeroshot.py). Retrieval: R@1/5/10 both ways on the emoji and OpenClipart test splits of the
manifests already built in the cache (the same splits as the trained models' rows). Backbone grids come
from the shared feature cache (computed once at 224 px). The arms are compared on the test sets
themselves (there is no validation photo set): read the sweep as a description, not a tuned result.
Writes benchmarks/results/tagger_zeroshot.json and the `tagger` section of docs/results.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json
from tokenspace import pipeline
from tokenspace.eval import ResultsDoc, ZeroShotEvaluator, markdown_table
from tokenspace.models.config import ModelConfig
from tokenspace.models.registry import build_model

ROOT = Path(__file__).resolve().parent.parent
JSON_OUT = ROOT / "benchmarks" / "results" / "tagger_zeroshot.json"
TEMPLATES = ("a photo of a {c}.", "a drawing of a {c}.", "{c}")
PHOTO_SETS = ("fashion-mnist", "mnist")
RETRIEVAL_SETS = ("emoji:test", "openclipart:test:300")  # the specs of the trained models' tables

# arm -> (config name, extra overrides, what changes)
ARMS = {
    "tagger": ("tagger", {}, "shipped config: SPLADE-tiny text, 2 hypernym levels, cells, top-5, scale 1"),
    "tagger-bag": ("tagger-bag", {}, "text side = the bag of query tokens (no text encoder)"),
    "pool-image": ("tagger", {"pool": "image"}, "whole-image classifier (the network's own head) only"),
    "pool-both": ("tagger", {"pool": "both"}, "max of the per-cell and whole-image evidence"),
    "levels-0": ("tagger", {"hypernym_levels": 0}, "class lemmas only, no hypernyms"),
    "levels-1": ("tagger", {"hypernym_levels": 1}, "1 hypernym level"),
    "levels-3": ("tagger", {"hypernym_levels": 3}, "3 hypernym levels"),
    "levels-5": ("tagger", {"hypernym_levels": 5}, "5 hypernym levels"),
    "levels-3-decay0.5": ("tagger", {"hypernym_levels": 3, "hypernym_decay": 0.5},
                          "3 levels, a word's weight halves per level"),
    "top-1": ("tagger", {"top_classes": 1}, "only each cell's most probable class"),
    "top-20": ("tagger", {"top_classes": 20}, "20 classes per cell"),
    "scale-10": ("tagger", {"scale": 10.0}, "log(1 + 10 x) instead of log(1 + x)"),
}


def log(msg: str) -> None:
    print(f"[tagger_zeroshot] {msg}", file=sys.stderr, flush=True)


def arm_model(arm: str):
    name, over, _ = ARMS[arm]
    cfg = ModelConfig.load(name)
    cfg.extra = {**cfg.extra, **over}
    return build_model(cfg)


def records_for(spec: str, home) -> list:
    """Records of a built manifest (``name:split``); photo sets are built if missing, the concept
    manifests are read as they are (the splits the trained models were measured on)."""
    name, split = spec.split(":", 1) if ":" in spec else (spec, "test")  # split may carry a :LIMIT
    path = pipeline.home_dir(home) / "manifests" / f"{name}.jsonl"
    if not path.exists():
        if name not in PHOTO_SETS:
            raise FileNotFoundError(f"{path} is not built: run `tokenspace data build` first")
        from tokenspace.data.build import build_manifests

        path = build_manifests(home, names=[name], progress=True)[name]
    return pipeline.load_split(f"{path}:{split}")


def zeroshot(model, enc: pipeline.BackboneFeatures) -> dict[str, float]:
    classes = sorted({r.label for r in enc.records})
    labels = np.array([classes.index(r.label) for r in enc.records])
    img = model.encode_image_grids(enc.grids)
    out = {f"acc1[{t}]": ZeroShotEvaluator(classes, labels, [t], metric="cosine")(img, model.encode_text)["acc1"]
           for t in TEMPLATES}
    ens = ZeroShotEvaluator(classes, labels, list(TEMPLATES), metric="cosine")(img, model.encode_text)
    out.update({f"ensemble_{k}": v for k, v in ens.items()})
    out["image_nnz"] = float(img.nnz / max(1, len(img)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--sets", nargs="+", default=list(PHOTO_SETS), help="photo manifests for zero-shot")
    ap.add_argument("--retrieval", nargs="*", default=list(RETRIEVAL_SETS), help="manifest:split for retrieval")
    ap.add_argument("--home", default=None)
    ap.add_argument("--json", default=str(JSON_OUT))
    ap.add_argument("--doc", default=str(ROOT / "benchmarks" / "results" / "tagger_zeroshot.md"),
                    help="markdown page of the full tables ('' skips it)")
    args = ap.parse_args(argv)
    t0 = time.time()
    model = arm_model(args.arms[0])
    data = {}
    for spec in list(args.sets) + list(args.retrieval):
        recs = records_for(spec, args.home)
        log(f"{spec}: {len(recs)} records; backbone grids at {model.image_tower.image_size} px ...")
        data[spec] = pipeline.image_grids(model, recs, args.home, progress=True)
    results: dict[str, dict] = {}
    for arm in args.arms:
        model = model if arm == args.arms[0] else arm_model(arm)
        res = {s: zeroshot(model, data[s]) for s in args.sets}
        res.update({s: pipeline.evaluate_retrieval(model, data[s]) for s in args.retrieval})
        results[arm] = res
        log(f"{arm}: " + ", ".join(f"{s} {r.get('ensemble_acc1', r.get('mean_recall')):.3f}" for s, r in res.items()))
    record = run_record(__file__, argv)
    command = record["command"]
    doc = {**record, "seconds": round(time.time() - t0, 1), "templates": list(TEMPLATES),
           "sets": {s: len(e.records) for s, e in data.items()},
           "arms": {a: {"config": ARMS[a][0], "overrides": ARMS[a][1], "what": ARMS[a][2]} for a in args.arms},
           "results": results}
    write_json(args.json, doc)
    log(f"wrote {args.json} ({doc['seconds']:.0f}s)")
    if args.doc:
        ResultsDoc(args.doc).update("tagger", render(doc), command, heading="Tagger (training-free photo baseline)")
    return 0


def render(doc: dict) -> str:
    res, arms = doc["results"], doc["arms"]
    zs, zh, rt, rh = {}, {}, {}, {}
    for a, r in res.items():
        zs[a], rt[a] = {}, {}
        for s, m in r.items():
            if "ensemble_acc1" in m:
                zs[a][f"{s} ensemble_acc1"] = m["ensemble_acc1"]
                zh[f"{s} ensemble_acc1"] = f"{s} ensemble (%)"
                for t in TEMPLATES:
                    zs[a][f"{s} acc1[{t}]"] = m[f"acc1[{t}]"]
                    zh[f"{s} acc1[{t}]"] = f"{s} “{t}” (%)"
            else:
                for k, short in (("image_retrieval_recall@1", "T→I R@1"), ("image_retrieval_recall@10", "T→I R@10"),
                                 ("text_retrieval_recall@1", "I→T R@1"), ("mean_recall", "mean R")):
                    rt[a][f"{s} {k}"] = m[k]
                    rh[f"{s} {k}"] = f"{s} {short} (%)"
    what = "\n".join(f"- `{a}`: {arms[a]['what']}" for a in arms)
    sets = ", ".join(f"{s} ({n})" for s, n in doc["sets"].items())
    return (
        "Training-free: EfficientNet-Lite0's own ImageNet classifier on each 224 px grid cell -> WordNet "
        "lemmas of the class and its hypernyms -> WordPiece tokens (models/tagger.py; not a paper model). "
        f"Images: {sets}. The arms are compared on the test sets themselves (there is no validation photo "
        f"set), so the best arm is a description, not a tuned result. Took {doc['seconds'] / 60:.0f} min.\n\n"
        + what + "\n\n**Zero-shot acc1**\n\n" + markdown_table(zs, first_column="arm", headers=zh)
        + "\n\n**Retrieval**\n\n" + markdown_table(rt, first_column="arm", headers=rh) + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
