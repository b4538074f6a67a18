"""Inference-free queries beside the full text side of the same model: text-to-image recall on val and test,
and query latency end to end (the query's encoding + an exact top-10 search of an index), one query at a
time.

The inference-free models (models/inference_free.py) keep the base model's image vectors; their query is
the text's own content word pieces at a stored weight, from one of three sources:

* ``idf``: BM25's idf over the base's training captions (the data its card names);
* ``model``: the base's mean text-side weight of each token over those captions;
* ``index-idf``: BM25's idf over the searched images' own vectors (each split's index: no caption used);
* ``model*idf``: the product of the first two;

each raised to a power p (0: every content token at weight 1, the bag of words; 0.5, 1, 2), a table all
the same. Tuned on val only (which source and power, by mean text-to-image R@10 over the val splits,
reported as ``chosen_on_val``); test is reported for every variant, the chosen one named. Recall is the plain dot product for every row (no ranking.json levers), as
`tokenspace eval` reports it.

    python -m benchmarks.inference_free                     # the release model, ~5 min on 2 quiet cores

Writes benchmarks/results/inference_free.json (date, commit, machine, command first).
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, run_record, write_json
from tokenspace.data.specs import image_grids, load_data
from tokenspace.eval import RetrievalEvaluator
from tokenspace.index import InvertedIndex
from tokenspace.index.hubness import bm25_idf
from tokenspace.models.inference_free import make_inference_free, mean_text_weights
from tokenspace.models.registry import DEFAULT_RELEASE, load
from tokenspace.sparse import SparseBatch
from tokenspace.train.evaluation import texts_and_targets

VAL = ["emoji:val", "openclipart:val:300"]
TEST = ["emoji:test", "openclipart:test:300"]
# the release model's training captions (its model card's data.train): the idf and mean weights come from
# these, never from val or test
TRAIN = ["emoji:train", "emoji:train-extra", "icons:train", "openclipart:train"]
METRICS = ["image_retrieval_recall@1", "image_retrieval_recall@5", "image_retrieval_recall@10"]


def doc_idf(images: SparseBatch) -> np.ndarray:
    """BM25's idf of each token over these image vectors (what InvertedIndex.idf gives for their index)."""
    df = np.bincount(images.indices[images.values > 0], minlength=images.dim)
    return bm25_idf(df, len(images))


POWERS = (0.0, 0.5, 1.0, 2.0)


def powered(table: np.ndarray, p: float) -> np.ndarray:
    """table ** p on the tokens that have a weight (0 stays 0, also for p = 0)."""
    return np.where(table > 0, np.power(np.maximum(table, 0), p), 0).astype(np.float32)


def with_weights(model, table: np.ndarray):
    """A copy of an inference-free model with another weight table (one base, several tables)."""
    other = copy.deepcopy(model)
    other.set_weights(table)
    return other


def latency(encode, index: InvertedIndex, texts: list[str], repeat: int = 3) -> dict:
    """Per query, one at a time: encode_query then an exact top-10 search (the best of ``repeat`` runs of
    each query, so another process's burst on the shared cores does not count). Milliseconds."""
    enc, total = [], []
    for t in texts:
        best_e = best_t = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            q = encode([t])
            t1 = time.perf_counter()
            index.search(q, k=10)
            t2 = time.perf_counter()
            best_e, best_t = min(best_e, t1 - t0), min(best_t, t2 - t0)
        enc.append(best_e * 1e3)
        total.append(best_t * 1e3)
    enc, total = np.array(enc), np.array(total)
    return {"queries": len(texts), "encode_ms_median": float(np.median(enc)), "encode_ms_p90": float(np.quantile(enc, 0.9)),
            "end_to_end_ms_median": float(np.median(total)), "end_to_end_ms_p90": float(np.quantile(total, 0.9)),
            "end_to_end_ms_mean": float(total.mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_RELEASE, help="the base model (folder or release name)")
    ap.add_argument("--train", nargs="+", default=TRAIN, help="training captions for the idf and model tables")
    ap.add_argument("--val", nargs="+", default=VAL)
    ap.add_argument("--test", nargs="+", default=TEST)
    ap.add_argument("--latency-queries", type=int, default=200, help="test captions timed one at a time")
    ap.add_argument("--out", type=Path, default=RESULTS / "inference_free.json")
    ap.add_argument("--tables", type=Path, default=None,
                    help="an .npz to keep the fitted idf and model tables in (reused when its train specs match)")
    args = ap.parse_args(argv)
    record = run_record(__file__, argv)

    base = load(args.model)
    captions = texts_and_targets(load_data(args.train))[0]
    t0 = time.perf_counter()
    idf_model = make_inference_free(args.model, "idf", captions=captions, source=" ".join(args.train))
    idf_s = time.perf_counter() - t0
    key = " ".join([str(args.model), *args.train])
    if args.tables and args.tables.is_file() and str(np.load(args.tables)["key"]) == key:
        mean_w, model_s = np.load(args.tables)["model"], None
    else:
        t0 = time.perf_counter()
        mean_w = mean_text_weights(base, captions)
        model_s = time.perf_counter() - t0
        if args.tables:
            np.savez(args.tables, key=key, model=mean_w)
    idf_w = idf_model.query_weights.numpy().copy()
    mean_w = np.where(idf_w > 0, mean_w, 0)  # the content tokens only, as set_weights keeps them
    tables = {"idf": idf_w, "model": mean_w, "model*idf": mean_w * idf_w}
    fitted = {f"{src}^{p:g}": with_weights(idf_model, powered(t, p)) for src, t in tables.items() for p in POWERS}

    quality: dict[str, dict[str, dict]] = {}
    test_images, test_texts = [], []
    for split in ("val", "test"):
        for spec in getattr(args, split):
            enc = image_grids(base, load_data([spec]), progress=False)
            images = base.encode_image_grids(enc.grids)
            texts, target = texts_and_targets(enc.records)
            ev = RetrievalEvaluator(target)
            docs_idf = doc_idf(images)
            systems = {"full text side": base, **fitted,
                       **{f"index-idf^{p:g}": with_weights(idf_model, powered(docs_idf, p)) for p in POWERS[1:]}}
            quality[spec] = {name: {m: ev(images, model.encode_query(texts))[m] for m in METRICS}
                             for name, model in systems.items()}
            quality[spec]["n_images"], quality[spec]["n_texts"] = len(enc.records), len(texts)
            if split == "test":
                test_images.append((spec, images, enc.records))
                test_texts += texts
            print(spec, {k: round(v["image_retrieval_recall@10"], 3) for k, v in quality[spec].items()
                         if isinstance(v, dict)}, flush=True)

    names = [k for k in quality[args.val[0]] if isinstance(quality[args.val[0]][k], dict) and k != "full text side"]

    def mean_r10(specs, name):
        return float(np.mean([quality[s][name]["image_retrieval_recall@10"] for s in specs]))

    chosen = max(names, key=lambda n: mean_r10(args.val, n))  # val only
    src, p = chosen.rsplit("^", 1)
    summary = {split: {name: {m: float(np.mean([quality[s][name][m] for s in getattr(args, split)]))
                              for m in METRICS} for name in ["full text side", *names]}
               for split in ("val", "test")}

    # latency: an index of every test image, the test captions as queries (the index-idf table of that index)
    docs = SparseBatch.concat([im for _, im, _ in test_images])
    ids = [f"{spec}/{r.id}" for spec, _, recs in test_images for r in recs]
    index = InvertedIndex.build(docs, ids)
    table = powered(index.idf(), float(p)) if src == "index-idf" else powered(tables[src], float(p))
    systems = {"full text side": base, f"inference-free ({chosen})": with_weights(idf_model, table)}
    rng = np.random.default_rng(0)
    queries = [test_texts[i] for i in rng.choice(len(test_texts), min(args.latency_queries, len(test_texts)),
                                                 replace=False)]
    for model in systems.values():  # warm: first calls build caches (tokenizer, numba kernels)
        index.search(model.encode_query(queries[:5]), k=10)
    speed = {name: latency(model.encode_query, index, queries) for name, model in systems.items()}
    for name, s in speed.items():
        print(f"{name}: encode {s['encode_ms_median']:.3f} ms, end to end {s['end_to_end_ms_median']:.3f} ms (median)")

    write_json(args.out, {
        "model": args.model, "train_captions": args.train, "n_train_captions": len(captions),
        "fit_seconds": {"idf": round(idf_s, 2), "model": None if model_s is None else round(model_s, 2)},
        "chosen_on_val": chosen,
        "summary_image_retrieval": summary, "per_split": quality,
        "latency": {"index_docs": len(index), "threads": 1, "k": 10, **speed},
        "notes": "recall: text-to-image (image_retrieval_*), plain dot product; latency: one query at a time, "
                 "best of 3 per query, then median/p90 over the queries (ms); the images' vectors are the "
                 "base model's for every row (the inference-free models keep its image side)",
    }, record)
    print(f"chosen on val: {chosen}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
