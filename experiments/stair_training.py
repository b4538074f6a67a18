"""Training levers for STAIR, measured on emoji:val (tuning split; emoji:test is not looked at).

Each variant is a recipe plus overrides, trained by ``pipeline.train`` (cached features, the trainer's
eval on emoji:val at every stage end); the row is the final eval, the mean step time per stage from
log.jsonl, and the vector sizes. Results accumulate in a JSON file (a rerun skips finished variants),
and the markdown table is printed.

    python -m experiments.run stair_training --set 'train.variants=["base","head","last1"]'
    python -m experiments.run stair_training --set 'sweep.batches=[64,256,1024]'   # step time vs batch only
    # distillation from the dense twin: the teacher first, then the students, two seeds
    python -m experiments.run stair_training --set output.json=benchmarks/results/stair_training_distill.json \
        --set 'train.variants=["dense","base","distill3"]'     # then ["base","distill3"] with train.seed=1
    # the wider tied space (all-MiniLM-L6-v2; `tokenspace assets install all-minilm-l6-v2`) beside SPLADE-tiny
    python -m experiments.run stair_training --set train.scale=0.3333333 \
        --set output.json=benchmarks/results/stair_training_minilm.json \
        --set 'train.variants=["split","split-minilm","split-minilm-tlr0.1","dense","dense-minilm"]'

Step times on a shared 2-core CPU are indicative only (other jobs run beside).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

from experiments import config

# the data and the pruned eval's sizes: set by main from the TOML ([train] data and eval, [extras])
DATA = {"train": ["emoji:train", "openclipart:train:2000"], "eval": ["emoji:val"]}
MINILM = {"type": "bert-mlm", "weights": "asset:all-minilm-l6-v2"}
TEACHER = "{dense-s0}"  # the dense variant's seed-0 run folder at the same scale (run_variant fills it in)

# name -> (recipe, overrides, what it is)
VARIANTS = {
    "base": ("stair-emoji", {}, "stair-emoji as is (tuned: revive 0.1; stages 2:1:9 in the dense budget; frozen tower)"),
    "head": ("stair-emoji", {"train_image_from": "head"}, "base + the tower's conv head (1x1 320->1280 + BN) trained"),
    "last1": ("stair-emoji", {"train_image_from": -1}, "base + block 15 (stage 7) + conv head trained"),
    "last2": ("stair-emoji", {"train_image_from": -2}, "base + blocks 14-15 + conv head trained"),
    "last5": ("stair-emoji", {"train_image_from": -5}, "base + blocks 11-15 (stages 6-7) + conv head trained"),
    "refbatch": ("stair-emoji", {"loss": {"lambda": 1e-3, "flops_warmup": 100, "flops_warmup_per_stage": False,
                                          "flops_reference_batch": 16384}},
                 "base + FLOPs as at batch 16,384 (flops_reference_batch; same lambda)"),
    "perstage": ("stair-emoji", {"loss": {"lambda": 1e-3, "flops_warmup": 100, "flops_warmup_per_stage": True}},
                 "base + lambda's quadratic warm-up restarting in every stage (the paper's reading)"),
    "split": ("stair-emoji-split", {}, "tuned STAIR, paper compute split (stage 3 = the dense budget, stages 1+2 on top)"),
    "split-last1": ("stair-emoji-split", {"train_image_from": -1}, "split + block 15 + conv head trained"),
    "paper": ("stair-emoji-paper", {}, "paper-faithful STAIR (stair-emoji-paper): eq. 4-5 head, paper split 1:1:2, "
                                       "lr 1e-3/1e-3/1e-4, lambda ramp per stage"),
    "paper-equal": ("stair-emoji-paper", {"plan": {"dense_steps": 300, "split": "equal", "ratio": [1, 1, 2], "lr": 1e-3,
                                                   "stage3_lr": 1e-4, "warmup_steps": 5}},
                    "paper-faithful STAIR, stages 1:1:2 in the dense budget"),
    # the wider tied space: all-MiniLM-L6-v2's 384-d word embeddings instead of SPLADE-tiny's 128-d;
    # its wheel has no MLM head, so the text TRANSFORM and bias start fresh (SPLADE-tiny's are trained)
    "split-minilm": ("stair-emoji-split", {"model": {"text_tower": MINILM}},
                     "split with all-MiniLM-L6-v2 as the text tower (384-d tied space; fresh MLM head)"),
    "split-minilm-tlr0.1": ("stair-emoji-split", {"model": {"text_tower": MINILM}, "text_lr_scale": 0.1},
                            "split-minilm with the text tower at 0.1x the lr (a 6-layer pretrained encoder)"),
    # with a fresh head over 384 dims the vectors come out ~20x denser at split's lambda: more FLOPs weight
    **{f"split-minilm-tlr0.1-l{lam:g}": (
        "stair-emoji-split", {"model": {"text_tower": MINILM}, "text_lr_scale": 0.1,
                              "loss": {"lambda": lam, "flops_warmup": 100, "flops_warmup_per_stage": False}},
        f"split-minilm-tlr0.1 with lambda {lam:g} (split's is 1e-3)") for lam in (1e-2, 3e-2)},
    "dense-minilm": ("dense-emoji", {"model": {"text_tower": MINILM}},
                     "dense with all-MiniLM-L6-v2 as the text tower (mean-pooled, projected to 512)"),
    "dense": ("dense-emoji", {}, "dense-emoji: the dense baseline, same towers, data and budget"),
    "dense-last1": ("dense-emoji", {"train_image_from": -1}, "dense + block 15 + conv head trained"),
    # distillation (a labelled deviation from STAIR) from the "dense" variant's seed-0 run
    # at the same scale (run it first): mu x KL of the in-batch softmax, both directions (train/distill.py)
    **{f"distill{mu:g}": ("stair-emoji", {"loss": {"lambda": 1e-3, "flops_warmup": 100, "flops_warmup_per_stage": False,
                                                   "distill": mu, "distill_teacher": TEACHER}},
                          f"base + distillation from the dense twin (dense, seed 0), weight {mu:g}") for mu in (1, 3)},
}


def stage_times(log_path: Path) -> dict[str, float]:
    """Mean seconds per step of each stage (the log's ``time`` is seconds since the stage started)."""
    last: dict[str, tuple[int, float]] = {}
    count: dict[str, int] = {}
    for line in log_path.read_text().splitlines():
        row = json.loads(line)
        if "time" in row:
            count[row["stage"]] = count.get(row["stage"], 0) + 1
            last[row["stage"]] = row["time"]
    return {s: last[s] / count[s] for s in last}


def scaled(recipe, scale: float):
    """The recipe with every step count (stages, lr and FLOPs warm-ups) times ``scale``: a like-with-like
    comparison at a fraction of the budget when the machine is too busy for the full one."""
    from dataclasses import replace

    if scale == 1:
        return recipe
    n = lambda x: max(1, round(x * scale)) if x else 0  # noqa: E731
    d = recipe.to_dict()
    if d.get("plan"):
        d["plan"] = {**d["plan"], "dense_steps": n(d["plan"]["dense_steps"]), "warmup_steps": n(d["plan"]["warmup_steps"])}
        d["stages"] = []
    else:
        d["stages"] = [{**s, "steps": n(s["steps"]), "warmup_steps": n(s["warmup_steps"])} for s in d["stages"]]
    d["flops_warmup"] = n(d["flops_warmup"])
    return replace(type(recipe).from_dict(d), name=f"{recipe.name}@{scale:g}")


def run_variant(name: str, out_root: Path, home=None, seed: int = 0, scale: float = 1.0) -> dict:
    from tokenspace import pipeline
    from tokenspace.train.recipe import Recipe

    recipe_name, over, what = VARIANTS[name]
    if over.get("loss", {}).get("distill_teacher") == TEACHER:
        teacher = out_root / f"dense-s0-x{scale:g}" / "model"
        over = {**over, "loss": {**over["loss"], "distill_teacher": str(teacher)}}
    over = {**over, "data": DATA, "seed": seed}
    recipe = scaled(Recipe.load(recipe_name, **over), scale)
    out = out_root / f"{name}-s{seed}-x{scale:g}"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time: the trainer refuses to train over one
    t0 = time.time()
    pipeline.train(recipe, out, home=home, progress=False)
    wall = time.time() - t0
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    ev = [r for r in rows if "eval" in r][-1]["eval"]
    r1 = lambda k: round(100 * ev[k], 1)  # noqa: E731
    keys = {f"{d}_r{k}": f"{m}_retrieval_recall@{k}" for d, m in (("t2i", "image"), ("i2t", "text")) for k in (1, 5, 10)}
    ids = "\n".join(r.id for spec in (DATA["train"], DATA["eval"]) for r in pipeline.load_data(spec, home))
    rec = {"variant": name, "seed": seed, "scale": scale, "data_sha1": hashlib.sha1(ids.encode()).hexdigest()[:12], "recipe": recipe_name, "overrides": {k: v for k, v in over.items() if k != "data"},
           "what": what, "stages": [[s.name, s.steps, s.lr] for s in recipe.stages], "steps": recipe.total_steps,
           "wall_s": round(wall, 1), "sec_per_step": {k: round(v, 3) for k, v in stage_times(out / "log.jsonl").items()}}
    for k, src in keys.items():
        if src in ev:
            rec[k] = r1(src)
    rec["mean_recall"] = round(sum(rec[k] for k in keys if k in rec) / len([k for k in keys if k in rec]), 1)
    for k in ("nnz_image", "nnz_text"):
        if k in ev:
            rec[k] = round(ev[k], 1)
    if recipe_name.startswith("stair"):
        rec["pruned"] = pruned_eval(out / "model", home)
    return rec


PRUNED = (100, 40)  # release v2's encode sizes: denser vectors (distillation) compared at equal size too


def pruned_eval(model_dir: Path, home=None) -> dict:
    """The trained model's eval-split recall with each image / text row cut to PRUNED tokens."""
    import tokenspace
    from tokenspace import pipeline

    model = tokenspace.load(model_dir)
    model.image_top_n, model.text_top_n = PRUNED
    ev = pipeline.evaluate(model, DATA["eval"], home=home, progress=False)[DATA["eval"][0]]
    return {"top_n": list(PRUNED), "t2i_r1": round(100 * ev["image_retrieval_recall@1"], 1),
            "mean_recall": round(100 * ev["mean_recall"], 1),
            "nnz_image": round(ev["nnz_image"], 1), "nnz_text": round(ev["nnz_text"], 1)}


def batch_sweep(batches: list[int], steps: int, variants: list[str], home=None) -> list[dict]:
    """Seconds per joint-stage step vs batch size (cached features; no eval)."""
    import tempfile

    from tokenspace import pipeline
    from tokenspace.train.recipe import Recipe
    from tokenspace.train.trainer import Trainer

    out = []
    for name in variants:
        recipe_name, over, _ = VARIANTS[name]
        for b in batches:
            recipe = Recipe.load(recipe_name, **{**over, "batch_size": b,
                                                 "stages": [{"name": "joint", "steps": steps, "lr": 1e-3}]})
            model = pipeline.build_seeded(recipe)
            enc = pipeline.image_grids(model, pipeline.load_data(DATA["train"], home), home, False,
                                       at=pipeline.trunk_block(recipe, model))
            data = pipeline.caption_pairs(enc.grids, enc.records)
            with tempfile.TemporaryDirectory() as tmp:
                Trainer(model, recipe, data, tmp, progress=False).fit()
                rows = [json.loads(x) for x in (Path(tmp) / "log.jsonl").read_text().splitlines() if '"time"' in x]
            # the first 2 steps warm caches and allocators up; the rest are timed
            per = (rows[-1]["time"] - rows[1]["time"]) / (len(rows) - 2)
            out.append({"variant": name, "batch": b, "sec_per_step": round(per, 3),
                        "pairs_per_s": round(b / per, 1)})
            print(json.dumps(out[-1]), flush=True)
    return out


def tower_costs(image_size: int = 128) -> list[dict]:
    """What each train_image_from option trains of EfficientNet-Lite0 (parameters, multiply-adds per
    image of its conv layers) and what its cache holds per image: static counts, no timing."""
    import torch

    from tokenspace.models.towers import build_image_tower

    t = build_image_tower({"type": "efficientnet-lite0", "weights": None, "image_size": image_size}).eval()
    macs: dict[str, int] = {}

    def hook(name):
        def count(m, _inp, out):
            macs[name] = out.numel() * m.kernel_size[0] * m.kernel_size[1] * (m.in_channels // m.groups)
        return count

    for name, m in t.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook(name))
    x = torch.zeros(1, 3, image_size, image_size)
    with torch.no_grad():
        t(x)
    total, n_params = sum(macs.values()), sum(p.numel() for p in t.parameters())
    rows = []
    for option, at in (("head", 16), (-1, 15), (-2, 14), (-5, 11)):
        top = sum(v for k, v in macs.items() if k.startswith("net._conv_head")
                  or any(k.startswith(f"net._blocks.{b}.") for b in range(at, t.n_blocks)))
        with torch.no_grad():
            cached = t.trunk(x, at).shape[1:]
        rows.append({"train_image_from": option, "blocks": f"{at}-{t.n_blocks - 1} + head" if at < 16 else "head",
                     "params_M": round(sum(p.numel() for p in t.top_parameters(at)) / 1e6, 2),
                     "params_share": round(sum(p.numel() for p in t.top_parameters(at)) / n_params, 3),
                     "macs_M": round(top / 1e6, 1), "macs_share": round(top / total, 3),
                     "cached_per_image": list(cached)})
    return rows


def table(rows: list[dict]) -> str:
    head = ("| variant | what | steps | T→I R@1 | T→I R@10 | I→T R@1 | I→T R@10 | mean R | nnz img | nnz txt "
            f"| at top {PRUNED[0]} / {PRUNED[1]}: T→I R@1, mean R | s/step (stage 3) | wall (min) |")
    lines = [head, "|" + "---|" * 2 + "---:|" * 11]
    for r in rows:
        last = list(r["sec_per_step"].values())[-1]
        p = r.get("pruned")
        at = f"{p['t2i_r1']}, {p['mean_recall']}" if p else "—"
        lines.append(f"| {r['variant']} (seed {r['seed']}, x{r.get('scale', 1):g}) | {r['what']} | {r['steps']} | {r.get('t2i_r1')} | "
                     f"{r.get('t2i_r10')} | {r.get('i2t_r1')} | {r.get('i2t_r10')} | {r['mean_recall']} | "
                     f"{r.get('nnz_image', '—')} | {r.get('nnz_text', '—')} | {at} | {last} | {r['wall_s'] / 60:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    global DATA, PRUNED
    run, _ = config.start("stair_training", argv)
    tr, sw = run["train"], run["sweep"]
    args = SimpleNamespace(
        variants=tr["variants"], seed=tr["seed"],
        scale=tr["scale"],  # multiplies every step count (like with like)
        home=tr["home"] or None,
        tower_costs=run["extras"]["tower_costs"],  # static parameter / multiply-add counts
        pruned=run["extras"]["pruned"],  # add the eval at pruned_top_n to finished runs' rows
        batch_sweep=sw["batches"], sweep_variants=sw["variants"],
        steps=sw["steps"],  # per batch size in the sweep
        out=run["output"]["json"], runs=run["output"]["runs"])
    DATA = {"train": tr["data"], "eval": tr["eval"]}
    PRUNED = tuple(run["extras"]["pruned_top_n"])
    unknown = [v for v in [*args.variants, *args.sweep_variants] if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"variants {unknown}: not among {', '.join(sorted(VARIANTS))}")
    run.ready()
    path = Path(args.out)
    doc = json.loads(path.read_text()) if path.exists() else {"runs": [], "batch_sweep": []}
    done = {(r["variant"], r["seed"], r.get("scale", 1.0)) for r in doc["runs"]}
    for name in args.variants:
        if (name, args.seed, args.scale) in done:
            print(f"{name} seed {args.seed}: done already", flush=True)
            continue
        rec = run_variant(name, Path(args.runs), args.home, args.seed, args.scale)
        rec["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        doc["runs"].append(rec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
        print(json.dumps(rec), flush=True)
    if args.pruned:  # rows trained before the pruned eval existed, whose run folder is still here
        for r in doc["runs"]:
            folder = Path(args.runs) / f"{r['variant']}-s{r['seed']}-x{r.get('scale', 1.0):g}" / "model"
            if "pruned" not in r and r["recipe"].startswith("stair") and folder.exists():
                r["pruned"] = pruned_eval(folder, args.home)
                path.write_text(json.dumps(doc, indent=1))
                print(r["variant"], r["seed"], r["pruned"], flush=True)
    if args.tower_costs:
        doc["tower_costs"] = tower_costs()
        path.write_text(json.dumps(doc, indent=1))
        print(json.dumps(doc["tower_costs"], indent=1))
    if args.batch_sweep:
        doc["batch_sweep"] += batch_sweep(args.batch_sweep, args.steps, args.sweep_variants, args.home)
        path.write_text(json.dumps(doc, indent=1))
    print(table(doc["runs"]))


if __name__ == "__main__":
    main()
