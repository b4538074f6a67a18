"""What a user sees when they search, for any model: photos found as well as the classifier knows them,
drawings as before, queries that stay on topic, the demo's searches.

    python -m benchmarks.search_trust                                   # the release model
    python -m benchmarks.search_trust --model runs/x/model --sets photo-val fashion-mnist:val
    python -m benchmarks.search_trust --quick                           # validation sets only
    python -m benchmarks.search_trust --sweep-tagger                    # choose the tagger's readout

Reports (a table on stdout, JSON in benchmarks/results/search_trust[-NAME].json):
- zero-shot top-1 over the classes of each photo set: `photo-val` (../shared/data/photo-val: 500
  full-resolution photos of 500 ImageNet classes, validation only, skipped when absent), Fashion-MNIST
  val (1,000 of its training images) and test (1,000 of t10k); the project's three-prompt ensemble and
  "a photo of a {c}." alone;
- T→I R@1 on the drawing splits (emoji:val, openclipart:val; emoji:test, openclipart:test);
- query hubs over 60 everyday queries (benchmarks/data/everyday_queries.txt, none a demo query): tokens
  in the top 20 of >= 20% of them, and the share of the queries' top-20 weight they carry;
- the demo: word pieces (``##``) among each example search's top-20 query tokens, example searches with
  a relevant image at rank 1 (of 12), and where the first cat ranks for "a black cat", on the demo's own
  index (held-out drawings and sample photos) with the model's ranking.json.
Validation sets choose; test sets only report. ``--sweep-tagger`` measures the model's tagger part alone (its
image rows against the bag of the query's words) under each readout of READOUTS on the validation photo sets
(photo-val at full resolution, Fashion-MNIST's training images at 28 px) and names the one ``best_setting``
chooses: the highest mean over the sets, the earlier setting on a tie.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json
from tokenspace import demo, pipeline
from tokenspace.data.manifest import Record
from tokenspace.eval import ZeroShotEvaluator
from tokenspace.explain.ranking import add_hub_prior, read_model_ranking
from tokenspace.index import InvertedIndex
from tokenspace.index.query_hubs import query_hubs, top_tokens
from tokenspace.models.registry import load

ROOT = Path(__file__).resolve().parent.parent
PHOTO_VAL = ROOT.parent / "shared" / "data" / "photo-val"
QUERIES = ROOT / "benchmarks" / "data" / "everyday_queries.txt"
TEMPLATES = ("a photo of a {c}.", "a drawing of a {c}.", "{c}")  # the project's zero-shot ensemble
PHOTO_SETS = ("photo-val", "fashion-mnist:val", "fashion-mnist:test")
RETRIEVAL_SETS = ("emoji:val", "openclipart:val", "emoji:test", "openclipart:test")
QUICK = ("photo-val", "fashion-mnist:val", "emoji:val", "openclipart:val")
BLACK_CAT = ("a black cat", "cat")
# the tagger's readouts a sweep compares: (pool, top classes)
READOUTS = (("cells", 5), ("cells", 1), ("image", 1), ("image", 5), ("image", 20), ("image", 50), ("both", 5))
SWEEP_SETS = ("photo-val", "fashion-mnist:val")


def best_setting(scores: dict) -> object:
    """The setting with the highest mean score over its sets ({setting: {set: score}}); on a tie the one
    listed first (a sweep lists the simpler or current setting first). Every setting must be scored on the
    same sets."""
    if not scores:
        raise ValueError("best_setting needs at least one scored setting")
    sets = {frozenset(v) for v in scores.values()}
    if len(sets) != 1 or not next(iter(sets)):
        raise ValueError(f"every setting must be scored on the same, non-empty sets: {scores}")
    best, best_mean = None, float("-inf")
    for setting, by_set in scores.items():
        mean = sum(by_set.values()) / len(by_set)
        if mean > best_mean:
            best, best_mean = setting, mean
    return best


def log(msg: str) -> None:
    print(f"[search_trust] {msg}", file=sys.stderr, flush=True)


def photo_val_records(folder: Path = PHOTO_VAL) -> list[Record]:
    """photo-val's labels.tsv (file, wnid, name) as records; the class name is the label."""
    with open(folder / "labels.tsv", newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and r[0] != "file"]
    return [Record(id=f"photo-val:{f}", image=str(folder / f), text=name, split="val", label=name)
            for f, _wnid, name, *_ in rows]


def records(spec: str) -> list[Record]:
    return photo_val_records() if spec == "photo-val" else pipeline.load_split(spec)


def zeroshot(model, spec: str) -> dict[str, float]:
    enc = pipeline.image_grids(model, records(spec), progress=False)
    images = model.encode_image_grids(enc.grids)
    classes = sorted({r.label for r in enc.records})
    labels = np.array([classes.index(r.label) for r in enc.records])
    out = {}
    for name, templates in (("ensemble", TEMPLATES), ("photo_prompt", TEMPLATES[:1])):
        ev = ZeroShotEvaluator(classes, labels, list(templates), metric="cosine")
        out[f"{name}_acc1"] = ev(images, model.encode_text)["acc1"]
    return out


def hubs(model, top: int = 20, min_share: float = 0.2) -> dict:
    texts = [t.strip() for t in QUERIES.read_text().splitlines() if t.strip() and not t.startswith("#")]
    report = query_hubs(model.encode_text(texts).to_scipy(), top=top, min_share=min_share)
    return {"queries": len(texts), **report.to_dict(model.vocab.tokens)}


def demo_numbers(model, ref) -> dict:
    """The demo's index searched with the model's ranking.json: chips, rank-1 count, the black cat."""
    queries = [q for q, _ in demo.QUERIES] + [BLACK_CAT[0]]
    rows = model.encode_text(queries)
    chips = {q: [model.vocab.tokens[i] for i in ids.tolist()]
             for q, (ids, _) in zip(queries, top_tokens(rows.to_scipy(), 20))}
    pieces = {q: [t for t in c if t.startswith("##")] for q, c in chips.items()}
    vectors, ids, recs = pipeline.encode_collection(model, demo.INDEX_SPECS, progress=False)
    meta = {r.id: {"text": r.text} for r in recs}
    chosen = read_model_ranking(ref)
    ranking = chosen.search if chosen.hub is not None else chosen.search.with_(prior_weight=0.0)
    index = InvertedIndex.build(vectors, ids, generic_share=chosen.generic_share)
    if chosen.hub is not None:
        add_hub_prior(index, model, ranking, chosen.hub)
    with contextlib.redirect_stdout(io.StringIO()):
        found = demo.print_searches(model, index, meta, ranking, quiet=True)
    searcher = demo._session(model, index, meta, ranking)
    ranked = searcher.search(BLACK_CAT[0], len(index), explain=False).hits
    cat = next((r for r, h in enumerate(ranked, 1) if demo.relevant(meta[h.id]["text"], BLACK_CAT[1])), None)
    return {"at1": found["at1"], "of": len(demo.QUERIES), "top_k": found["top_k"], "black_cat_first_cat": cat,
            "black_cat_top3": [meta[h.id]["text"] for h in ranked[:3]], "pieces_in_chips": pieces,
            "chips": chips, "n_pieces": sum(map(len, pieces.values()))}


def sweep_tagger(model) -> dict:
    """Zero-shot top-1 of the model's tagger part alone under each readout, and the chosen one."""
    part = next(i for i, p in enumerate(model.parts) if p.family == "tagger")
    tagger, tw, anchor = model.parts[part], list(model.text_weights), model.anchor
    weights, was = list(model.image_weights), (tagger.pool, tagger.top_classes)
    model.image_weights = [float(i == part) for i in range(len(model.parts))]  # the tagger's rows alone
    model.text_weights, model.anchor, related = [0.0] * len(model.parts), 1.0, model.related_min  # the bag alone
    model.related_min = None
    scores: dict = {}
    try:
        for pool, k in READOUTS:
            tagger.pool, tagger.top_classes = pool, k
            scores[f"{pool}-{k}"] = {s: zeroshot(model, s)["ensemble_acc1"] for s in SWEEP_SETS}
            log(f"tagger readout {pool}-{k}: {scores[f'{pool}-{k}']}")
    finally:
        model.image_weights, model.text_weights, model.anchor, model.related_min = weights, tw, anchor, related
        tagger.pool, tagger.top_classes = was
    return {"scores": scores, "chosen": best_setting(scores), "shipped": f"{was[0]}-{was[1]}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=demo.RELEASE, help="a model folder or release name")
    ap.add_argument("--sets", nargs="+", default=None, help=f"photo and drawing sets (default: {PHOTO_SETS + RETRIEVAL_SETS})")
    ap.add_argument("--quick", action="store_true", help=f"validation sets only: {QUICK}")
    ap.add_argument("--no-demo", action="store_true", help="skip the demo's index (its 705 images)")
    ap.add_argument("--sweep-tagger", action="store_true", help="choose the tagger part's readout (see above)")
    ap.add_argument("--name", default=None, help="results/search_trust-NAME.json (default: search_trust.json)")
    args = ap.parse_args(argv)
    sets = args.sets or (QUICK if args.quick else PHOTO_SETS + RETRIEVAL_SETS)
    if "photo-val" in sets and not (PHOTO_VAL / "labels.tsv").exists():
        log(f"{PHOTO_VAL} is absent: photo-val skipped")
        sets = [s for s in sets if s != "photo-val"]
    model = load(args.model)
    if args.sweep_tagger:
        sweep = sweep_tagger(model)
        print("| readout | " + " | ".join(SWEEP_SETS) + " |\n|---|" + "---:|" * len(SWEEP_SETS))
        for name, by_set in sweep["scores"].items():
            print(f"| {name}{' (chosen)' if name == sweep['chosen'] else ''} | "
                  + " | ".join(f"{100 * by_set[s]:.1f}" for s in SWEEP_SETS) + " |")
        write_json(ROOT / "benchmarks" / "results" / "search_trust-tagger-sweep.json", sweep, run_record(__file__, argv))
        return 0
    out: dict = {"model": str(args.model), "zeroshot": {}, "retrieval": {}}
    for spec in sets:
        t = time.time()
        if spec in RETRIEVAL_SETS or spec.split(":")[0] in ("emoji", "openclipart", "icons"):
            enc = pipeline.image_grids(model, records(spec), progress=False)
            out["retrieval"][spec] = pipeline.evaluate_retrieval(model, enc)["image_retrieval_recall@1"]
        else:
            out["zeroshot"][spec] = zeroshot(model, spec)
        log(f"{spec}: {time.time() - t:.0f} s")
    out["query_hubs"] = hubs(model)
    if not args.no_demo:
        out["demo"] = demo_numbers(model, args.model)
    print("| measure | value |\n|---|---:|")
    for spec, r in out["zeroshot"].items():
        print(f"| {spec} zero-shot top-1, ensemble / \"a photo of a {{c}}.\" | {100 * r['ensemble_acc1']:.1f} / "
              f"{100 * r['photo_prompt_acc1']:.1f} |")
    for spec, r1 in out["retrieval"].items():
        print(f"| {spec} T→I R@1 | {100 * r1:.1f} |")
    h = out["query_hubs"]
    print(f"| query hubs (top {h['top']} of >= {100 * h['min_share']:.0f}% of {h['queries']} queries): weight "
          f"share | {100 * h['weight_share']:.1f}% ({', '.join(list(h['hubs'])[:8]) or 'none'}) |")
    if "demo" in out:
        d = out["demo"]
        print(f"| demo: example searches right at rank 1 | {d['at1']} / {d['of']} |")
        print(f"| demo: \"a black cat\", first cat at rank | {d['black_cat_first_cat']} |")
        print(f"| demo: word pieces among the example searches' top-20 tokens | {d['n_pieces']} |")
    name = f"search_trust-{args.name}.json" if args.name else "search_trust.json"
    write_json(ROOT / "benchmarks" / "results" / name, out, run_record(__file__, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
