"""Where does STAIR's image head lose recall? A frozen-text ladder from the dense probe to STAIR's head.

    python -m experiments.run stair_head_ablation             # every arm, ~20 min on 2 cores
    python -m experiments.run stair_head_ablation --set 'ladder.arms=["probe","stair-head"]'

The text side is frozen: SPLADE-tiny's own vocabulary vector log(1 + ReLU(max MLM logits)) of each caption
(the text vector STAIR starts from). Only an image head on cached EfficientNet-Lite0 grids (128 px, 4x4
cells) trains, with a learnable temperature and the trainer's batch sampler: 300 steps, batch 64, AdamW
lr 1e-3 (10 warm-up steps, linear decay), on emoji:train + openclipart:train:2000. Each arm changes one
thing on the way from the frozen-feature dense probe (the "about 26%" reference) to STAIR's image head
(TRANSFORM + the tied word embeddings + bias, max over cells, log(1+ReLU)). The arms are deterministic
(seed 0). Writes benchmarks/results/stair_head_ablation.json and the `stair-head-ablation` section of
docs/results.md.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from experiments import config
from tokenspace import pipeline
from tokenspace.eval import ResultsDoc, markdown_table
from tokenspace.eval.retrieval import retrieval_metrics
from tokenspace.models.maxproj import max_projection
from tokenspace.models.pooling import grid_to_cells, log1p_relu
from tokenspace.train.losses import contrastive_loss
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import BatchSampler, PairData, lr_at

ROOT = Path(__file__).resolve().parent.parent
JSON_OUT = ROOT / "benchmarks" / "results" / "stair_head_ablation.json"
# the splits, set by main from the TOML ([ladder] train and eval)
TRAIN = ["emoji:train", "openclipart:train:2000"]
EVAL = ["emoji:val", "emoji:test", "openclipart:test:300"]

# name -> (what changes, Head kwargs): the TOML's [arms], set by main
ARMS: dict[str, tuple[str, dict]] = {}


class Head(nn.Module):
    """An image head (and, for the probe, a text map) over frozen inputs; see the module docstring."""

    def __init__(self, E, bias, out_mask, kind, pool="max", act="log1p_relu", revive=0.0, slots=0,
                 scale=1 / 0.07):
        super().__init__()
        self.kind, self.pool, self.act, self.revive, self.slots = kind, pool, act, revive, max(1, slots)
        self.E, self.out_mask = E, out_mask
        C, H, V = 1280, E.shape[1], E.shape[0]
        if kind == "probe":
            self.wi, self.wt = nn.Linear(C, 512), nn.Linear(V, 512)
        elif kind == "untied":
            self.wi = nn.Linear(C, V)
        else:  # STAIR's TRANSFORM (FC + GELU + LayerNorm) into the word-embedding width, then e . h + b
            self.fc, self.ln = nn.Linear(C, H * self.slots), nn.LayerNorm(H)
            self.b = nn.Parameter(bias.clone())
        self.log_scale = nn.Parameter(torch.tensor(float(np.log(scale))))

    def image(self, grid):
        cells = grid_to_cells(grid)  # [B, 16, C]
        if self.kind == "probe":
            return self.wi(cells.mean(1))
        if self.pool == "mean":
            cells = cells.mean(1, keepdim=True)
        if self.kind == "untied":
            z = self.wi(cells).amax(1)
        else:
            h = self.ln(F.gelu(self.fc(cells)).reshape(len(cells), -1, self.E.shape[1]))  # [B, cells*slots, H]
            z = max_projection(h, self.E, self.b)
        return z if self.act == "none" else log1p_relu(z, self.revive) * self.out_mask

    def text(self, vec):
        return self.wt(vec) if self.kind == "probe" else vec

    def loss(self, grid, vec):
        s = F.normalize(self.image(grid), dim=-1) @ F.normalize(self.text(vec), dim=-1).T
        return contrastive_loss(self.log_scale.clamp(max=np.log(100)).exp() * s)


@torch.no_grad()
def text_vectors(model, texts):
    return torch.cat([model.text_embed(*model.tokenize(texts[s:s + 256])) for s in range(0, len(texts), 256)])


def load(model):
    tr = pipeline.image_grids(model, pipeline.load_data(TRAIN), progress=False)
    texts = [r.text for r in tr.records]
    train = (torch.as_tensor(np.asarray(tr.grids, np.float32)), text_vectors(model, texts), texts)
    evals = {}
    for spec in EVAL:
        enc = pipeline.image_grids(model, pipeline.load_split(spec), progress=False)
        captions, target = pipeline.texts_and_targets(enc.records)
        evals[spec] = (torch.as_tensor(np.asarray(enc.grids, np.float32)), text_vectors(model, captions), target)
    return train, evals


def run_arm(model, train, evals, kw, steps=300, lr=1e-3, seed=0) -> dict:
    torch.manual_seed(seed)
    tt = model.text_tower
    head = Head(tt.word_embeddings.detach(), tt.mlm_bias.detach(), model.output_mask, **kw)
    grids, vecs, texts = train
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=1e-2)
    sampler = BatchSampler(PairData.from_texts(np.zeros(len(texts)), texts).groups, 64, np.random.default_rng(seed))
    stage = Stage("head", steps, lr, warmup_steps=10)
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(stage, step)
        idx = torch.as_tensor(sampler.next())
        loss = head.loss(grids[idx], vecs[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = {"train_loss": loss.item(), "seconds": time.time() - t0}
    with torch.no_grad():
        for spec, (g, v, target) in evals.items():
            zi = head.image(g)
            m = retrieval_metrics(F.normalize(zi, dim=-1).numpy(), F.normalize(head.text(v), dim=-1).numpy(), target)
            out[spec] = {"t2i@1": 100 * m["image_retrieval_recall@1"], "t2i@10": 100 * m["image_retrieval_recall@10"],
                         "mean": 100 * m["mean_recall"], "nnz_image": float((zi > 0).sum(1).float().mean())}
    return out


def main(argv=None) -> None:
    run, _ = config.start("stair_head_ablation", argv)
    global TRAIN, EVAL, JSON_OUT
    lad = run["ladder"]
    TRAIN, EVAL = lad["train"], lad["eval"]
    names, steps, lr, seed, threads, write_doc = (lad["arms"], lad["steps"], lad["lr"], lad["seed"],
                                                  lad["threads"], lad["doc"])
    recipe = lad["recipe"]
    ARMS.clear()
    ARMS.update({k: (v["change"], v["head"]) for k, v in run["arms"].whole().items()})
    unknown = [n for n in names if n not in ARMS]
    if unknown:
        raise SystemExit(f"ladder.arms {unknown}: not in [arms] ({', '.join(ARMS)})")
    JSON_OUT, doc_path = ROOT / run["output"]["json"], ROOT / run["output"]["doc"]
    run.ready()
    torch.set_num_threads(threads)
    model = pipeline.build_seeded(Recipe.load(recipe)).eval()
    train, evals = load(model)
    results = {}
    for name in names:
        results[name] = run_arm(model, train, evals, ARMS[name][1], steps=steps, lr=lr, seed=seed)
        print(json.dumps({"arm": name, **results[name]}), flush=True)
    JSON_OUT.parent.mkdir(parents=True, exist_ok=True)
    JSON_OUT.write_text(json.dumps({"arms": {k: {"change": ARMS[k][0], **v} for k, v in results.items()}}, indent=2))
    rows = {}
    for name, r in results.items():
        row = {"change": ARMS[name][0], "train loss": round(r["train_loss"], 2)}
        for spec in ("emoji:val", "emoji:test"):
            row |= {f"{spec} T→I R@1 (%)": round(r[spec]["t2i@1"], 1), f"{spec} mean R (%)": round(r[spec]["mean"], 1),
                    f"{spec} nnz image": round(r[spec]["nnz_image"], 1)}
        rows[name] = row
    table = markdown_table(rows, first_column="arm")
    print(table)
    if write_doc:
        cmd = run.command()
        ResultsDoc(doc_path).update(
            "stair-head-ablation", (__doc__.split("\n", 4)[4].split("Writes")[0].strip() + "\n\n" + table),
            command=cmd, heading="Where STAIR's image head loses recall: a frozen-text ladder")


if __name__ == "__main__":
    sys.exit(main())
