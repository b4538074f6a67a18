"""The loss over the active columns (train/active.py) on real batches: how many columns, and the CPU speed-up.

    nice -n 10 python -m experiments.run active_loss    # release STAIR; emoji:train, 600 openclipart:train pairs
    python -m experiments.run active_loss --set 'union.sizes=[256,1024]' --set 'timing.sizes=[256]' --set timing.repeats=1

Vectors: the release model's STAIR part (``tokenspace-stair-drawings`` part 0: the model a STAIR recipe
trains) as the trainer's loss sees them: ``image_embed`` of the cached backbone grids and ``text_embed``
of the captions, before top-n pruning and normalisation. Batches: the trainer's own BatchSampler (one
pair per caption group) over each split's training pairs. Reported per split and batch size: the union
of the columns non-zero in some image or text row (U, of 30,522), over ``--draws`` batches; then the
loss (SparseContrastiveLoss, both FLOPs weights 1e-3 as STAIR's lambda), forward + backward, on the full [B, D]
embeddings and on their active columns (keep_active included in the time), interleaved, medians of
``--repeats``.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

import tokenspace
from experiments import config
from tokenspace.atomic import write_text
from tokenspace.data.specs import image_grids, load_split
from tokenspace.train.active import keep_active
from tokenspace.train.losses import SparseContrastiveLoss
from tokenspace.train.pairs import caption_pairs
from tokenspace.train.trainer import BatchSampler

ROOT = Path(__file__).resolve().parent.parent


def embeddings(model, split: str, home) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Every training pair's image and text vector [N, V] (as the loss sees them) and its group."""
    data = caption_pairs(*_grids(model, split, home))
    imgs, txts = [], []
    with torch.no_grad():
        for s in range(0, len(data), 256):
            rows = np.arange(s, min(s + 256, len(data)))
            imgs.append(model.image_embed(torch.from_numpy(np.asarray(data.inputs[rows], np.float32))))
            ids, mask = model.tokenize([data.texts[i] for i in rows])
            txts.append(model.text_embed(ids, mask))
    return torch.cat(imgs), torch.cat(txts), data.groups


def _grids(model, split, home):
    enc = image_grids(model, load_split(split, home), home, progress=False)
    return enc.grids, enc.records


def union_sizes(img, txt, groups, sizes, draws, seed: int = 0) -> dict:
    out = {}
    for b in sizes:
        sampler = BatchSampler(groups, b, np.random.default_rng(seed))
        if sampler.batch_size < b:
            continue  # fewer caption groups than the batch
        u = [int(((img[i] != 0) | (txt[i] != 0)).any(0).sum()) for i in (sampler.next() for _ in range(draws))]
        per_row = [float((img[i] != 0).sum(1).float().mean()) for i in (sampler.next() for _ in range(2))]
        out[b] = {"union_median": float(np.median(u)), "union_min": min(u), "union_max": max(u),
                  "share": float(np.median(u)) / img.shape[1], "nnz_image_mean": float(np.mean(per_row))}
    return out


def loss_times(model, img, txt, repeats: int) -> dict:
    """Median seconds of forward + backward on all columns and on the active ones, the two interleaved
    (full, active, full, ...) so that a shared machine's load changes hit both alike; the loss values."""
    loss_fn = SparseContrastiveLoss(lambda_image=1e-3, lambda_text=1e-3, reference_batch=len(img))
    times, value = {False: [], True: []}, {}
    for _ in range(repeats):
        for sparse in (False, True):
            a, b = img.clone().requires_grad_(), txt.clone().requires_grad_()
            t0 = time.perf_counter()
            x, y = keep_active(a, b) if sparse else (a, b)
            parts = loss_fn(x, y, model, step=10**9)
            parts["loss"].backward()
            times[sparse].append(time.perf_counter() - t0)
            value[sparse] = float(parts["loss"].detach())
    full, fast = float(np.median(times[False])), float(np.median(times[True]))
    return {"full_s": full, "active_s": fast, "speedup": full / fast, "loss_full": value[False],
            "loss_active": value[True], "full_runs": times[False], "active_runs": times[True]}


def main(argv=None) -> int:
    run, _ = config.start("active_loss", argv)
    a = SimpleNamespace(
        model=run["model"]["name"], home=run["model"]["home"] or None,
        splits=run["data"]["splits"],
        sizes=run["union"]["sizes"], draws=run["union"]["draws"], union_seed=run["union"]["seed"],
        time=run["timing"]["sizes"], repeats=run["timing"]["repeats"], timing_seed=run["timing"]["seed"],
        threads=run["timing"]["threads"], json=ROOT / run["output"]["json"])
    run.ready()
    torch.set_num_threads(a.threads)
    model = tokenspace.load(a.model)
    model = model.part(0) if hasattr(model, "part") else model  # a fused release: its STAIR part
    model.eval()
    res = {"command": run.command(),
           "model": a.model, "family": model.family, "vocab": len(model.vocab),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                      f"torch {torch.__version__}, {torch.get_num_threads()} threads",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "splits": {}}
    for split in a.splits:
        img, txt, groups = embeddings(model, split, a.home)
        row = {"pairs": len(img), "groups": int(len(np.unique(groups))),
               "union": union_sizes(img, txt, groups, a.sizes, a.draws, a.union_seed), "timing": {}}
        print(split, json.dumps(row["union"]), flush=True)
        for b in a.time:
            sampler = BatchSampler(groups, b, np.random.default_rng(a.timing_seed))
            if sampler.batch_size < b:
                continue
            i = sampler.next()
            u = int(((img[i] != 0) | (txt[i] != 0)).any(0).sum())
            r = row["timing"][b] = {"union": u, **loss_times(model, img[i], txt[i], a.repeats)}
            print(f"  batch {b}: U {u}, full {r['full_s']:.3f} s, active {r['active_s']:.3f} s "
                  f"({r['speedup']:.1f}x), loss {r['loss_full']:.6f} / {r['loss_active']:.6f}", flush=True)
        res["splits"][split] = row
        res["load_average"] = os.getloadavg()  # the machine is shared: the timings follow its load
        write_text(Path(a.json), json.dumps(res, indent=1) + "\n")  # after each split: a cut run keeps it
    return 0


if __name__ == "__main__":
    sys.exit(main())
