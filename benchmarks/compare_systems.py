"""STAIR, VisualSparta, Sparse CLIP and the dense baseline on the same data, towers, trainer and engine.

    python -m benchmarks.compare_systems systems   --scale 0.5   # train 4 systems, one comparison table
    python -m benchmarks.compare_systems topn      --scale 0.5   # VisualSparta top-n terms (paper Table 3)
    python -m benchmarks.compare_systems cap       --scale 0.34  # Sparse CLIP L0 vs logit-scale cap (Fig. 2c)
    python -m benchmarks.compare_systems expansion --scale 0.34  # expansion without / with ReLU (Fig. 2a)
    python -m benchmarks.compare_systems features                # Sparse CLIP feature naming table

Every run trains from the recipes in src/tokenspace/configs/recipes (``--scale`` multiplies each stage's
steps, for 2-core CPU budgets) on cached backbone grids (tokenspace.pipeline), encodes the held-out test
splits, indexes image rows with InvertedIndex and writes one section of docs/results.md, stamped with
the exact command. ``--reuse`` keeps a run folder whose model/ already exists.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.common import run_record, write_json
from tokenspace import pipeline
from tokenspace.eval import ResultsDoc, RetrievalEvaluator, markdown_table, sparsity_stats
from tokenspace.eval.plots import line_plot
from tokenspace.models.config import ModelConfig
from tokenspace.models.dual import DualEncoder
from tokenspace.sparse import SparseBatch
from tokenspace.train.recipe import Recipe
from tokenspace.train.tracking import eval_history, tracking_evaluator
from tokenspace.train.trainer import PairData, Trainer

ROOT = Path(__file__).resolve().parent.parent
# the full generated tables go beside the JSON; docs/results.md quotes the current rows
DOC = ROOT / "benchmarks" / "results" / "compare_systems.md"
IMG = ROOT / "docs" / "img"
SYSTEMS = {"stair": "stair-emoji", "visualsparta": "visualsparta-emoji", "sparse-clip": "sparse-clip-emoji",
           "dense": "dense-emoji"}
TEST_SPECS = ("emoji:test", "openclipart:test:300")
TRAIN_SPECS = ["emoji:train", "openclipart:train:2000"]
EVAL_SPEC = "emoji:test"


def log(msg: str) -> None:
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- training
def scaled(recipe: Recipe, scale: float, **over) -> Recipe:
    stages = [replace(s, steps=max(1, round(s.steps * scale)), warmup_steps=min(s.warmup_steps, round(s.steps * scale)))
              for s in recipe.stages]
    d = recipe.to_dict()
    d.update(stages=[s.__dict__ for s in stages], data={"train": TRAIN_SPECS, "eval": [EVAL_SPEC]}, **over)
    return Recipe.from_dict(d)


def _grids(model, specs):
    """Grids + texts per spec from the pipeline's per-spec caches (one cache per spec, reused by all runs)."""
    grids, texts = [], []
    for spec in specs:
        enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
        grids.append(np.asarray(enc.grids))
        texts += [r.text for r in enc.records]
    return np.concatenate(grids), texts


def train_run(recipe: Recipe, out: Path, reuse: bool) -> DualEncoder:
    """Train with the shared Trainer; the evaluate callback logs recall + L0 on emoji:test every eval_every."""
    if reuse and (out / "model" / "model.safetensors").exists():
        log(f"reusing {out}")
        return DualEncoder.from_pretrained(out / "model")
    model = pipeline.build_seeded(recipe)
    grids, texts = _grids(model, recipe.data["train"])
    enc = pipeline.image_grids(model, pipeline.load_split(EVAL_SPEC), progress=False)
    ev_texts, target = pipeline.texts_and_targets(enc.records)
    shutil.rmtree(out, ignore_errors=True)
    log(f"training {recipe.name} ({recipe.model}) for {recipe.total_steps} steps on {len(texts)} pairs -> {out}")
    t0 = time.time()
    model = Trainer(model, recipe, PairData.from_texts(grids, texts), out,
                    evaluate=tracking_evaluator(enc.grids, ev_texts, target), progress=False).fit()
    log(f"trained {recipe.name} in {time.time() - t0:.0f}s")
    return model


# ------------------------------------------------------------------------------------------- measuring
def _timed_search(index, queries: SparseBatch, k: int = 10, one_by_one: bool = False) -> float:
    """Queries per second over the whole query set (best of 2, the machine is shared)."""
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        if one_by_one:
            for i in range(len(queries)):
                index.search(queries[i], k=k)
        else:
            index.search(queries, k=k)
        best = min(best, time.perf_counter() - t0)
    return len(queries) / best


def measure(model, spec: str) -> dict[str, float]:
    """R@1/5/10 both ways (exact scores), nnz, and QPS of text->image search in the project's engine."""
    enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
    texts, target = pipeline.texts_and_targets(enc.records)
    img, txt = model.encode_image_grids(enc.grids), model.encode_text(texts)
    out = RetrievalEvaluator(target)(img, txt)
    ids = [r.id for r in enc.records]
    if isinstance(img, SparseBatch):
        from tokenspace.index import InvertedIndex

        out.update(sparsity_stats(img, txt))
        index = InvertedIndex.build(img, ids)
        out["qps"] = _timed_search(index, txt)
        # the engine returns the same ranking the exact evaluator scored (sanity, not a metric)
        top = index.search(txt[:20], k=1)
        direct = (img.to_scipy() @ txt[:20].to_scipy().T).toarray().max(0)
        assert all(abs(h[0].score - d) < 1e-3 * max(1.0, d) for h, d in zip(top, direct) if h)
    else:
        out.update(nnz_image=float(img.shape[1]), nnz_text=float(txt.shape[1]))
        try:
            from tokenspace.index.dense import DenseIndex

            index = DenseIndex.build(img, ids)
            t0 = time.perf_counter()
            index.search(txt, k=10)
            out["qps"] = len(texts) / (time.perf_counter() - t0)
        except ImportError:
            t0 = time.perf_counter()
            np.argpartition(-(txt @ img.T), 10, axis=1)
            out["qps"] = len(texts) / (time.perf_counter() - t0)
    out["n_images"], out["n_texts"] = float(len(ids)), float(len(texts))
    return out


def command() -> str:
    return run_record(__file__)["command"]


COLS = ["image_retrieval_recall@1", "image_retrieval_recall@5", "image_retrieval_recall@10",
        "text_retrieval_recall@1", "text_retrieval_recall@5", "text_retrieval_recall@10", "nnz_image", "nnz_text", "qps"]
HEADERS = {"image_retrieval_recall@1": "T→I R@1 (%)", "image_retrieval_recall@5": "T→I R@5 (%)",
           "image_retrieval_recall@10": "T→I R@10 (%)", "text_retrieval_recall@1": "I→T R@1 (%)",
           "text_retrieval_recall@5": "I→T R@5 (%)", "text_retrieval_recall@10": "I→T R@10 (%)",
           "nnz_image": "nnz image", "nnz_text": "nnz text", "qps": "QPS (T→I)"}


# ------------------------------------------------------------------------------------------- commands
def cmd_systems(a) -> None:
    rows: dict[str, dict] = {}
    steps = {}
    for sys_name in a.systems.split(","):
        recipe = scaled(Recipe.load(SYSTEMS[sys_name]), a.scale)
        steps[sys_name] = recipe.total_steps
        model = train_run(recipe, a.runs / sys_name, a.reuse)
        for spec in TEST_SPECS:
            m = measure(model, spec)
            rows[f"{sys_name} · {spec}"] = m
            log(f"{sys_name} {spec}: {json.dumps({k: round(v, 4) for k, v in m.items()})}")
    write_json(a.runs / "systems.json", {"rows": rows}, run_record(__file__))
    body = (f"Trained on {' + '.join(TRAIN_SPECS)} with the recipes of the same names scaled by {a.scale} "
            f"({', '.join(f'{k}: {v} steps' for k, v in steps.items())}; batch 64, cached EfficientNet-Lite0 "
            f"grids at 128 px, SPLADE-tiny text tower). Recall from exact scores; QPS = text→image top-10 "
            f"queries/s of the whole query set in one call to InvertedIndex (dense: FAISS flat IP), on a shared "
            f"2-core CPU, so QPS is indicative only. nnz = mean active dims per row. VisualSparta indexes every "
            f"positive term here (its top-n trade-off is the next table); it is trained text→image only (eq. 13) "
            f"and its I→T numbers are the same dot product read the other way.\n\n"
            + markdown_table(rows, COLS, headers=HEADERS))
    ResultsDoc(DOC).update("systems", body, command(), heading="STAIR vs VisualSparta vs Sparse CLIP vs dense")


def cmd_topn(a) -> None:
    from tokenspace.index import InvertedIndex

    model = train_run(scaled(Recipe.load(SYSTEMS["visualsparta"]), a.scale), a.runs / "visualsparta", True)
    model.image_top_n = None
    rows, r1, lat = {}, [], []
    enc = pipeline.image_grids(model, pipeline.load_split(EVAL_SPEC), progress=False)
    texts, target = pipeline.texts_and_targets(enc.records)
    full, txt = model.encode_image_grids(enc.grids), model.encode_text(texts)
    ids = [r.id for r in enc.records]
    for n in (50, 100, 500, 1000, 2000, None):
        img = full.prune_topk(n) if n else full
        m = RetrievalEvaluator(target)(img, txt)
        index = InvertedIndex.build(img, ids)
        qps = _timed_search(index, txt, one_by_one=True)
        row = {k: m[k] for k in COLS[:3]}
        row.update(nnz_image=float(img.row_nnz().mean()), latency_ms=1000.0 / qps, qps=qps)
        rows["all" if n is None else str(n)] = row
        r1.append(row["image_retrieval_recall@1"] * 100)
        lat.append(row["latency_ms"])
        log(f"top-n {n}: {row}")
    write_json(a.runs / "topn.json", {"rows": rows}, run_record(__file__))
    xs = [50, 100, 500, 1000, 2000, len(model.vocab)]
    p1 = line_plot({"T→I R@1": (xs, r1)}, IMG / "visualsparta-topn-recall.png", "top-n terms kept per image",
                   "R@1 (%)", "VisualSparta: recall vs top-n (emoji:test)", logx=True)
    p2 = line_plot({"latency": (xs, lat)}, IMG / "visualsparta-topn-latency.png", "top-n terms kept per image",
                   "ms per query", "VisualSparta: query latency vs top-n", logx=True)
    doc = ResultsDoc(DOC)
    body = (f"The visualsparta run of the systems table, {EVAL_SPEC} ({len(ids)} images, {len(texts)} queries). "
            "Each image row keeps its n heaviest term scores (eq. 14 cache, `SparseBatch.prune_topk`); latency "
            "= one query at a time through InvertedIndex, top-10, best of 2 passes (shared 2-core CPU).\n\n"
            + markdown_table(rows, COLS[:3] + ["nnz_image", "latency_ms", "qps"], first_column="n",
                             headers={**HEADERS, "latency_ms": "ms/query", "qps": "QPS"})
            + f"\n![recall vs n]({doc.relpath(p1)}) ![latency vs n]({doc.relpath(p2)})\n")
    doc.update("visualsparta-topn", body, command(), heading="VisualSparta: top-n term scores (paper Table 3)")


def _variant(name: str, out: Path, **over) -> str:
    """A model config file for one sweep point (the recipe names it by path)."""
    d = ModelConfig.load(SYSTEMS["sparse-clip"]).to_dict()
    d.update(name=name, **over)
    cfg = ModelConfig.from_dict(d)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    cfg.save(path)
    return str(path)


def _final_eval(run: Path) -> dict:
    return eval_history(run / "log.jsonl")[-1]


def cmd_cap(a) -> None:
    base = Recipe.load(SYSTEMS["sparse-clip"])
    rows, l0s, recs = {}, [], []
    caps = [float(c) for c in a.caps.split(",")]
    for cap in caps:
        name = f"sparse-clip-cap{cap:g}"
        cfg = _variant(name, a.runs / "configs", logit_scale_max=cap, logit_scale_init=min(1 / 0.07, cap))
        run = a.runs / name
        train_run(scaled(base, a.scale, model=cfg, name=name), run, a.reuse)
        ev = _final_eval(run)
        rows[f"cap {cap:g}"] = ev
        l0s.append(ev["l0_image"])
        recs.append(ev["mean_recall"] * 100)
    p = line_plot({"L0 (image)": (caps, l0s)}, IMG / "sparse-clip-l0-vs-cap.png", "logit-scale cap", "L0 (active features)",
                  "Sparse CLIP: L0 vs logit-scale cap")
    p2 = line_plot({"mean recall": (caps, recs)}, IMG / "sparse-clip-recall-vs-cap.png", "logit-scale cap",
                   "mean R@1/5/10 (%)", "Sparse CLIP: accuracy vs logit-scale cap")
    write_json(a.runs / "cap.json", {"rows": rows}, run_record(__file__))
    doc = ResultsDoc(DOC)
    cols = ["l0_image", "l0_text", "l0_frac_image", "active_features_frac", "image_retrieval_recall@1",
            "image_retrieval_recall@10", "mean_recall"]
    body = (f"sparse-clip-emoji (128 x 32 = 4096 features, ReLU) with only the cap changed; "
            f"{base.total_steps * a.scale:.0f} steps each; L0 and recall on {EVAL_SPEC} at the end of training "
            f"(the full L0/recall trajectories are the eval rows of each run's log.jsonl).\n\n"
            + markdown_table(rows, cols, first_column="cap", headers={"l0_frac_image": "L0 / width (%)"})
            + f"\n![L0 vs cap]({doc.relpath(p)}) ![recall vs cap]({doc.relpath(p2)})\n")
    doc.update("sparse-clip-cap", body, command(), heading="Sparse CLIP: L0 vs logit-scale cap (paper Fig. 2c)")


def cmd_expansion(a) -> None:
    base = Recipe.load(SYSTEMS["sparse-clip"])
    exps = [int(e) for e in a.expansions.split(",")]
    rows, series, l0series = {}, {}, {}
    for relu in (False, True):
        arm = "ReLU" if relu else "no ReLU"
        xs, ys, ls = [], [], []
        for e in exps:
            name = f"sparse-clip-x{e}-{'relu' if relu else 'linear'}"
            cfg = _variant(name, a.runs / "configs", expansion=e, extra={"relu": relu})
            run = a.runs / name
            train_run(scaled(base, a.scale, model=cfg, name=name), run, a.reuse)
            ev = _final_eval(run)
            rows[f"x{e} {arm}"] = ev
            xs.append(e)
            ys.append(ev["mean_recall"] * 100)
            ls.append(ev["l0_frac_image"] * 100)
        series[arm], l0series[arm] = (xs, ys), (xs, ls)
    p = line_plot(series, IMG / "sparse-clip-expansion-recall.png", "expansion factor (x128)", "mean R@1/5/10 (%)",
                  "Sparse CLIP: expansion without / with ReLU", logx=True)
    p2 = line_plot(l0series, IMG / "sparse-clip-expansion-l0.png", "expansion factor (x128)", "L0 / width (%)",
                   "Sparse CLIP: active fraction vs expansion", logx=True)
    write_json(a.runs / "expansion.json", {"rows": rows}, run_record(__file__))
    doc = ResultsDoc(DOC)
    cols = ["l0_image", "l0_frac_image", "image_retrieval_recall@1", "image_retrieval_recall@10",
            "text_retrieval_recall@10", "mean_recall"]
    body = (f"Projection width 128 x expansion, with or without the ReLU; cap 50; "
            f"{base.total_steps * a.scale:.0f} steps each; {EVAL_SPEC}. Without ReLU the features are signed, so "
            f"they are scored densely (tokenspace.train.tracking) and every feature counts as active.\n\n"
            + markdown_table(rows, cols, first_column="arm", headers={"l0_frac_image": "L0 / width (%)"})
            + f"\n![recall vs expansion]({doc.relpath(p)}) ![L0 vs expansion]({doc.relpath(p2)})\n")
    doc.update("sparse-clip-expansion", body, command(),
               heading="Sparse CLIP: expansion without / with ReLU (paper Fig. 2a)")


def cmd_features(a) -> None:
    from tokenspace.explain.features import concept_vocabulary, name_model_features

    if a.model:  # an already trained model folder (e.g. tokenspace train --recipe sparse-clip-emoji)
        model, source, out = DualEncoder.from_pretrained(a.model), f"Model `{a.model}`", a.model.parent
    else:
        model = train_run(scaled(Recipe.load(SYSTEMS["sparse-clip"]), a.scale), a.runs / "sparse-clip", True)
        source, out = "The sparse-clip run of the systems table", a.runs / "sparse-clip"
    words = concept_vocabulary(common_limit=a.common_words)  # wordfreq top-N + WordNet (paper Sec. 3.2)
    if a.max_words:
        words = words[: a.max_words]
    grids, records = [], []
    for spec in TEST_SPECS:
        enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
        grids.append(np.asarray(enc.grids))
        records += enc.records
    log(f"naming {len(model.vocab)} features with {len(words)} words and {len(records)} images")
    table = name_model_features(model, words, np.concatenate(grids), [r.id for r in records],
                                [r.text for r in records], top_k=10, agreement_k=5)
    js, _ = table.save(out / "features")
    s = table.summary()
    body = (f"{source}; {len(words)} words (wordfreq's {a.common_words} most common "
            f"English words + first WordNet lemma per synset), ranked by raw (unnormalised) activations as in "
            f"the paper's Fig. 9; {len(records)} test images ({' + '.join(TEST_SPECS)}). A feature is multimodal "
            f"when >= 50% of its 5 top images have a caption containing one of its 5 top words. Named (live) "
            f"features: {s['features_named']:.0f} of {len(model.vocab)}; multimodal: {s['multimodal_frac'] * 100:.1f}%; "
            f"mean agreement {s['agreement_mean']:.3f}. Full table: `{js.relative_to(ROOT) if js.is_relative_to(ROOT) else js}`."
            f"\n\n" + table.to_markdown(max_rows=15))
    ResultsDoc(DOC).update("sparse-clip-features", body, command(), heading="Sparse CLIP: feature naming")


def main(argv=None) -> None:
    global DOC, IMG  # --doc redirects every section (and its plots) for smoke runs
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["systems", "topn", "cap", "expansion", "features"])
    p.add_argument("--scale", type=float, default=0.5, help="multiply every stage's steps (CPU budget)")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "compare")
    p.add_argument("--reuse", action="store_true", help="keep runs whose model/ exists")
    p.add_argument("--systems", default="stair,visualsparta,sparse-clip,dense")
    p.add_argument("--caps", default="10,20,50,100")
    p.add_argument("--expansions", default="1,4,16,32")
    p.add_argument("--common-words", type=int, default=20000)
    p.add_argument("--max-words", type=int, default=0)
    p.add_argument("--model", type=Path, default=None, help="features: name this trained model folder")
    p.add_argument("--doc", type=Path, default=DOC, help="results markdown (smoke runs: a scratch file)")
    a = p.parse_args(argv)
    DOC, IMG = a.doc, (IMG if a.doc == DOC else a.doc.parent / "img")
    a.runs.mkdir(parents=True, exist_ok=True)
    {"systems": cmd_systems, "topn": cmd_topn, "cap": cmd_cap, "expansion": cmd_expansion,
     "features": cmd_features}[a.what](a)


if __name__ == "__main__":
    main()
