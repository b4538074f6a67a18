"""How much of a dense model's recall survives sparsification (models/sparsified.py, recipe sparsify-dense).

    nice -n 10 python -m experiments.run sparsify_dense                       # lambdas on the val splits
    nice -n 10 python -m experiments.run sparsify_dense --set 'sparsify.lambdas=[3e-3]' --set eval.test=true

The dense twin (recipe dense-emoji) is trained first when ``--dense`` has no model (a few minutes; `make
demo` trains one at runs/demo/dense-emoji). Each lambda (both sides' FLOPs weight) trains the recipe
sparsify-dense on the dense twin's own training data; every run folder that already holds a model is
reused, so a second call only evaluates. Rows: the dense twin and each sparsified head on the validation
splits (emoji:val, openclipart:val: choose lambda here); with ``--test`` the dense twin and the *last*
lambda given on emoji:test and openclipart:test:300. Recall is the trainer's (ties against the query),
nnz the mean active tokens per image / text row. Examples: the top tokens of three emoji:test images and
their captions, untrained (the dense model's own lexicon scores, the head's start) and trained, and
STAIR's Table 5 on emoji:test (the concept's top-K rank among all tokens) for the dense twin and the head.
``--start`` adds the head's start on val: the dense model's lexicon scores calibrated on one training
batch, no step taken (how far the words alone go).
Writes benchmarks/results/sparsify_dense.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.reproduce_sections.interpretability import TOKEN_KS, backbone_reference
from benchmarks.reproduce_sections.labels import class_indices, clean_classname, concept
from experiments import config
from tokenspace import atomic, pipeline
from tokenspace.eval import InterpretabilityEvaluator
from tokenspace.models.lexicon import vocabulary_embeddings
from tokenspace.models.registry import build_model, load
from tokenspace.train.recipe import Recipe, model_config

ROOT = Path(__file__).resolve().parent.parent
JSON_OUT = ROOT / "benchmarks" / "results" / "sparsify_dense.json"
# the recipe and the splits, set by main from the TOML ([sparsify] recipe, [eval] val and test_splits)
RECIPE = "sparsify-dense"
VAL = ["emoji:val", "openclipart:val"]
TEST = ["emoji:test", "openclipart:test:300"]
KEYS = ["image_retrieval_recall@1", "image_retrieval_recall@10", "text_retrieval_recall@1",
        "text_retrieval_recall@10", "mean_recall", "nnz_image", "nnz_text"]


def log(msg: str) -> None:
    print(f"[sparsify] {msg}", file=sys.stderr, flush=True)


def dense_model(path: Path):
    """The dense twin's folder, trained with recipe dense-emoji first when it is missing."""
    if not (path / "model.safetensors").exists():
        log(f"training the dense twin into {path.parent} (recipe dense-emoji)")
        pipeline.train("dense-emoji", path.parent, resume=True, progress=False)
    return load(path)


def sparsify(dense: Path, lam: float, steps: int, runs: Path) -> tuple[object, float | None]:
    run = runs / f"lambda-{lam:g}-steps-{steps}"
    if (run / "model" / "model.safetensors").exists():
        log(f"reusing {run}")
        return load(run / "model"), None
    base = Recipe.load(RECIPE)
    stages = [{**s.__dict__, "steps": steps, "warmup_steps": min(s.warmup_steps, steps)} for s in base.stages]
    recipe = Recipe.load(RECIPE, model={"extra": {"dense": str(dense)}}, stages=stages, name=run.name,
                         loss={"lambda": lam, "flops_warmup": base.flops_warmup}, data={**base.data, "eval": []})
    t0 = time.time()
    model = pipeline.train(recipe, run, resume=True, progress=False)
    log(f"lambda {lam:g}: {steps} steps in {time.time() - t0:.0f}s")
    return model, time.time() - t0


def calibrated_start(dense: Path, batch: int = 64, seed: int = 0):
    """The head before any step: the dense model's lexicon scores, calibrated on one batch of training
    pairs as the trainer's first step does (init_active of the tokens active), never trained."""
    model = build_model(model_config(Recipe.load(RECIPE, model={"extra": {"dense": str(dense)}}).model))
    enc = pipeline.image_grids(model, pipeline.load_data(Recipe.load(RECIPE).data["train"]), progress=False)
    pick = np.sort(np.random.default_rng(seed).choice(len(enc.records), batch, replace=False))
    model.train()
    with torch.no_grad():
        model.image_embed(torch.from_numpy(np.asarray(enc.grids[pick], np.float32)))
        model.text_embed(*model.tokenize([enc.records[i].text for i in pick]))
    return model.eval()


def rows(model, specs: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for spec, m in pipeline.evaluate(model, specs, progress=False).items():
        out[spec] = {k: round(float(m[k]), 4) for k in KEYS if k in m}
        log(f"  {spec}: " + ", ".join(f"{k} {v}" for k, v in out[spec].items()))
    return out


def token_accuracy(model, spec: str = "emoji:test") -> dict[str, float]:
    """STAIR Table 5: top-K accuracy of each image's concept (its caption before " — ") among all the
    vocabulary's tokens; for the dense twin each token scores the cosine of the image with the token's
    text embedding (the paper's CLIP arm), for the sparsified head the image vector itself."""
    enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
    classes, labels = class_indices([clean_classname(concept(r)) for r in enc.records])
    ev = InterpretabilityEvaluator(classes, labels, token_ids=model.tokenizer.token_ids, ks=TOKEN_KS,
                                   exclude_ids=model.tokenizer.vocab.special_ids)
    img = model.encode_image_grids(enc.grids)
    m = (ev(img, token_emb=vocabulary_embeddings(model)) if not model.sparse
         else ev(img, reference=backbone_reference(enc)))
    out = {k: round(float(v), 4) for k, v in m.items() if k.startswith("token_acc")}
    log(f"  {spec} token accuracy: {out}")
    return out


def examples(dense: Path, trained, n: int = 3, top_k: int = 8) -> list[dict]:
    """Top tokens of n emoji:test images and their captions: at the head's start (the dense model's
    lexicon scores, uncalibrated) and after training."""
    untrained = build_model(model_config({"config": "sparsified", "extra": {"dense": str(dense)}}))
    enc = pipeline.image_grids(trained, pipeline.load_split("emoji:test"), progress=False)
    picks = [round(i * (len(enc.records) - 1) / max(1, n - 1)) for i in range(n)]
    grids, texts = enc.grids[picks], [enc.records[i].text for i in picks]
    out = [{"id": enc.records[i].id, "caption": texts[j]} for j, i in enumerate(picks)]

    def top(model):
        img, txt = model.encode_image_grids(grids), model.encode_text(texts)
        return model.decode(img, top_k=top_k), model.decode(txt, top_k=top_k)

    for name, model in (("start", untrained), ("trained", trained)):
        img, txt = top(model)
        for row, i_toks, t_toks in zip(out, img, txt):
            row[f"image_{name}"] = [(t, round(w, 3)) for t, w in i_toks]
            row[f"text_{name}"] = [(t, round(w, 3)) for t, w in t_toks]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run, a = config.start("sparsify_dense", argv, p)
    global RECIPE, VAL, TEST, JSON_OUT
    RECIPE = run["sparsify"]["recipe"]
    a.dense = ROOT / run["sparsify"]["dense"]  # the dense twin's folder
    a.lambdas = run["sparsify"]["lambdas"]  # FLOPs weights (both sides), one run each
    a.steps = run["sparsify"]["steps"]  # training steps per run (the recipe has 300)
    VAL, TEST = run["eval"]["val"], run["eval"]["test_splits"]
    a.start = run["eval"]["start"]  # also the untrained head (calibrated lexicon scores) on val
    a.test = run["eval"]["test"]  # also the dense twin and the last lambda on test
    a.runs = ROOT / run["output"]["runs"]  # where the sparsified runs go
    JSON_OUT = ROOT / run["output"]["json"]
    run.ready()
    lambdas = [float(x) for x in a.lambdas]
    before = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else {}
    dense = dense_model(a.dense)
    result = {**before, "dense": str(a.dense.relative_to(ROOT) if a.dense.is_relative_to(ROOT) else a.dense),
              "recipe": RECIPE, "steps": a.steps}
    val = result.setdefault("val", {})
    log("dense twin, val")
    val["dense"] = rows(dense, VAL)
    if a.start:
        log("the head's start (calibrated, untrained), val")
        val["start: lexicon scores, calibrated, 0 steps"] = rows(calibrated_start(a.dense), VAL)
    model = None
    for lam in lambdas:
        model, seconds = sparsify(a.dense, lam, a.steps, a.runs)
        log(f"sparsified lambda {lam:g}, val")
        key = f"sparsified lambda={lam:g} steps={a.steps}"
        val[key] = rows(model, VAL)
        if seconds is not None:
            result.setdefault("train_seconds", {})[key] = round(seconds)
    if a.test:
        log("test: the dense twin and the last lambda")
        result["test"] = {"dense": rows(dense, TEST), f"sparsified lambda={lambdas[-1]:g} steps={a.steps}": rows(model, TEST)}
        result["examples"] = examples(a.dense, model)
        result["token_accuracy emoji:test"] = {"dense": token_accuracy(dense),
                                               f"sparsified lambda={lambdas[-1]:g} steps={a.steps}": token_accuracy(model)}
    command = run.command()
    result["commands"] = [c for c in result.get("commands", []) if c != command] + [command]  # every call so far
    result.pop("command", None)  # the older single-command key
    atomic.write_text(JSON_OUT, json.dumps(result, indent=1) + "\n")
    log(f"wrote {JSON_OUT}")


if __name__ == "__main__":
    main()
