"""GPU smoke run: each paper config trained at its real tower shapes on synthetic shards it writes.

    make gpu-smoke                                  # on a machine with one CUDA GPU
    python -m benchmarks.gpu_run smoke --steps 300 --batch 128 --out benchmarks/results/gpu_smoke.json
    python -m benchmarks.gpu_run smoke --tiny           # CPU, toy width: checks the path starts (tests do)

For each of stair-paper, sparse-clip-vitb32 and visualsparta-paper: the config with random init
(pretrained weights dropped; a synthetic vocabulary of the paper's 30,522 entries), a few thousand
synthetic image-text pairs written as webdataset shards (a coloured square of one of 8 colours, 16
places and 2 sizes: 256 distinct captions, learnable from pixels), and the paper recipe's optimiser,
precision (bf16 on GPUs that have it) and loss, trained end to end from pixels by ``train.scale``'s
ScaleTrainer (DataLoader workers, pinned memory, non_blocking copies) as one joint stage of ``--steps``
steps (STAIR's three stages differ in what is frozen, not in shapes; VisualSparta trains its CNN too,
where the paper freezes it: an upper bound on its step cost). Reported per config: median step time
after warm-up, samples/s, peak memory (CUDA allocator peak; on CPU the process's peak RSS) and whether
the contrastive loss falls (mean of the last tenth of steps below the first tenth; the total, also
reported, carries the FLOPs term, whose weight grows from 0 over the run). Exit status 1 if a loss does not
fall or a run fails.
"""
from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import run_record, write_json

ROOT = Path(__file__).resolve().parents[1]

CONFIGS = ["stair-paper", "sparse-clip-vitb32", "visualsparta-paper"]
COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 180, 30), "yellow": (230, 210, 20),
          "black": (10, 10, 10), "purple": (140, 40, 160), "orange": (250, 140, 20), "gray": (128, 128, 128)}
ROWS, COLS, SIZES = ["top", "upper", "lower", "bottom"], ["left", "middle", "center", "right"], ["small", "big"]
WORDS = ["a", "square", "at", *COLORS, *ROWS, *COLS, *SIZES]


def captions() -> list[tuple[str, tuple, int, int, int]]:
    return [(f"a {s} {c} square at {r} {q}", COLORS[c], ri, qi, si)
            for c in COLORS for ri, r in enumerate(ROWS) for qi, q in enumerate(COLS) for si, s in enumerate(SIZES)]


def write_synthetic_shards(folder: Path, n: int, size: int, seed: int = 0) -> str:
    """``n`` JPEG + caption pairs in shards of 256; returns the ``wds:`` spec."""
    import numpy as np
    from PIL import Image

    from tokenspace.data.webdataset import write_shards

    caps = captions()
    rng = np.random.default_rng(seed)
    cell = size // 4

    def samples():
        for i in range(n):
            text, color, r, q, s = caps[i % len(caps)]
            img = np.full((size, size, 3), 255, np.uint8)
            side = cell if s else cell // 2
            y = r * cell + int(rng.integers(0, cell - side + 1))
            x = q * cell + int(rng.integers(0, cell - side + 1))
            img[y:y + side, x:x + side] = color
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=90)
            yield f"s{i:07d}", buf.getvalue(), text

    paths = write_shards(samples(), str(folder / "shard-%06d.tar"), per_shard=256, image_ext="jpg")
    return f"wds:{folder}/shard-{{000000..{len(paths) - 1:06d}}}.tar"


def prepare(name: str, work: Path, tiny: bool, steps: int, batch: int, images: int) -> tuple:
    """(Recipe, data spec) for one config: its model config (random init, synthetic vocabulary) and the
    paper recipe's optimiser, precision and loss over one joint stage."""
    import yaml

    from benchmarks.paper_costs import VOCAB_SIZE, random_init, synthetic_vocab
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.shrink import shrink
    from tokenspace.train.recipe import RECIPE_DIR, Recipe

    vocab = synthetic_vocab(len(WORDS) + 8 if tiny else VOCAB_SIZE, WORDS)
    cfg = random_init(ModelConfig.load(name))
    if tiny:
        cfg = shrink(cfg, width=32, layers=1, vocab=len(vocab), image_size=32, patch=8, heads=2)
    work.mkdir(parents=True, exist_ok=True)
    vocab.save(work / "vocab.txt")
    cfg.vocab = str(work / "vocab.txt")
    if cfg.family == "sparse-clip":
        cfg.extra = {**(cfg.extra or {}), "text_pooling": "eos"}
    cfg.save(work / "model.json")
    size = 32 if tiny else int(cfg.image_tower.get("image_size") or cfg.image_tower["config"]["image_size"])
    spec = write_synthetic_shards(work / "shards", images, size)
    paper = yaml.safe_load((RECIPE_DIR / f"{name}.yaml").read_text())
    stage = dict(paper["stages"][-1])  # the joint stage: every part learns
    stage.update(name="joint", steps=steps, warmup_steps=max(1, steps // 10), restrict_text=False, freeze_image=False)
    if tiny:
        stage["lr"] = 1e-3 if paper.get("optimizer") == "lamb" else 2e-3
    loss = dict(paper.get("loss") or {})
    if "flops_warmup" in loss:
        loss["flops_warmup"] = steps
    recipe = Recipe.from_dict({
        **{k: v for k, v in paper.items() if k not in ("stages", "plan", "data", "loss")},
        "name": f"{name}-smoke", "model": str(work / "model.json"), "data": {"train": [spec]},
        "batch_size": batch, "stages": [stage], "loss": loss, "train_image_tower": True,
        "train_image_from": None, "precision": "auto", "checkpoint_every": 0, "eval_every": 0,
    })
    return recipe, spec


def peak_memory(device) -> tuple[float, str]:
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "CUDA allocator peak"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process peak RSS"


def run_one(name: str, work: Path, a) -> dict:
    import numpy as np
    import torch

    from tokenspace.train import distributed, precision
    from tokenspace.train.scale import train

    recipe, _ = prepare(name, work, a.tiny, a.steps, a.batch, a.images)
    device = torch.device("cpu") if a.tiny else distributed.context().device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.time()
    shutil.rmtree(work / "run", ignore_errors=True)  # a fresh run: the trainer refuses to train over one
    train(recipe, work / "run", progress=False, workers=a.workers, compile=a.compile, device=device)
    wall = time.time() - t0
    rows = [json.loads(x) for x in (work / "run" / "log.jsonl").read_text().splitlines()]
    loss = np.array([r["loss"] for r in rows])
    con = np.array([r["contrastive"] for r in rows])
    t = np.array([r["time"] for r in rows])
    dt = np.diff(t)[max(1, len(t) // 10):]  # after warm-up (compilation, allocator, first batches)
    step = float(np.median(dt)) if len(dt) else float(t[-1])
    tenth = max(1, len(loss) // 10)

    def ends(x):  # means of the first and the last tenth of the steps
        return float(x[:tenth].mean()), float(x[-tenth:].mean())

    (first, last), (con_first, con_last) = ends(loss), ends(con)
    mem, what = peak_memory(device)
    # judged on the contrastive part: the total also holds the FLOPs term, whose weight grows from 0
    # over the run (flops_warmup = steps), so STAIR's total may rise while it learns
    return {"config": name, "device": str(device), "precision": precision.resolve(recipe.precision, device), "steps": len(rows),
            "batch": recipe.batch_size, "step_s": step, "samples_per_s": recipe.batch_size / step,
            "peak_mib": mem, "memory": what, "loss_first": first, "loss_last": last,
            "contrastive_first": con_first, "contrastive_last": con_last,
            "loss_falls": bool(con_last < con_first), "wall_s": wall, "finite": bool(np.isfinite(loss).all())}


def cli(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="toy width on the CPU (checks that the path starts)")
    ap.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    ap.add_argument("--steps", type=int, default=None, help="default 300 (tiny: 40)")
    ap.add_argument("--batch", type=int, default=None, help="per run, default 128 (tiny: 16); at most 256")
    ap.add_argument("--images", type=int, default=None, help="synthetic pairs written, default 4096 (tiny: 256)")
    ap.add_argument("--workers", type=int, default=None, help="DataLoader workers (default cores - 1, at most 8)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the towers' forward")
    ap.add_argument("--work", type=Path, default=None, help="folder for shards and runs (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=None, help="JSON results (default benchmarks/results/gpu_smoke.json; "
                                                          "tiny: not written unless given)")
    a = ap.parse_args(argv)
    a.steps = a.steps or (40 if a.tiny else 300)
    a.batch = a.batch or (16 if a.tiny else 128)
    a.images = a.images or (256 if a.tiny else 4096)
    if not 2 <= a.batch <= len(captions()):
        ap.error(f"--batch must be in 2..{len(captions())} (the distinct synthetic captions)")
    if not a.tiny and not torch.cuda.is_available():
        print("gpu_smoke: no CUDA GPU here; run with --tiny for the CPU check", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    if a.tiny:
        torch.set_num_threads(1)  # a smoke check: leave the other cores to whatever else runs
    try:
        return _run(a, torch, argv)
    finally:
        torch.set_num_threads(threads)  # as found (the test suite runs this in its own process)


def _run(a, torch, argv=None) -> int:
    out = a.out if a.out is not None or a.tiny else ROOT / "benchmarks" / "results" / "gpu_smoke.json"
    results, ok = [], True
    with tempfile.TemporaryDirectory(prefix="gpu-smoke-") as tmp:
        work = a.work or Path(tmp)
        for name in a.configs:
            try:
                r = run_one(name, work / name, a)
            except Exception as e:  # one failing config must not hide the others' numbers
                r = {"config": name, "error": f"{type(e).__name__}: {e}"}
            results.append(r)
            ok &= bool(r.get("loss_falls")) and bool(r.get("finite"))
    print("| config | device | precision | steps x batch | step (s) | samples/s | peak memory (MiB) | "
          "contrastive first -> last | loss first -> last |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['config']} | failed: {r['error']} ||||||||")
            continue
        print(f"| {r['config']} | {r['device']} | {r['precision']} | {r['steps']} x {r['batch']} | {r['step_s']:.3f} | "
              f"{r['samples_per_s']:.1f} | {r['peak_mib']:,.0f} ({r['memory']}) | {r['contrastive_first']:.3f} -> "
              f"{r['contrastive_last']:.3f}{'' if r['loss_falls'] else ' (did not fall)'} | "
              f"{r['loss_first']:.3f} -> {r['loss_last']:.3f} |")
    if out is not None:
        meta = {"torch": torch.__version__, "cuda": torch.version.cuda,
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
        write_json(out, {"args": {k: str(v) for k, v in vars(a).items()}, **meta, "results": results},
                   run_record(__file__, argv))
        print(f"wrote {out}")
    return 0 if ok else 1

