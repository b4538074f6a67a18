"""Every GPU measurement of issue 31 in one run (< 8 minutes on one H100 / H200), into one JSON file.

    python benchmarks/gpu_run.py                      # one CUDA GPU -> benchmarks/results/gpu_run.json
    python benchmarks/gpu_run.py --tiny               # the same code paths on the CPU at toy width (~1 min)
    python benchmarks/gpu_run.py --sections smoke throughput --budget 300

Needs no network: models are built at random init from the paper configs with a synthetic 30,522-entry
vocabulary, data are synthetic tensors (throughput) or shards / JPEGs the script writes (smoke, encode),
and the encode section loads the release model from the repository's models/ folder. Sections, each
guarded (a failure or the time budget skips what is left of it, recorded in the JSON):
- ``smoke``: benchmarks/gpu_smoke.py's run of every paper config (end to end from pixels through the
  ScaleTrainer and its DataLoader workers), shorter: does the loss fall.
- ``throughput``: training steps of stair-paper, sparse-clip-vitb32 and the dense CLIP baseline (the
  sparse-clip-vitb32 towers under the dense head: ViT-B/32 + 12 x 512 text, 512-d) at their real tower
  shapes, the recipe's precision (bf16 on GPUs that have it) and optimiser, with synthetic pixels and
  token ids already on the device (the towers, heads, loss and optimiser step; no data loading): the
  largest batch that fits (doubling from half the paper's per-GPU batch), then at the paper's per-GPU
  batch each arm: ``before`` (the loss over all D columns: the code before issue 31), ``active``
  (train/active.py: the default now), ``autograd-head`` (STAIR only: ``active`` with the plain [B, L, V]
  autograd head in place of models/maxproj.py), ``slab-256`` (STAIR only: maxproj's slabs of 256 rows,
  its CPU default, instead of 4,096; the 2026-11-27 run measured the reverse, ``slab-4096``, when 256
  was the default everywhere). Step time (median), pairs/s, peak memory (CUDA allocator).
- ``global_loss``: the loss alone at the paper's *global* batch (STAIR 16,384 x 30,522 with sparse
  synthetic vectors, Zipf-distributed tokens; Sparse CLIP 32,768 x 16,384 dense): ``before`` (all
  columns, the [B, B] logits every rank computed before issue 31), ``active`` (the active columns)
  and ``local`` (one rank's rows at the per-GPU batch: what each rank computes now), time and peak memory.
- ``encode``: ``encode_files`` of the release model on the GPU over synthetic 500 x 375 JPEGs: images/s.
- ``gpu_days``: docs/scale.md's table from measured time instead of an assumed utilisation: per GPU-step
  = the ``active`` step at the per-GPU batch + one rank's loss (``local``), times the recipe's steps.
- ``open_clip``: open_clip's ViT-B-32 (random init) trained the same way at the dense baseline's batch,
  for an outside reference of the dense baseline's pairs/s; skipped when open_clip is not installed.
- ``compile`` (last: its compilation time is the least predictable): the ``active`` arm of each model
  with torch.compile of the towers' forward (--tiny: dynamo with the eager backend; the CPU's inductor
  takes minutes), into the throughput results.
Each section gets a share of ``--budget`` (390 s, leaving room for start-up and an arm that overruns;
the last takes what is left) and the JSON is written after each, so a run cut short keeps what it
measured.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

# config name -> (model config it is built from, recipe, paper per-GPU batch, GPUs in the paper)
MODELS = {"stair-paper": ("stair-paper", "stair-paper", 256, 64),
          "sparse-clip-vitb32": ("sparse-clip-vitb32", "sparse-clip-vitb32", 512, 64),
          "dense-clip-vitb32": ("sparse-clip-vitb32", "sparse-clip-vitb32", 512, 64)}
# in this order; each section's share of the time budget (a section ends early when its share is spent)
SECTIONS = ["throughput", "global_loss", "gpu_days", "encode", "open_clip", "smoke", "compile"]
SHARE = {"throughput": 0.5, "global_loss": 0.12, "gpu_days": 0.01, "encode": 0.12, "open_clip": 0.1, "smoke": 0.3,
         "compile": 1.0}
RELEASE = ROOT / "models" / "tokenspace-stair-drawings"


class Clock:
    """The run's time budget: sections ask before each measurement whether there is time left."""

    def __init__(self, seconds: float, scale: float = 1.0):
        self.end, self.scale = time.time() + seconds, scale  # scale: --tiny's steps take a tenth of the time

    def left(self) -> float:
        return self.end - time.time()

    def check(self, need: float = 0.0) -> None:
        """Raise TimeoutError unless ``need`` seconds (what the next measurement takes on a GPU) are left."""
        if self.left() < need * self.scale:
            raise TimeoutError("out of time (--budget)")


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_mib(device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def oom_errors() -> tuple:
    return (torch.cuda.OutOfMemoryError,) if torch.cuda.is_available() else ()


# ---------------------------------------------------------------------------------------------- models
def build(name: str, tiny: bool):
    """Random-init model at the config's real shapes (tiny: toy width) and its paper recipe's joint stage."""
    import yaml
    from paper_costs import VOCAB_SIZE, random_init, synthetic_vocab

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.models.shrink import shrink
    from tokenspace.train.recipe import RECIPE_DIR, Recipe

    base, recipe_name, _, _ = MODELS[name]
    cfg = random_init(ModelConfig.load(base))
    if name.startswith("dense"):
        d = cfg.to_dict()
        d.update(name=name, family="dense", expansion=1, extra={})
        cfg = ModelConfig.from_dict(d)
    vocab = synthetic_vocab(64 if tiny else VOCAB_SIZE)
    if tiny:
        cfg = shrink(cfg, width=32, layers=1, vocab=len(vocab), image_size=32, patch=8, heads=2)
    torch.manual_seed(0)
    model = build_model(cfg, vocab=vocab)
    paper = yaml.safe_load((RECIPE_DIR / f"{recipe_name}.yaml").read_text())
    stage = dict(paper["stages"][-1], name="joint", steps=10**6, warmup_steps=10, restrict_text=False,
                 freeze_image=False)
    recipe = Recipe.from_dict({
        **{k: v for k, v in paper.items() if k not in ("stages", "plan", "data")},
        "name": f"{name}-gpu-run", "model": base, "batch_size": 8, "stages": [stage],
        "train_image_tower": True, "train_image_from": None, "precision": "auto",
        "checkpoint_every": 0, "eval_every": 0})
    return model, recipe


def trainer_for(model, recipe, batch: int, device, compile: bool = False):
    """A ScaleTrainer whose every batch is the same synthetic pixels and token ids, already on the device:
    the trainer's own step (towers, heads, gathered loss, backward, optimiser) without data loading."""
    from tokenspace.models.capabilities import LowPrecisionHeads
    from tokenspace.train.scale import ScaleTrainer
    from tokenspace.train.trainer import PairData

    class Synthetic(ScaleTrainer):
        def _inputs(self, idx):
            return self.batch

    recipe.batch_size = batch
    data = PairData(np.zeros((batch, 1), np.float32), [f"pair {i}" for i in range(batch)], np.arange(batch))
    t = Synthetic(model, recipe, data, "/nonexistent", device=device, compile=compile, progress=False)
    t._setup_model()
    if isinstance(model, LowPrecisionHeads):
        model.compute_dtype = torch.bfloat16 if t.precision == "bf16" else torch.float32
    size = model.image_tower.image_size
    g = torch.Generator(device).manual_seed(0)  # drawn on the device: a 2,048-image batch is 1.2 GB
    x = torch.randn(batch, 3, size, size, generator=g, device=device)
    if recipe.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    L = model.config.max_text_len
    ids = torch.randint(len(model.tokenizer.vocab.special_ids) + 1, len(model.tokenizer.vocab), (batch, L),
                        generator=g, device=device)
    t.batch = (x, ids, torch.ones(batch, L, dtype=torch.long, device=device))
    t._train_mode()
    stage = recipe.stages[0]
    opt = t._optimizer(t._trainable(stage))
    return t, stage, opt


def time_steps(t, stage, opt, warm: int, steps: int) -> dict:
    device = t.device
    idx = np.arange(t.recipe.batch_size)
    reset_peak(device)
    losses = []
    for s in range(warm):
        losses.append(t.step(idx, stage, s, opt)["loss"])
    times = []
    for s in range(steps):
        sync(device)
        t0 = time.perf_counter()
        losses.append(t.step(idx, stage, warm + s, opt)["loss"])  # the step reads its loss: synchronised
        times.append(time.perf_counter() - t0)
    step = float(np.median(times))
    return {"step_s": step, "pairs_per_s": t.recipe.batch_size / step, "peak_mib": peak_mib(device),
            "losses": [round(v, 5) for v in losses], "finite": bool(np.isfinite(losses).all())}


@contextlib.contextmanager
def slab_rows(rows: int):
    """models/maxproj.py's slabs of ``rows`` (batch x positions) rows on every device instead of its
    defaults (256 on a CPU, 4,096 on a GPU)."""
    from tokenspace.models import maxproj

    saved = maxproj.SLAB_ROWS
    maxproj.SLAB_ROWS = dict.fromkeys(saved, rows)
    try:
        yield
    finally:
        maxproj.SLAB_ROWS = saved


@contextlib.contextmanager
def autograd_head():
    """STAIR's heads with the plain autograd [B, L, V] scores instead of models/maxproj.py (the head
    before a6c32a8): the reference issue 31 item 2 is measured against."""
    from tokenspace.models import stair

    def plain(h, weight, bias, valid=None, compute_dtype=torch.float32):
        s = (h.to(compute_dtype) @ weight.to(compute_dtype).T).float()  # [B, L, V]
        if valid is not None:
            s = s.masked_fill(~valid.bool()[..., None], float("-inf"))
        return s.amax(dim=1) + bias.float()

    saved = stair.max_projection
    stair.max_projection = plain
    try:
        yield
    finally:
        stair.max_projection = saved


def run_arm(name, tiny, batch, device, arm: str, warm: int, steps: int) -> dict:
    """One fresh model trained ``warm`` + ``steps`` steps in one arm; out of memory is a result, and
    everything the arm allocated is freed when it returns."""
    try:
        model, recipe = build(name, tiny)
        with autograd_head() if arm == "autograd-head" else slab_rows(256) if arm == "slab-256" else \
                contextlib.nullcontext():
            t, stage, opt = trainer_for(model, recipe, batch, device, compile=arm == "compile" and not tiny)
            if arm == "compile" and tiny:  # the CPU's inductor takes minutes: dynamo's tracing alone
                t._embed = t._forward = torch.compile(t._embed, backend="eager")
            t.sparse_loss = arm != "before"
            return {"batch": batch, "precision": t.precision, **time_steps(t, stage, opt, warm, steps)}
    except oom_errors() as e:
        return {"batch": batch, "error": f"out of memory: {str(e)[:200]}"}
    finally:
        model = t = opt = None
        gc.collect()
        reset_peak(device)


def throughput(device, tiny, clock, out: dict) -> None:
    """In rounds, so that a short budget still gets the core numbers of every model: the arms at the
    paper's per-GPU batch (before / active), then the head variants, then the largest batch. (The
    ``compile`` arm is a section of its own, the last: its compilation time is the least predictable.)"""
    warm, steps = (1, 2) if tiny else (3, 8)
    rounds = [("before", "active"), ("autograd-head", "slab-256"), ("largest",)]
    for arms in rounds:
        for name, (_, _, paper, _) in MODELS.items():
            res = out.setdefault(name, {"batch": 4 if tiny else paper})
            if "error" in res:
                continue
            try:
                for arm in arms:
                    if arm in ("autograd-head", "slab-256") and not name.startswith("stair"):
                        continue  # the token head's variants: STAIR's heads only
                    if arm == "largest":
                        largest_batch(name, tiny, device, clock, res, warm, steps)
                        continue
                    clock.check(90 if arm == "compile" else 20)
                    res[arm] = run_arm(name, tiny, res["batch"], device, arm, warm, steps)
                    print(f"throughput {name} {arm}: {res[arm]}", flush=True)
            except TimeoutError as e:
                res.setdefault("skipped", str(e))
                raise
            except Exception as e:  # noqa: BLE001 - one failing model must not hide the others' numbers
                res["error"] = f"{type(e).__name__}: {e}"
                print(f"throughput {name}: {res['error']}", flush=True)


def compiled(device, tiny, clock, results: dict, save) -> None:
    """The ``active`` arm with torch.compile of the towers' forward, per model, into the throughput results."""
    warm, steps = (1, 2) if tiny else (3, 8)
    for name in MODELS:
        res = results.setdefault("throughput", {}).setdefault(name, {"batch": 4 if tiny else MODELS[name][2]})
        clock.check(90)
        res["compile"] = run_arm(name, tiny, res["batch"], device, "compile", warm, steps)
        print(f"throughput {name} compile: {res['compile']}", flush=True)
        save()  # a compilation that runs past the machine's limit must not take the others' numbers along


def largest_batch(name, tiny, device, clock, res: dict, warm: int, steps: int) -> None:
    """Doubling from half the paper's per-GPU batch until out of memory; the ``active`` arm at the largest."""
    paper = MODELS[name][2]
    res["batch_search"], res["largest_batch"] = [], 0
    for b in [2, 4, 8] if tiny else [paper // 2, paper, 2 * paper, 4 * paper]:
        clock.check(30)
        r = run_arm(name, tiny, b, device, "active", warm=1, steps=1)
        res["batch_search"].append({"batch": b, "fits": "error" not in r, "peak_mib": r.get("peak_mib")})
        if "error" in r:
            break
        res["largest_batch"] = b
    if res["largest_batch"] not in (0, res["batch"]):
        clock.check(20)
        res["active_at_largest"] = run_arm(name, tiny, res["largest_batch"], device, "active", warm, steps)
        print(f"throughput {name} largest: {res['active_at_largest']}", flush=True)


# ---------------------------------------------------------------------------------------------- loss
def sparse_vectors(batch: int, dim: int, nnz: int, seed: int, device) -> torch.Tensor:
    """[batch, dim] non-negative rows with ``nnz`` non-zeros each, tokens drawn Zipf-like (weight 1 / (r +
    10)): a few tokens in most rows, a long tail, as in a FLOPs-regularised batch."""
    g = torch.Generator(device).manual_seed(seed)
    w = 1.0 / (torch.arange(dim, dtype=torch.float32, device=device) + 10.0)
    out = torch.zeros(batch, dim, device=device)
    for s in range(0, batch, 1024):
        n = min(1024, batch - s)
        cols = torch.multinomial(w.expand(n, dim), nnz, replacement=False, generator=g)
        out[s:s + n].scatter_(1, cols, torch.rand(n, nnz, generator=g, device=device))
    return out


def loss_arm(img, txt, sparse: bool, lam: float, device, rows: slice | None = None) -> dict:
    from tokenspace.train.active import keep_active
    from tokenspace.train.losses import SparseContrastiveLoss

    class Scale:  # the DualEncoder's score with a learnable logit scale, without a model around it
        logit_scale = torch.tensor(1 / 0.07, device=device, requires_grad=True)

        @staticmethod
        def normalize(e):
            return e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)

        def score(self, a, b):
            return self.normalize(a) @ self.normalize(b).T

    loss_fn = SparseContrastiveLoss(lambda_image=lam, lambda_text=lam)
    times = []
    for _ in range(3):
        a, b = img.clone().requires_grad_(), txt.clone().requires_grad_()
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        x, y = keep_active(a, b) if sparse else (a, b)
        parts = loss_fn(x, y, Scale(), step=10**9, rows=rows)
        parts["loss"].backward()
        sync(device)
        times.append(time.perf_counter() - t0)
        width = x.shape[1]
        del a, b, x, y
    return {"seconds": float(np.median(times[1:])), "peak_mib": peak_mib(device), "columns": width,
            "loss": float(parts["loss"].detach())}


def global_loss(device, tiny, clock, out: dict) -> None:
    # (name, global batch, width, non-zeros per row or None for dense rows, FLOPs weight)
    cases = [("stair-paper", 64, 500, 20, 1e-3), ("sparse-clip-vitb32", 64, 256, None, 0.0)] if tiny else \
        [("stair-paper", 4096, 30522, 200, 1e-3), ("stair-paper", 16384, 30522, 200, 1e-3),
         ("sparse-clip-vitb32", 32768, 16384, None, 0.0)]
    for name, batch, dim, nnz, lam in cases:
        key = f"{name}@{batch}"
        per_gpu = 4 if tiny else MODELS[name][2]
        res = out.setdefault(key, {"batch": batch, "dim": dim, "nnz_per_row": nnz})
        try:
            clock.check(30)
            if nnz is None:
                g = torch.Generator(device).manual_seed(0)  # drawn on the device: 2 GiB each at paper size
                img, txt = (torch.randn(batch, dim, generator=g, device=device) for _ in range(2))
            else:
                img, txt = sparse_vectors(batch, dim, nnz, 0, device), sparse_vectors(batch, dim, nnz, 1, device)
            # before: all D columns, [B, B] logits on every rank (the code before issue 31); active: the
            # active columns (issue 31); local: and one rank's rows at the per-GPU batch (the default now)
            for arm in ("before", "active", "local"):
                try:
                    rows = slice(0, per_gpu) if arm == "local" else None
                    res[arm] = loss_arm(img, txt, arm != "before", lam, device, rows)
                except oom_errors() as e:
                    res[arm] = {"error": f"out of memory: {str(e)[:200]}"}
                reset_peak(device)
            del img, txt
        except TimeoutError as e:
            res["skipped"] = str(e)
            raise
        except Exception as e:  # noqa: BLE001 - recorded, the other cases still run
            res["error"] = f"{type(e).__name__}: {e}"
        print(f"global loss {key}: {res}", flush=True)


# ---------------------------------------------------------------------------------------------- encode
def encode(device, tiny, clock, out: dict, work: Path) -> None:
    from PIL import Image

    import tokenspace
    from tokenspace.encode import encode_files

    clock.check(30)
    n = 64 if tiny else 2048
    folder = work / "jpegs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:05d}.jpg" for i in range(n)]

    def write(i: int) -> None:  # smooth random images (a noise field compresses badly and decodes slowly)
        small = np.random.default_rng(i).integers(0, 256, (12, 16, 3), dtype=np.uint8)
        Image.fromarray(small).resize((500, 375), Image.BICUBIC).save(paths[i], quality=90)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:  # PIL encodes outside the GIL
        list(pool.map(write, range(n)))
    model = tokenspace.load(str(RELEASE)).to(device)
    workers = 0 if tiny else min(8, (os.cpu_count() or 2) - 1)
    encode_files(model, paths[:64], batch_size=64, workers=workers)  # warm-up (cudnn, workers)
    for batch in ([32] if tiny else [128, 256]):
        clock.check(20)
        sync(device)
        t0 = time.perf_counter()
        rows, kept = encode_files(model, paths, batch_size=batch, workers=workers)
        sync(device)
        dt = time.perf_counter() - t0
        out[f"batch {batch}"] = {"images": len(kept), "seconds": dt, "images_per_s": len(kept) / dt,
                                 "workers": workers, "nnz_mean": float(np.diff(rows.indptr).mean())}
        print(f"encode batch {batch}: {out[f'batch {batch}']}", flush=True)


# ---------------------------------------------------------------------------------------------- GPU-days
def gpu_days(results: dict, out: dict) -> None:
    """Per GPU-step = the ``active`` step at the per-GPU batch + the loss every rank computes (its rows of
    the global batch's: ``local``)."""
    from tokenspace.train.recipe import Recipe

    for name in ("stair-paper", "sparse-clip-vitb32"):
        _, recipe_name, per_gpu, gpus = MODELS[name]
        step = results.get("throughput", {}).get(name, {}).get("active", {}).get("step_s")
        r = Recipe.load(recipe_name)
        measured = results.get("global_loss", {})
        # the loss at the recipe's global batch (tiny: the one measured, at toy size)
        glob = measured.get(f"{name}@{r.batch_size}") or next(
            (v for k, v in reversed(measured.items()) if k.startswith(name)), {})
        loss = (glob.get("local") or glob.get("active", {})).get("seconds")  # a run before the local loss: active
        if step is None or loss is None:
            out[name] = {"error": "needs the throughput and global_loss sections"}
            continue
        per_step = step + loss
        days = r.total_steps * per_step * gpus / 86400
        out[name] = {"steps": r.total_steps, "global_batch": r.batch_size, "loss_batch": glob["batch"],
                     "gpus": gpus, "per_gpu_batch": per_gpu,
                     "step_s": step, "global_loss_s": loss, "gpu_step_s": per_step, "gpu_days": days,
                     "wall_days": days / gpus,
                     "note": "every stage timed as the joint stage (all parts learn): an upper bound for "
                             "STAIR's stages 1-2; the per-GPU step measured on one GPU (no all-gather)"}


# ---------------------------------------------------------------------------------------------- open_clip
def open_clip_reference(device, tiny, clock, results: dict, out: dict) -> None:
    try:
        import open_clip
        from open_clip.loss import ClipLoss
    except Exception as e:  # noqa: BLE001 - optional: not installed, or its torchvision does not import
        out["skipped"] = f"open_clip not importable: {type(e).__name__}: {e}"
        return
    clock.check(30)
    dense = results.get("throughput", {}).get("dense-clip-vitb32", {})
    batch = dense.get("batch") or (4 if tiny else 512)
    batch = 2 if tiny else batch  # tiny: still the real shapes, so a CPU step is slow
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.2, betas=(0.9, 0.98), eps=1e-6)
    loss_fn = ClipLoss()
    x = torch.randn(batch, 3, 224, 224, device=device)
    ids = torch.randint(1, 49407, (batch, 77), device=device)
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    reset_peak(device)
    times = []
    for s in range(2 if tiny else 11):
        sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            img, txt, scale = model(x, ids)[:3]
            loss = loss_fn(img, txt, scale)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss)
        times.append(time.perf_counter() - t0)
    step = float(np.median(times[1:]))
    out.update({"model": "open_clip ViT-B-32 (random init)", "version": open_clip.__version__, "batch": batch,
                "precision": "bf16" if bf16 else "fp32", "step_s": step, "pairs_per_s": batch / step,
                "peak_mib": peak_mib(device)})
    ours = dense.get("active", {}).get("pairs_per_s")
    if ours and not tiny:
        out["dense_baseline_vs_open_clip"] = ours / out["pairs_per_s"]


# ---------------------------------------------------------------------------------------------- smoke
def smoke(tiny, clock, out: dict, work: Path) -> None:
    import gpu_smoke

    a = argparse.Namespace(tiny=tiny, steps=12 if tiny else 60, batch=8 if tiny else 128,
                           images=64 if tiny else 2048, workers=0 if tiny else None, compile=False)
    for name in gpu_smoke.CONFIGS:
        clock.check(20 if tiny else 60)
        try:
            out[name] = gpu_smoke.run_one(name, work / "smoke" / name, a)
        except Exception as e:  # noqa: BLE001 - one failing config must not hide the others
            out[name] = {"config": name, "error": f"{type(e).__name__}: {e}"}
        print(f"smoke {name}: {out[name]}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="toy width on the CPU: the same code paths, about a minute")
    ap.add_argument("--sections", nargs="+", default=SECTIONS, choices=SECTIONS)
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default 390; tiny 300)")
    ap.add_argument("--merge", type=Path, default=None,
                    help="start from this results JSON: sections not run keep its numbers (a rerun of some)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON results (default benchmarks/results/gpu_run.json; tiny: not written unless given)")
    a = ap.parse_args(argv)
    if not a.tiny and not torch.cuda.is_available():
        print("gpu_run: no CUDA GPU here; run with --tiny for the CPU check", file=sys.stderr)
        return 2
    device = torch.device("cpu") if a.tiny else torch.device("cuda", 0)
    budget = a.budget or (300 if a.tiny else 390)  # tiny: a cap for a loaded machine (~1 min on an idle one)
    end = time.time() + budget
    threads = torch.get_num_threads()
    if a.tiny:
        torch.set_num_threads(1)  # a check of the code paths: leave the other cores alone
    out = a.out if a.out is not None or a.tiny else ROOT / "benchmarks" / "results" / "gpu_run.json"
    results = {"command": "python benchmarks/gpu_run.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
               "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if not a.tiny else
               f"cpu ({platform.machine()}, {os.cpu_count()} cores)", "sections": {}}
    if a.merge is not None:
        earlier = json.loads(a.merge.read_text())
        results["sections"] = {k: v for k, v in earlier["sections"].items() if k not in a.sections}
        results["merged"] = {"sections": sorted(results["sections"]), "command": earlier.get("command"),
                             "date": earlier.get("date"), "device": earlier.get("device")}
    t_start = time.time()

    def save() -> None:  # after every section (and compiled arm): a run cut short keeps what it measured
        results["wall_s"] = round(time.time() - t_start, 1)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1, default=float) + "\n")

    try:
        with tempfile.TemporaryDirectory(prefix="gpu-run-") as tmp:
            for section in SECTIONS:
                if section not in a.sections:
                    continue
                part = results["sections"][section] = {}
                t0 = time.time()
                try:
                    # each section gets its share of the budget, and no more than is left of it (tiny: all
                    # that is left; a loaded CPU's times say nothing about a GPU's)
                    share = end - time.time() if a.tiny else min(SHARE[section] * budget, end - time.time())
                    clock = Clock(share, 0.1 if a.tiny else 1.0)
                    if section == "smoke":
                        smoke(a.tiny, clock, part, Path(tmp))
                    elif section == "throughput":
                        throughput(device, a.tiny, clock, part)
                    elif section == "global_loss":
                        global_loss(device, a.tiny, clock, part)
                    elif section == "encode":
                        encode(device, a.tiny, clock, part, Path(tmp))
                    elif section == "gpu_days":
                        gpu_days(results["sections"], part)
                    elif section == "open_clip":
                        open_clip_reference(device, a.tiny, clock, results["sections"], part)
                    else:
                        compiled(device, a.tiny, clock, results["sections"], save)
                except TimeoutError as e:
                    part["skipped"] = str(e)
                except Exception as e:  # noqa: BLE001 - recorded; the next sections still run
                    part["error"] = f"{type(e).__name__}: {e}"
                part["section_s"] = round(time.time() - t0, 1)
                save()
                print(f"== {section}: {part.get('skipped') or part.get('error') or 'done'} "
                      f"({part['section_s']} s)", flush=True)
    finally:
        torch.set_num_threads(threads)
    if out is not None:
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
