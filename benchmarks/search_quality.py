"""What the query- and index-time ranking levers do to search quality (explain/ranking.py, index/hubness.py).

Every number is a search through the inverted index, as a user's search runs: the split's images are
indexed (optionally with a hub prior from a bank of *training* captions, and generic image tokens
down-weighted at index time), each caption is encoded and shaped by the ranking, idf-weighted by the
index, and searched; T->I recall@K is whether its own image is among the top K hits. Each split is
searched twice: by the whole caption ("red heart — emotion, heart, love, red") and by its name alone
("red heart": the part before " — ", as a user types a query). Fashion-MNIST zero-shot: each image's
best class under the same shaping and idf (CLIP's prompt ensemble, cosine).

    python -m benchmarks.search_quality --split val        # the sweep: choose on validation splits only
    python -m benchmarks.search_quality --split val-mixed --expansion 1 0.5 --prior 0 0.25 0.5   # one index
    python -m benchmarks.search_quality --split test --rankings benchmarks/search_quality_rows.json   # the table

``--split val-mixed`` / ``test-mixed`` index every split's images together (as the demo indexes several
sources in one index, where hubs of one source crowd the others' queries) and add the icon sets' names;
val-mixed also holds photo-val's 500 photos (../shared/data/photo-val, validation only; skipped when
absent), each searched by its class name, so a ranking is chosen for collections of drawings and photos.

Writes benchmarks/results/search_quality-<split>.json and prints a table (best first on val).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json
from benchmarks.search_trust import PHOTO_VAL
from benchmarks.search_trust import records as split_records
from tokenspace import pipeline
from tokenspace.eval import ZeroShotEvaluator
from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.index import InvertedIndex, hubness
from tokenspace.models.registry import load
from tokenspace.sparse import SparseBatch

ROOT = Path(__file__).resolve().parent.parent
RELEASE = "tokenspace-stair-drawings"
# the release model's training data (configs/recipes/stair-drawings.yaml): the hub bank's captions
BANK_SPECS = ["emoji:train", "emoji:train-extra", "icons:train", "openclipart:train"]
BANK_SIZE = 8000  # captions drawn from them (deterministic): r_D's top-K means settle well before
SPLITS = {"val": ["emoji:val", "openclipart:val"], "test": ["emoji:test", "openclipart:test"],
          "val-mixed": ["emoji:val", "openclipart:val", "icons:val", "photo-val"],
          "test-mixed": ["emoji:test", "openclipart:test", "icons:test"]}
PHOTOS = {"val": "fashion-mnist:val", "test": "fashion-mnist:test", "val-mixed": "fashion-mnist:val",
          "test-mixed": "fashion-mnist:test"}
TEMPLATES = ("a photo of a {c}.", "a drawing of a {c}.", "{c}")  # benchmarks/tagger_zeroshot.py's
# the grid: query shaping x index levers (the index-time ones change the index: built once per value)
EXPANSION = (1.0, 0.5, 0.25, 0.0)
FLOOR = (0.0, 0.1)
IDF = (0.0, 0.5)
PRIOR = (0.0, 0.5, 1.0)
HUB_K = 10
QUERY_KINDS = ("", " name")  # the whole caption, its name alone


def bank_texts(home=None) -> list[str]:
    texts = sorted({r.text.strip() for r in pipeline.load_data(BANK_SPECS, home) if r.text and r.text.strip()})
    rng = np.random.default_rng(0)
    keep = rng.choice(len(texts), size=min(BANK_SIZE, len(texts)), replace=False)
    return [texts[i] for i in sorted(keep)]


def recall(index: InvertedIndex, queries, targets: list[str], ranking: Ranking, ks=(1, 5, 10)) -> dict:
    hits = index.search(index.weigh(queries, ranking.idf), k=max(ks), **ranking.index_options())
    out = {}
    for k in ks:
        out[f"R@{k}"] = 100.0 * float(np.mean([t in {h.id for h in hs[:k]} for hs, t in zip(hits, targets)]))
    return out


def zeroshot(model, img, records, ranking: Ranking, idf: np.ndarray) -> float:
    classes = sorted({r.label for r in records})
    labels = np.array([classes.index(r.label) for r in records])
    idf_pow = np.power(idf.astype(np.float64), ranking.idf).astype(np.float32)

    def encode(texts):
        q = encode_queries(model, texts, ranking)
        return hubness.weigh_queries(q, idf_pow) if ranking.idf else q

    return 100.0 * ZeroShotEvaluator(classes, labels, list(TEMPLATES), metric="cosine")(img, encode)["acc1"]


def generic_scaled(img, share: float | None):
    """Images with each token held by more than ``share`` of them down-weighted by share / its share,
    rows L2-normalised again (the index-time lever for generic image tokens)."""
    if share is None:
        return img
    return hubness.down_weight_generic(img, share)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=sorted(SPLITS), default="val")
    ap.add_argument("--model", default=RELEASE)
    ap.add_argument("--rankings", help="a JSON file {name: {ranking fields, hub_k?, generic?}}: only these rows")
    ap.add_argument("--out", type=Path)
    for axis, values in (("expansion", EXPANSION), ("floor", FLOOR), ("idf", IDF), ("prior", PRIOR)):
        ap.add_argument(f"--{axis}", type=float, nargs="+", default=list(values), help=f"the grid's {axis} values")
    ap.add_argument("--generic", type=float, nargs="+", default=[0.0, 0.2], help="generic shares (0: none)")
    args = ap.parse_args(argv)
    mixed = args.split.endswith("-mixed")
    t0 = time.time()
    model = load(args.model)
    specs = [s for s in SPLITS[args.split] if s != "photo-val" or (PHOTO_VAL / "labels.tsv").exists()]
    data = {}
    for spec in specs:
        enc = pipeline.image_grids(model, split_records(spec), progress=False)
        texts, target = pipeline.texts_and_targets(enc.records)
        names = [t.split(" — ")[0] for t in texts]
        data[spec] = (model.encode_image_grids(enc.grids), [r.id for r in enc.records], {"": texts, " name": names},
                      [enc.records[i].id for i in target])
    photo = pipeline.image_grids(model, pipeline.load_split(PHOTOS[args.split]), progress=False)
    photo_img = model.encode_image_grids(photo.grids)
    bank_t = bank_texts()
    sizes = ", ".join(f"{s} {len(d[1])} images / {len(d[3])} captions" for s, d in data.items())
    print(f"[search_quality] {args.model}, {args.split}: {sizes}; "
          f"{PHOTOS[args.split]} {len(photo.records)}; bank {len(bank_t)} training captions", file=sys.stderr)

    if args.rankings:
        configs = json.loads(Path(args.rankings).read_text())
    else:
        configs = {}
        for e, f, g, i, w in itertools.product(args.expansion, args.floor, args.generic, args.idf, args.prior):
            configs[f"e{e:g} f{f:g} g{g:g} idf{i:g} p{w:g}"] = {
                "expansion": e, "expansion_floor": f, "idf": i, "prior_weight": w, "generic": g or None, "hub_k": HUB_K}
    rows = {}
    cache: dict = {}
    for name, cfg in configs.items():
        cfg = dict(cfg)
        generic, hub_k = cfg.pop("generic", None), cfg.pop("hub_k", HUB_K)
        ranking = Ranking.from_dict(cfg)
        shape_key = (ranking.expansion, ranking.expansion_floor)
        if shape_key not in cache:
            qs = {(s, kind): encode_queries(model, d[2][kind], ranking) for s, d in data.items() for kind in QUERY_KINDS}
            bank = encode_queries(model, bank_t, ranking)
            cache[shape_key] = (qs, bank, {})
        qs, bank, indexes = cache[shape_key]
        row = {}
        for spec, (img, ids, _texts, targets) in data.items():
            key = ("mixed" if mixed else spec, generic, hub_k if ranking.prior_weight else 0)
            if key not in indexes:
                if mixed:  # every split's images in one index
                    img = SparseBatch.concat([d[0] for d in data.values()])
                    ids = [i for d in data.values() for i in d[1]]
                index = InvertedIndex.build(generic_scaled(img, generic), ids)
                if ranking.prior_weight:
                    index.set_hub_prior(bank, k=hub_k)
                indexes[key] = index
            for kind in QUERY_KINDS:
                for m, v in recall(indexes[key], qs[spec, kind], targets, ranking).items():
                    row[f"{spec}{kind} {m}"] = v
        pkey = ("photo", generic)
        if pkey not in indexes:
            scaled = generic_scaled(photo_img, generic)
            indexes[pkey] = (scaled, InvertedIndex.build(scaled, [r.id for r in photo.records]).idf())
        scaled, idf = indexes[pkey]
        row[f"{PHOTOS[args.split]} zero-shot acc1"] = zeroshot(model, scaled, photo.records, ranking, idf)
        row["config"] = {**ranking.to_dict(), "generic": generic, "hub_k": hub_k}
        rows[name] = row
        r1 = [row[f"{s}{kind} R@1"] for s in specs for kind in QUERY_KINDS]
        print(f"{name:32s} " + " ".join(f"{x:5.1f}" for x in r1) + f" | zs {row[f'{PHOTOS[args.split]} zero-shot acc1']:5.1f}",
              file=sys.stderr, flush=True)
    for row in rows.values():  # the score a sweep ranks by: mean of every T->I R@1 and zero-shot acc1
        r1 = [row[f"{s}{kind} R@1"] for s in specs for kind in QUERY_KINDS]
        row["score"] = float(np.mean(r1 + [row[f"{PHOTOS[args.split]} zero-shot acc1"]]))
    order = sorted(rows, key=lambda n: -rows[n]["score"])
    cols = ([f"{s}{kind} R@1" for s in specs for kind in QUERY_KINDS] + [f"{s} R@10" for s in specs]
            + [f"{PHOTOS[args.split]} zero-shot acc1", "score"])
    print("| ranking | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
    for n in order if args.rankings else order[:25]:
        print(f"| {n} | " + " | ".join(f"{rows[n][c]:.1f}" for c in cols) + " |")
    out = args.out or ROOT / "benchmarks" / "results" / f"search_quality-{args.split}.json"
    write_json(out, {
        "model": args.model, "split": args.split, "bank": {"specs": BANK_SPECS, "size": len(bank_t)},
        "seconds": round(time.time() - t0, 1), "rows": rows}, run_record(__file__, argv))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
