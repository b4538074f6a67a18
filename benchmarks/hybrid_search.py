"""Hybrid sparse + dense search (index/hybrid.py) against each index alone: text -> image R@1 / R@10.

    nice -n 10 python -m benchmarks.hybrid_search
    nice -n 10 python -m benchmarks.hybrid_search --pair runs/demo/stair-emoji/model runs/demo/dense-emoji/model

Each pair (SPARSE DENSE) encodes the test splits' images and captions with both models, builds an
InvertedIndex and a DenseIndex of the images, and searches every caption four ways: the sparse index
alone, the dense index alone, and hybrid_search with fusion rrf and weighted (weight 0.5, depth 100).
A caption hits at K when its own image is among the top K hits of that search (the hit lists the
search returns, so score ties fall as the engine breaks them). Default pairs: the release model with
the dense twin `make demo` trains (recipe dense-emoji: emoji:train only; the release's own twin,
dense-drawings, is not kept on disk), and the demo's STAIR with that same dense twin (both trained by
`make demo` on emoji:train). Writes benchmarks/results/hybrid_search.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.common import run_record, write_json
from tokenspace import pipeline
from tokenspace.index import InvertedIndex
from tokenspace.index.dense import DenseIndex
from tokenspace.index.hybrid import hybrid_search
from tokenspace.models.registry import load

ROOT = Path(__file__).resolve().parent.parent
JSON_OUT = ROOT / "benchmarks" / "results" / "hybrid_search.json"
SPLITS = ["emoji:test", "openclipart:test"]
PAIRS = [("tokenspace-stair-drawings", "runs/demo/dense-emoji/model"),
         ("runs/demo/stair-emoji/model", "runs/demo/dense-emoji/model")]
KS = (1, 10)
WEIGHT = 0.5


def log(msg: str) -> None:
    print(f"[hybrid] {msg}", file=sys.stderr, flush=True)


def encode(model, spec: str):
    """(image rows, caption rows, image ids, each caption's image id) of one split."""
    enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
    texts, target = pipeline.texts_and_targets(enc.records)
    ids = [r.id for r in enc.records]
    return model.encode_image_grids(enc.grids), model.encode_text(texts), ids, [ids[t] for t in target]


def recall(hits, truth) -> dict[str, float]:
    return {f"R@{k}": 100.0 * sum(t in [h.id for h in hs[:k]] for hs, t in zip(hits, truth)) / len(truth)
            for k in KS}


def evaluate_pair(sparse_ref: str, dense_ref: str, spec: str) -> dict:
    sparse_model, dense_model = load(sparse_ref), load(dense_ref)
    t0 = time.perf_counter()
    s_img, s_txt, s_ids, truth = encode(sparse_model, spec)
    d_img, d_txt, d_ids, d_truth = encode(dense_model, spec)
    if s_ids != d_ids or truth != d_truth:
        raise SystemExit(f"{spec}: the two models read different records")
    log(f"{spec}: encoded {len(s_ids)} images, {len(truth)} captions with both in {time.perf_counter() - t0:.0f} s")
    sparse, dense = InvertedIndex.build(s_img, s_ids), DenseIndex.build(d_img, d_ids)
    k = max(KS)
    rows = {"sparse": recall(sparse.search(s_txt, k=k), truth), "dense": recall(dense.search(d_txt, k=k), truth)}
    for fusion in ("rrf", "weighted"):
        hits = hybrid_search(sparse, s_txt, dense, d_txt, k=k, fusion=fusion, weight=WEIGHT)
        rows[f"hybrid {fusion}"] = recall(hits, truth)
    return {"sparse": sparse_ref, "dense": dense_ref, "split": spec, "images": len(s_ids), "captions": len(truth),
            "recall": rows}


def table(results: list[dict]) -> str:
    methods = ["sparse", "dense", "hybrid rrf", "hybrid weighted"]
    head = "| sparse model | dense model | split | " + " | ".join(f"{m} R@1 / R@10" for m in methods) + " |"
    lines = [head, "|" + " --- |" * (3 + len(methods))]
    for r in results:
        cells = [f"{r['recall'][m]['R@1']:.1f} / {r['recall'][m]['R@10']:.1f}" for m in methods]
        lines.append(f"| {Path(r['sparse']).parent.name if '/' in r['sparse'] else r['sparse']} | "
                     f"{Path(r['dense']).parent.name} | {r['split']} ({r['captions']} captions) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", nargs=2, action="append", metavar=("SPARSE", "DENSE"),
                   help="a sparse model and a dense model (repeatable; default: the two pairs above)")
    p.add_argument("--splits", nargs="+", default=SPLITS)
    p.add_argument("--out", type=Path, default=JSON_OUT)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    results = [evaluate_pair(s, d, spec) for s, d in (args.pair or PAIRS) for spec in args.splits]
    print(table(results))
    doc = {"weight": WEIGHT, "depth": 100, "rrf_k": 60,
           "seconds": round(time.perf_counter() - t0), "results": results}
    write_json(args.out, doc, run_record(__file__, argv))
    log(f"wrote {args.out} ({doc['seconds']} s)")


if __name__ == "__main__":
    main()
