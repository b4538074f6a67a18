"""The paper configs on paper: parameters, FLOPs per image-text pair, and the GPU-days of each paper recipe.

    python -m benchmarks.paper_costs --util 0.4 --out benchmarks/results/paper_costs.json

Pure arithmetic, no training: each model is built on the ``meta`` device (shapes, no memory, random
init; a synthetic vocabulary of the paper's 30,522 entries stands in for the BERT asset) and
- parameters are counted from it;
- forward FLOPs per pair are counted by ``torch.utils.flop_counter.FlopCounterMode`` per part (image
  tower, image head, text tower, text head) at batch 1, 2 FLOPs per multiply-add, and checked against
  the transformer formula  layers x (12 n d^2 + 2 n^2 d)  multiply-adds (n tokens, d width, 4d MLP);
- training FLOPs per pair are 3x the forward of the parts that learn (forward + backward of inputs and
  weights), 1x of frozen parts that still run (STAIR stage 2's image side), 0 of cached ones
  (VisualSparta's backbone grids: computed once per image, not per step);
- the contrastive loss: every rank all-gathers the global batch B and computes its b = B / GPUs rows of
  the B x B similarity of D-wide embeddings in both directions, [b, B] + [B, b] (train/distributed.py):
  2 x 2 b B D FLOPs forward, 3x with backward, per GPU;
- GPU-days = total FLOPs / (peak dense bf16 FLOP/s x utilisation) / 86,400. Peaks: A100 SXM 312 TFLOP/s,
  H100 SXM 989 TFLOP/s (NVIDIA datasheets, dense bf16 tensor cores); the utilisation (model FLOPs
  utilisation) is a stated assumption, ``--util``.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]

# config, recipe, GPUs the paper (or the recipe's comment) trains it on
PAPER = [("stair-paper", "stair-paper", 64), ("sparse-clip-vitb32", "sparse-clip-vitb32", 64),
         ("visualsparta-paper", "visualsparta-paper", 4)]
PEAK = {"A100": 312e12, "H100": 989e12}  # dense bf16 FLOP/s, SXM parts
VOCAB_SIZE = 30522


def synthetic_vocab(size: int = VOCAB_SIZE, words=()):
    """A WordPiece vocabulary of ``size`` entries: the special tokens, ``words``, then fillers."""
    from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary

    head = list(SPECIAL_TOKENS) + [w for w in words if w not in SPECIAL_TOKENS]
    return Vocabulary(head + [f"tok{i}" for i in range(size - len(head))], name=f"synthetic-{size}")


def random_init(config):
    """The config without pretrained weights (random init of the same shapes)."""
    from tokenspace.models.config import ModelConfig

    def bare(tower: dict) -> dict:
        tower = {k: v for k, v in tower.items() if k != "pretrained"}
        if "weights" in tower:  # None, not dropped: a tower's default may be its pretrained asset
            tower["weights"] = None
        return tower

    d = config.to_dict()
    d["image_tower"], d["text_tower"] = bare(d["image_tower"]), bare(d["text_tower"])
    return ModelConfig.from_dict(d)


def build_meta(name: str):
    import torch

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model

    cfg = random_init(ModelConfig.load(name))
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        return cfg, build_model(cfg, vocab=synthetic_vocab())


def _flops(fn) -> tuple[float, object]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    fc = FlopCounterMode(display=False)
    with fc, torch.no_grad():
        out = fn()
    return float(fc.get_total_flops()), out


def transformer_macs(layers: int, n: int, d: int) -> int:
    """Multiply-adds of a transformer's blocks: QKV + output projections 4 n d^2, MLP (4d) 8 n d^2,
    attention scores and weighted sum 2 n^2 d."""
    return layers * (12 * n * d * d + 2 * n * n * d)


def model_costs(name: str) -> dict:
    import torch

    cfg, m = build_meta(name)
    S = m.image_tower.image_size
    L = cfg.max_text_len
    x = torch.zeros(1, 3, S, S, device="meta")
    ids = torch.full((1, L), len(synthetic_vocab()) - 1, dtype=torch.long, device="meta")
    mask = torch.ones(1, L, dtype=torch.long, device="meta")
    f_itower, grid = _flops(lambda: m.image_grid(x))
    f_ihead, emb = _flops(lambda: m.image_embed(grid))
    if cfg.family == "visualsparta":  # the query side is word embeddings: no text network runs
        f_ttower = f_text = 0.0
    else:
        f_ttower, _ = _flops(lambda: m.text_tower(ids, mask))
        f_text, _ = _flops(lambda: m.text_embed(ids, mask))
    out = {
        "config": name, "family": cfg.family, "image_size": S, "text_len": L, "embedding_dim": int(emb.shape[-1]),
        "grid": list(grid.shape[1:]),
        "params": {"total": sum(p.numel() for p in m.parameters()),
                   "image_tower": sum(p.numel() for p in m.image_tower.parameters()),
                   "text_tower": sum(p.numel() for p in m.text_tower.parameters())},
        "forward_flops": {"image_tower": f_itower, "image_head": f_ihead, "text_tower": f_ttower,
                          "text_head": f_text - f_ttower},
    }
    out["params"]["heads"] = out["params"]["total"] - out["params"]["image_tower"] - out["params"]["text_tower"]
    if cfg.family == "stair":  # stage 1 (restrict_text): the text head on the text's own L tokens only
        f_r, _ = _flops(lambda: m.text_embed(ids, mask, restrict_to_input=True))
        out["forward_flops"]["text_head_restricted"] = f_r - f_ttower
    # the formula check for transformer towers (the ViT: patches + class token)
    it, tt = cfg.image_tower, cfg.text_tower
    if it.get("type") == "vit":
        c = it["config"]
        n = (c["image_size"] // c["patch_size"]) ** 2
        macs = transformer_macs(c["num_hidden_layers"], n + 1, c["hidden_size"]) + n * 3 * c["patch_size"] ** 2 * c["hidden_size"]
        out["check_image_tower"] = {"formula": f"{c['num_hidden_layers']} x (12*{n + 1}*{c['hidden_size']}^2 + "
                                               f"2*{n + 1}^2*{c['hidden_size']}) + patches {n}*{3 * c['patch_size'] ** 2}*{c['hidden_size']}",
                                    "flops": 2.0 * macs}
    if tt.get("type") == "transformer-mlm":
        macs = transformer_macs(tt["layers"], L, tt["width"])
        out["check_text_tower"] = {"formula": f"{tt['layers']} x (12*{L}*{tt['width']}^2 + 2*{L}^2*{tt['width']})",
                                   "flops": 2.0 * macs}
    return out


def recipe_costs(costs: dict, recipe_name: str, gpus: int, util: float) -> dict:
    from tokenspace.train.recipe import Recipe

    r = Recipe.load(recipe_name)
    f = costs["forward_flops"]
    B, D = r.batch_size, costs["embedding_dim"]
    b = B // gpus
    loss_per_gpu = 3 * 2 * 2.0 * b * B * D  # each rank: its rows of the B x B similarity, both directions
    stages, total = [], 0.0
    for s in r.stages:
        # image tower: trained (3x) end to end from pixels, else cached grids (0); frozen stage: 1x
        if r.train_image_tower:
            k_tower = 1 if s.freeze_image else 3
        else:
            k_tower = 0
        k_head = 1 if s.freeze_image else 3
        text_head = f.get("text_head_restricted", f["text_head"]) if s.restrict_text else f["text_head"]
        per_pair = k_tower * f["image_tower"] + k_head * f["image_head"] + 3 * f["text_tower"] + 3 * text_head
        step = B * per_pair + gpus * loss_per_gpu
        total += s.steps * step
        stages.append({"stage": s.name, "steps": s.steps, "train_flops_per_pair": per_pair,
                       "arithmetic": (f"{s.steps:,} steps x ({B:,} pairs x ({k_tower} x {f['image_tower'] / 1e9:.2f} "
                                      f"+ {k_head} x {f['image_head'] / 1e9:.2f} + 3 x {f['text_tower'] / 1e9:.2f} "
                                      f"+ 3 x {text_head / 1e9:.2f}) GFLOP + {gpus} GPUs x 3 x 2 x 2 x {b:,} x {B:,} x {D:,})")})
    days = {g: total / (peak * util) / 86400 for g, peak in PEAK.items()}
    return {"recipe": recipe_name, "batch": B, "steps": r.total_steps, "gpus": gpus, "util": util,
            "stages": stages, "loss_flops_per_gpu_step": loss_per_gpu,
            "tower_flops_per_gpu_step": total / r.total_steps / gpus - loss_per_gpu if r.total_steps else 0.0,
            "total_flops": total, "gpu_days": days,
            "wall_days_on_paper_gpus": {g: d / gpus for g, d in days.items()}}


def _g(x: float) -> str:
    """3 significant digits, thousands separated."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--util", type=float, default=0.4, help="model FLOPs utilisation assumed (0-1]")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "paper_costs.json")
    a = ap.parse_args(argv)
    if not 0 < a.util <= 1:
        ap.error("--util must be in (0, 1]")
    rows = []
    for config, recipe, gpus in PAPER:
        c = model_costs(config)
        c["recipe"] = recipe_costs(c, recipe, gpus, a.util)
        rows.append(c)
    G = 1e9
    print(f"| config | params (M): image / text / heads | forward GFLOP per pair: image tower + image head + "
          f"text tower + text head | recipe: steps x batch | loss TFLOP per GPU-step vs towers | "
          f"GPU-days A100 / H100 at {a.util:.0%} | days on {', '.join(str(g) for *_, g in PAPER)} GPUs (A100) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in rows:
        p, f, r = c["params"], c["forward_flops"], c["recipe"]
        print(f"| {c['config']} | {p['total'] / 1e6:.1f}: {p['image_tower'] / 1e6:.1f} / {p['text_tower'] / 1e6:.1f} / "
              f"{p['heads'] / 1e6:.1f} | {sum(f[k] for k in ('image_tower', 'image_head', 'text_tower', 'text_head')) / G:.1f}: "
              f"{f['image_tower'] / G:.2f} + {f['image_head'] / G:.2f} + {f['text_tower'] / G:.2f} + {f['text_head'] / G:.2f} | "
              f"{r['steps']:,} x {r['batch']:,} | {r['loss_flops_per_gpu_step'] / 1e12:.1f} vs "
              f"{r['tower_flops_per_gpu_step'] / 1e12:.1f} | {_g(r['gpu_days']['A100'])} / {_g(r['gpu_days']['H100'])} | "
              f"{_g(r['wall_days_on_paper_gpus']['A100'])} on {r['gpus']} |")
    print("\nArithmetic (GFLOP = 1e9 FLOPs, 2 per multiply-add):")
    for c in rows:
        for k in ("check_image_tower", "check_text_tower"):
            if k in c:
                part = k.split("_", 1)[1]
                print(f"  {c['config']} {part}: {c[k]['formula']} multiply-adds = {c[k]['flops'] / G:.2f} GFLOP "
                      f"(counted: {c['forward_flops'][part] / G:.2f})")
        for s in c["recipe"]["stages"]:
            print(f"  {c['config']} {s['stage']}: {s['arithmetic']}")
        r = c["recipe"]
        print(f"  {c['config']} total {r['total_flops']:.3e} FLOPs / ({PEAK['A100'] / 1e12:.0f}e12 x {a.util}) / 86400 "
              f"= {_g(r['gpu_days']['A100'])} A100-days; / ({PEAK['H100'] / 1e12:.0f}e12 x {a.util}) = "
              f"{_g(r['gpu_days']['H100'])} H100-days")
    write_json(a.out, {"util": a.util, "peak_flops": PEAK, "models": rows}, run_record(__file__, argv))
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
