"""Sparse CLIP's Fig. 2b at small scale: ReLU (+ cap) vs L1 penalty vs TopK activation, recall vs L0.

    nice -n 10 python -m experiments.run sparse_clip_ablation                      # ~4 runs, CPU budget
    nice -n 10 python -m experiments.run sparse_clip_ablation --set arms.steps=300 --set 'arms.l1=[0.003,0.01,0.03]'

Every arm is the sparse-clip-emoji recipe (EfficientNet-Lite0 grids + SPLADE-tiny, 128 x 32 = 4,096
features, cap 50, batch 64, AdamW 1e-3) with the step count set by ``--steps`` and one change:
  relu      the recipe itself: ReLU after the projection (the paper's method)
  topk-K    TopK activation (keep each row's K largest pre-activations, then ReLU; Gao et al. 2024). K
            defaults to the ReLU arm's final image L0 (the paper's K = 512 of 16,384); the ReLU zeroes
            negative survivors, so the realised L0 is lower: give a larger K with --topk to match
  l1-w      ReLU + an L1 penalty w * mean ||z / ||z||_2||_1 on both sides (train.losses + the model's
            regularization(); on normalised rows, since the cosine loss ignores a row's scale)
The paper trains ViT-B/32 from scratch on 15M pairs and plots ImageNet zero-shot accuracy; here the
heads train on frozen features for a few hundred steps and the accuracy axis is emoji:test retrieval
(mean of R@1/5/10 both ways, ties against the query). L0 = mean active features per row on emoji:test;
"first-eval L0" is the L0 at the first evaluation (step ``eval_every``), the paper's "from training
onset". Writes benchmarks/results/sparse_clip_ablation.json and the `sparse-clip-ablation` section of
docs/results.md.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments import config
from tokenspace import pipeline
from tokenspace.eval import ResultsDoc, markdown_table
from tokenspace.eval.plots import scatter_plot
from tokenspace.models.config import ModelConfig
from tokenspace.train.recipe import Recipe
from tokenspace.train.tracking import sparsity_metrics

ROOT = Path(__file__).resolve().parent.parent
BASE = "sparse-clip-emoji"  # the recipe and model config each arm changes: [arms] recipe in the TOML
EVAL_SPEC = "emoji:test"  # [arms] eval; both set by main from the TOML


def log(msg: str) -> None:
    print(f"[ablation] {msg}", file=sys.stderr, flush=True)


def recipe_for(name: str, extra: dict, steps: int, eval_every: int, runs: Path) -> Recipe:
    """The base recipe at ``steps`` steps with the model config's ``extra`` changed (a config file per arm)."""
    cfg = ModelConfig.load(BASE).to_dict()
    cfg.update(name=name, extra={**cfg["extra"], **extra})
    path = runs / "configs" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    ModelConfig.from_dict(cfg).save(path)
    base = Recipe.load(BASE)
    stages = [replace(s, steps=steps, warmup_steps=min(s.warmup_steps, steps)) for s in base.stages]
    return Recipe.load(BASE, name=name, model=str(path), stages=[s.__dict__ for s in stages], eval_every=eval_every)


def measure(model) -> dict[str, float]:
    """Retrieval recall (ties against the query) and L0 of both sides on the eval split."""
    enc = pipeline.image_grids(model, pipeline.load_data([EVAL_SPEC]), progress=False)
    out = pipeline.evaluate_retrieval(model, enc)
    texts, _ = pipeline.texts_and_targets(enc.records)
    img, txt = model.encode_image_grids(enc.grids), model.encode_text(texts)
    dense = [x.to_dense() if hasattr(x, "to_dense") else x for x in (img, txt)]
    out.update(sparsity_metrics(*dense))
    out["mean_recall"] = sum(out[f"{d}_retrieval_recall@{k}"] for d in ("image", "text") for k in (1, 5, 10)) / 6
    return out


def first_eval_l0(run: Path) -> float | None:
    """Image L0 (nnz_image of the trainer's eval rows) at the first evaluation of the run."""
    from tokenspace.train.tracking import eval_history

    hist = eval_history(run / "log.jsonl")
    return float(hist[0]["nnz_image"]) if hist and "nnz_image" in hist[0] else None


def train_arm(name: str, extra: dict, a, before: dict) -> dict:
    """Train (or with --reuse load) one arm and measure it; ``before``: the previous JSON's arms, whose
    training times a reused arm keeps."""
    run = a.runs / name
    seconds = None
    if a.reuse and (run / "model" / "model.safetensors").exists():
        from tokenspace.models.dual import DualEncoder

        log(f"reusing {run}")
        model = DualEncoder.from_pretrained(run / "model")
        seconds = before.get(name, {}).get("seconds")
    else:
        shutil.rmtree(run, ignore_errors=True)  # retrained from scratch: the trainer refuses to train over a run
        t0 = time.time()
        model = pipeline.train(recipe_for(name, extra, a.steps, a.eval_every, a.runs), run, progress=False)
        seconds = time.time() - t0  # the first arm also builds the backbone grid cache when it is missing
        log(f"{name}: trained {a.steps} steps in {seconds:.0f}s")
    row = measure(model)
    row["seconds"] = seconds
    row["first_eval_l0_image"] = first_eval_l0(run)
    row["extra"] = extra
    log(f"{name}: L0 image {row['l0_image']:.1f}, mean recall {100 * row['mean_recall']:.1f}")
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reuse", action="store_true", help="keep arms whose model/ exists")
    run, a = config.start("sparse_clip_ablation", argv, p)
    global BASE, EVAL_SPEC
    BASE, EVAL_SPEC = run["arms"]["recipe"], run["arms"]["eval"]
    a.steps = run["arms"]["steps"]  # per arm (the recipe has 300)
    a.eval_every = run["arms"]["eval_every"]
    a.l1 = run["arms"]["l1"]  # L1 weights, one arm each
    a.topk = run["arms"]["topk"]  # TopK values; [] = the ReLU arm's final image L0
    a.runs = ROOT / run["output"]["runs"]
    a.doc, a.json = ROOT / run["output"]["doc"], ROOT / run["output"]["json"]
    run.ready()
    before = json.loads(a.json.read_text()).get("arms", {}) if a.reuse and a.json.exists() else {}
    rows = {"relu": train_arm("relu", {}, a, before)}
    ks = [int(k) for k in a.topk] if a.topk else [max(1, round(rows["relu"]["l0_image"]))]
    for k in ks:
        rows[f"topk-{k}"] = train_arm(f"topk-{k}", {"topk": k}, a, before)
    for w in (float(x) for x in a.l1):
        rows[f"l1-{w:g}"] = train_arm(f"l1-{w:g}", {"l1": w}, a, before)
    minutes = sum(r["seconds"] or 0 for r in rows.values()) / 60  # training time (reused arms: as recorded)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"steps": a.steps, "minutes": minutes, "arms": rows}, indent=1))

    doc = ResultsDoc(a.doc)
    png = scatter_plot([(n, r["l0_image"], 100 * r["mean_recall"]) for n, r in rows.items()],
                       a.doc.parent / "img" / "sparse-clip-ablation.png", "L0 (image, active of 4,096)",
                       "mean R@1/5/10 (%)", "Sparse CLIP: ReLU vs TopK vs L1 (emoji:test)")
    cols = ["first_eval_l0_image", "l0_image", "l0_text", "image_retrieval_recall@1", "image_retrieval_recall@10",
            "text_retrieval_recall@1", "text_retrieval_recall@10", "mean_recall"]
    heads = {"first_eval_l0_image": f"L0 image at step {a.eval_every}", "l0_image": "L0 image (final)",
             "l0_text": "L0 text (final)", "image_retrieval_recall@1": "T→I R@1 (%)",
             "image_retrieval_recall@10": "T→I R@10 (%)", "text_retrieval_recall@1": "I→T R@1 (%)",
             "text_retrieval_recall@10": "I→T R@10 (%)", "mean_recall": "mean recall (%)"}
    per_arm = ", ".join(f"{n} {r['seconds'] / 60:.0f}" for n, r in rows.items() if r.get("seconds") is not None)
    body = (f"**Small-scale run** ({a.steps} steps per arm, {len(rows)} arms, one seed; {minutes:.0f} min in all on a "
            f"shared, loaded 2-core CPU, per arm in min: {per_arm or 'not recorded'}; the first arm's time includes "
            "building the backbone grid cache when it was missing): the sparse-clip-emoji recipe (frozen EfficientNet-Lite0 grids, SPLADE-tiny, 4,096 "
            "features, cap 50) with one change per arm. relu = the recipe (the paper's method); topk-K = TopK "
            "activation then ReLU (K = the ReLU arm's final image L0 by default; the ReLU zeroes negative "
            "survivors of the top-K, so the realised L0 is below K and a larger K is needed to match); l1-w = "
            "ReLU + w x mean L1 of the L2-normalised rows (both sides). Matched L0 = compare arms at similar "
            "final image L0 (the plot shows every arm). The paper's Fig. 2b trains ViT-B/32 from scratch on 15M "
            "pairs and plots ImageNet zero-shot accuracy; here only the heads train, and accuracy is "
            f"{EVAL_SPEC} retrieval (ties count against the query).\n\n"
            + markdown_table(rows, cols, first_column="arm", headers=heads)
            + f"\n![recall vs L0]({doc.relpath(png)})\n")
    cmd = run.command() + (" -- --reuse" if a.reuse else "")
    doc.update("sparse-clip-ablation", body, cmd,
               heading="Sparse CLIP: ReLU vs L1 vs TopK at matched L0 (paper Fig. 2b, small scale)")


if __name__ == "__main__":
    main()
