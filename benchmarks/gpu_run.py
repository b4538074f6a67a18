"""Every GPU measurement in one run (under 10 minutes on one H100 / H200), into one JSON file.

    python -m benchmarks.gpu_run                      # one CUDA GPU -> benchmarks/results/gpu_run.json
    python -m benchmarks.gpu_run --tiny               # the same code paths on the CPU at toy width (~1 min)
    python -m benchmarks.gpu_run --sections smoke throughput --budget 300
    python -m benchmarks.gpu_run --sections encode stair_step compile --out $OUT/gpu_run.json
    python -m benchmarks.gpu_run smoke --steps 300 --batch 128   # the smoke run alone (make gpu-smoke)

Needs no network: models are built at random init from the paper configs with a synthetic 30,522-entry
vocabulary, data are synthetic tensors (throughput) or shards / JPEGs the script writes (smoke, encode),
and the encode section loads the release model from the repository's models/ folder. Sections, each
guarded (a failure or the time budget skips what is left of it, recorded in the JSON):
- ``smoke``: benchmarks/gpu_smoke.py's run of every paper config (end to end from pixels through the
  ScaleTrainer and its DataLoader workers), shorter: does the loss fall.
- ``throughput``: training steps of stair-paper, sparse-clip-vitb32 and the dense CLIP baseline (the
  sparse-clip-vitb32 towers under the dense head: ViT-B/32 + 12 x 512 text, 512-d) at their real tower
  shapes, the recipe's precision (bf16 on GPUs that have it) and optimiser (LAMB: the library's
  multi-tensor step, its default now; earlier runs' numbers are of the per-tensor loop), with synthetic
  pixels and token ids already on the device (the towers, heads, loss and optimiser step; no data loading): the
  largest batch that fits (doubling from half the paper's per-GPU batch), then at the paper's per-GPU
  batch each arm: ``before`` (the loss over all D columns: the code before the active-columns loss), ``active``
  (train/active.py: the default now), ``autograd-head`` (STAIR only: ``active`` with the plain [B, L, V]
  autograd head in place of models/maxproj.py), ``slab-256`` (STAIR only: maxproj's slabs of 256 rows,
  its CPU default, instead of 4,096; the 2026-11-27 run measured the reverse, ``slab-4096``, when 256
  was the default everywhere). Step time (median), pairs/s, peak memory (CUDA allocator).
- ``global_loss``: the loss alone at the paper's *global* batch (STAIR 16,384 x 30,522 with sparse
  synthetic vectors, Zipf-distributed tokens; Sparse CLIP 32,768 x 16,384 dense): ``before`` (all
  columns, the [B, B] logits every rank computed before the active-columns loss), ``active`` (the active columns)
  and ``local`` (one rank's rows at the per-GPU batch: what each rank computes now), time and peak memory.
- ``encode``: the release model's ``encode_files`` over 4,096 synthetic 500 x 375 JPEGs. Where the time
  goes: the host path's stages per image on one core (read, decode, resize) and its loader alone, the
  tower alone per precision and memory format, the device path's stages (read, decode, resize, tower,
  heads, top-n; profiled: each waits for the device); then end to end, the host path (today's, 8 decode
  workers) against the device path (data/device_decode.py: nvJPEG, the exact letterbox on the GPU, top-n
  on the device) at batch 256 / 512 in fp32, fp16, bf16; whether they agree (pixels, rows); writing the
  rows (part file, index); ``encode_to_index`` over tar shards; a ViT-B/16 STAIR (stair-paper's towers,
  random init, top 100 tokens) on the device path.
- ``gpu_days``: docs/scale.md's table from measured time instead of an assumed utilisation: per GPU-step
  = the ``active`` step at the per-GPU batch + one rank's loss (``local``), times the recipe's steps.
- ``open_clip``: open_clip's ViT-B-32 (random init) trained the same way at the dense baseline's batch,
  for an outside reference of the dense baseline's pairs/s; skipped when open_clip is not installed.
- ``compile`` (last: its compilation time is the least predictable): regional compilation (``compile_blocks``,
  the recipe's ``compile: blocks``: the towers' repeated transformer blocks, one compiled graph per kind
  of block; the heads' slab loops stay eager) of the ``active`` arm of stair-paper and
  sparse-clip-vitb32 with the per-tensor LAMB, against an eager step of the same run: compile seconds
  and step seconds apart (--tiny: dynamo with the eager backend; the CPU's inductor takes minutes).
- ``stair_step``: STAIR's step at the paper's per-GPU batch: where the library's step's time goes (device
  and host time per phase from CUDA events, then a torch.profiler summary: kernel time by kind, top kernels, the
  device's busy share, launches and syncs per step), then the step as the library ran it before
  (``eager``: the per-tensor LAMB, ``Lamb(foreach=False)``, nothing compiled) and with each change: the
  library's multi-tensor LAMB (``foreach_lamb``, its default now), the head's max taken in bf16
  (``low_precision_max``), slabs of 16,384 rows, without the batch metrics' host syncs, with
  ``compile_blocks`` (the recipe's ``compile: blocks``), and all but the metrics' removal together;
  model-FLOPs utilisation of each.
Each section gets a share of ``--budget`` (500 s, leaving room for start-up and an arm that overruns
inside a 600 s call; the last takes what is left) and the JSON is written after each, so a run cut
short keeps what it measured.
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

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import run_record  # noqa: E402

# config name -> (model config it is built from, recipe, paper per-GPU batch, GPUs in the paper)
MODELS = {"stair-paper": ("stair-paper", "stair-paper", 256, 64),
          "sparse-clip-vitb32": ("sparse-clip-vitb32", "sparse-clip-vitb32", 512, 64),
          "dense-clip-vitb32": ("sparse-clip-vitb32", "sparse-clip-vitb32", 512, 64)}
# in this order; each section's share of the time budget (a section ends early when its share is spent)
SECTIONS = ["throughput", "global_loss", "gpu_days", "encode", "open_clip", "smoke", "stair_step", "compile"]
SHARE = {"throughput": 0.25, "global_loss": 0.06, "gpu_days": 0.01, "encode": 0.27, "open_clip": 0.03,
         "smoke": 0.09, "stair_step": 0.42, "compile": 1.0}
BUDGET = 500  # seconds: every section in one call of a lent GPU machine (its limit: 600 s a command)
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

    from benchmarks.paper_costs import VOCAB_SIZE, random_init, synthetic_vocab
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
        # the recipe's ``compile: blocks``: inductor on a GPU, dynamo's tracing alone on a CPU (--tiny)
        compile_backend = "inductor" if device.type == "cuda" else "eager"

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
    before a6c32a8): the reference max_projection is measured against."""
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
    """Regional compilation (``compile_blocks``: each repeated transformer block of both towers compiled,
    one compiled graph reused by every block of a kind; the heads' slab loops stay eager) of the ``active``
    arm, per model: the seconds the first steps spend compiling apart from the steady step. (The whole
    towers' forward under torch.compile, ``ScaleTrainer(compile=True)``, was still compiling its first
    model after ~300 s on 2026-11-27.) Into the throughput results, next to an eager step of this run;
    stair-paper's are the ``stair_step`` section's arms when it ran first in this process (its
    compilation was the first, so cold: a second one here would find dynamo's and inductor's caches)."""
    for name in ("stair-paper", "sparse-clip-vitb32"):
        res = results.setdefault("throughput", {}).setdefault(name, {"batch": 4 if tiny else MODELS[name][2]})
        step = results.get("stair_step", {}) if name == "stair-paper" else {}
        for arm, changes, need in (("eager (compile section)", set(), 20), ("compile_blocks", {"compile"}, 60)):
            earlier = step.get("eager" if not changes else "compile_blocks")
            if earlier and "step_s" in earlier:
                res[arm] = {**earlier, "from": "the stair_step section of this run"}
            else:
                clock.check(need)
                res[arm] = step_arm(name, tiny, res["batch"], device, changes, 1 if tiny else 3, 2 if tiny else 8)
            print(f"compile {name} {arm}: {res[arm]}", flush=True)
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


# ---------------------------------------------------------------------------------------------- the step
def foreach_lamb(opt):
    """``opt`` (train/optim.py's Lamb: its groups, defaults and state) with the library's multi-tensor step
    (``torch._foreach`` kernels: a few launches per parameter group instead of ~15 per tensor; the
    library's default). The arms without ``foreach-lamb`` run ``Lamb(foreach=False)``, the per-tensor loop
    the library ran before: the same update, norms summed in another order (float rounding, not bits)."""
    from tokenspace.train.optim import Lamb

    class ForeachLamb(Lamb):
        """The library's Lamb, named for the arm (in profiles and tracebacks)."""

    new = ForeachLamb.__new__(ForeachLamb)
    new.__dict__.update(opt.__dict__)  # the same groups, defaults and (empty) state
    new.foreach = True
    return new


class _LowPrecisionMax(torch.autograd.Function):
    """models/maxproj.py's _MaxProjection whose forward takes each slab's max in the products' own dtype
    (bf16 under a bf16 recipe) instead of a float32 copy of the slab: the same values (widening is exact and
    keeps the order), a third of the slab's bytes. The backward is maxproj's own."""

    @staticmethod
    def forward(ctx, h, weight, bias, valid, compute_dtype):
        from tokenspace.models import maxproj

        B, L, _ = h.shape
        hc, wc = h.to(compute_dtype), weight.to(compute_dtype)
        best = torch.empty(B, weight.shape[0], dtype=compute_dtype, device=h.device)
        arg = torch.empty(B, weight.shape[0], dtype=torch.long, device=h.device)
        step = maxproj._chunk(B, L, h.device)
        for a in range(0, B, step):
            s = hc[a:a + step] @ wc.T  # [b, L, V] in compute_dtype
            if valid is not None:
                s.masked_fill_(~valid[a:a + step, :, None], float("-inf"))
            torch.max(s, dim=1, out=(best[a:a + step], arg[a:a + step]))
        ctx.save_for_backward(h, weight, arg)
        ctx.compute_dtype = compute_dtype
        return best.float() + bias.float()

    @staticmethod
    def backward(ctx, grad):
        from tokenspace.models import maxproj

        return maxproj._MaxProjection.backward(ctx, grad)


@contextlib.contextmanager
def low_precision_max():
    """STAIR's heads with _LowPrecisionMax in training (inference keeps max_projection)."""
    from tokenspace.models import stair

    saved = stair.max_projection

    def head(h, weight, bias, valid=None, compute_dtype=torch.float32):
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad or bias.requires_grad):
            return _LowPrecisionMax.apply(h, weight, bias, None if valid is None else valid.bool(), compute_dtype)
        return saved(h, weight, bias, valid, compute_dtype)

    stair.max_projection = head
    try:
        yield
    finally:
        stair.max_projection = saved


def compile_blocks(model, tiny: bool) -> int:
    """Regional compilation as the library's recipe ``compile: blocks`` does it (train/trainer.py's
    ``compile_blocks``: every repeated block of the two towers, one compiled graph per kind of block, in
    place). Returns how many blocks. --tiny: dynamo with the eager backend (the CPU's inductor takes
    minutes)."""
    from tokenspace.train.trainer import compile_blocks as library_compile_blocks

    return library_compile_blocks(model, backend="eager" if tiny else "inductor")


def _unique_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (-1 if its counter moved)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a counter's name moved: not worth failing the arm
        return -1


def forward_flops(name: str) -> dict:
    """Forward FLOPs per pair of each part (paper_costs.model_costs: counted on the meta device)."""
    from benchmarks.paper_costs import model_costs

    return model_costs(MODELS[name][0])["forward_flops"]


@contextlib.contextmanager
def no_batch_metrics():
    """The trainer's step without its batch sparsity metrics (three ``.item()`` reads, each a host sync)."""
    from tokenspace.train import trainer

    saved = trainer.batch_sparsity
    trainer.batch_sparsity = lambda image_emb, text_emb: {}
    try:
        yield
    finally:
        trainer.batch_sparsity = saved


STEP_CHANGES = ("foreach-lamb", "low-precision-max", "slab-16384", "no-batch-metrics", "compile")


def step_arm(name, tiny, batch, device, changes: set, warm: int, steps: int) -> dict:
    """One fresh model's ``active`` training step with ``changes`` (of STEP_CHANGES): the first ``warm``
    steps timed one by one (a compilation shows there), then the median of ``steps``. Out of memory is a
    result."""
    unknown = set(changes) - set(STEP_CHANGES)
    if unknown:
        raise ValueError(f"unknown step changes {sorted(unknown)}")
    t = opt = model = None
    graphs = _unique_graphs()
    try:
        model, recipe = build(name, tiny)
        with contextlib.ExitStack() as stack:
            if "low-precision-max" in changes:
                stack.enter_context(low_precision_max())
            if "slab-16384" in changes:
                stack.enter_context(slab_rows(16384))
            if "no-batch-metrics" in changes:
                stack.enter_context(no_batch_metrics())
            # compile: the library's recipe option (the trainer compiles the blocks as it sets the model up)
            recipe.compile = "blocks" if "compile" in changes else None
            t, stage, opt = trainer_for(model, recipe, batch, device)
            # the library's LAMB runs multi-tensor by default; the other arms run its per-tensor reference,
            # the step as it was before (what ``eager`` measures)
            opt = foreach_lamb(opt) if "foreach-lamb" in changes else opt
            opt.foreach = "foreach-lamb" in changes
            n_blocks = t.compiled_blocks
            idx = np.arange(batch)
            reset_peak(device)
            first, losses = [], []
            for s in range(warm):
                sync(device)
                t0 = time.perf_counter()
                losses.append(t.step(idx, stage, s, opt)["loss"])
                first.append(time.perf_counter() - t0)
            times = []
            for s in range(steps):
                sync(device)
                t0 = time.perf_counter()
                losses.append(t.step(idx, stage, warm + s, opt)["loss"])
                times.append(time.perf_counter() - t0)
            step = float(np.median(times))
            res = {"batch": batch, "changes": sorted(changes), "precision": t.precision, "step_s": step,
                   "pairs_per_s": batch / step, "first_steps_s": [round(x, 3) for x in first],
                   "peak_mib": peak_mib(device), "losses": [round(v, 5) for v in losses],
                   "finite": bool(np.isfinite(losses).all())}
            if n_blocks:
                # what the first steps spent beyond a steady step: compiling (forward, then backward)
                res.update(compiled_blocks=n_blocks, compile_s=round(sum(first) - len(first) * step, 2),
                           compiled_graphs=_unique_graphs() - graphs)
            return res
    except oom_errors() as e:
        return {"batch": batch, "changes": sorted(changes), "error": f"out of memory: {str(e)[:200]}"}
    finally:
        model = t = opt = None
        gc.collect()
        reset_peak(device)


def mfu(flops: dict, batch: int, step_s: float, peak: float = 989e12) -> dict:
    """Model-FLOPs utilisation of a training step in which every part learns: 3 x the forward FLOPs per pair
    x the batch (the per-GPU loss is left out: ~0.1% at this batch) over the step time and the dense bf16
    peak (989 TFLOP/s for an H100 / H200 SXM, paper_costs.PEAK)."""
    per_step = 3 * sum(v for k, v in flops.items() if k != "text_head_restricted") * batch
    return {"model_tflop_per_step": round(per_step / 1e12, 2), "tflop_per_s": round(per_step / step_s / 1e12, 1),
            "mfu": round(per_step / step_s / peak, 4)}


def phase_profile(name, tiny, batch, device, steps: int) -> dict:
    """Where a STAIR step's time goes: device time and host time per phase (towers + heads, active columns +
    loss, backward, optimiser, the rest: metrics and their host syncs) from CUDA events and host clocks at the
    phase boundaries, then torch.profiler over two steps: kernel time by kind, the top kernels, the device's
    busy share, kernel launches and host syncs per step."""
    from torch.profiler import ProfilerActivity, profile

    model, recipe = build(name, tiny)
    t, stage, opt = trainer_for(model, recipe, batch, device)
    cuda = device.type == "cuda"
    marks: list = []

    def mark(label: str) -> None:
        ev = None
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
        marks.append((label, ev, time.perf_counter()))

    forward, loss_fn, real_step, scaler = t._forward, t.loss_fn, opt.step, t.scaler

    def fwd(*a, **k):
        mark("start")
        out = forward(*a, **k)
        mark("towers + heads")
        return out

    def loss(*a, **k):
        out = loss_fn(*a, **k)
        mark("active columns + loss")
        return out

    class Scaled:
        def __init__(self, x):
            self.x = x

        def backward(self):
            scaler.scale(self.x).backward()
            mark("backward")

    class Scaler:
        scale = staticmethod(Scaled)

        @staticmethod
        def step(o):
            scaler.step(o)

        @staticmethod
        def update():
            scaler.update()

    def opt_step(*a, **k):
        out = real_step(*a, **k)
        mark("optimizer")
        return out

    t._forward, t.loss_fn, t.scaler, opt.step = fwd, loss, Scaler(), opt_step
    idx = np.arange(batch)
    for s in range(2):
        t.step(idx, stage, s, opt)
    marks.clear()
    for s in range(steps):
        t.step(idx, stage, 2 + s, opt)
        mark("rest: metrics, host syncs")
    sync(device)
    phases: dict[str, dict[str, list]] = {}
    for (_, e0, h0), (label, e1, h1) in zip(marks, marks[1:]):
        if label == "start":
            continue
        p = phases.setdefault(label, {"device_ms": [], "host_ms": []})
        p["host_ms"].append(1e3 * (h1 - h0))
        if cuda:
            p["device_ms"].append(e0.elapsed_time(e1))
    out = {"batch": batch, "steps": steps,
           "phases": {k: {m: round(float(np.median(v)), 2) for m, v in p.items() if v} for k, p in phases.items()}}
    # the profiler: two steps
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    t._forward, t.loss_fn, t.scaler, opt.step = forward, loss_fn, scaler, real_step
    sync(device)
    w0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for s in range(2):
            t.step(idx, stage, 10 + s, opt)
        sync(device)
    wall_us = 1e6 * (time.perf_counter() - w0)
    out["profiler"] = trace_summary(prof, wall_us, 2)
    model = t = opt = None
    gc.collect()
    reset_peak(device)
    return out


def trace_summary(prof, wall_us: float, steps: int) -> dict:
    """torch.profiler's trace (its Chrome-trace export: a stable format) summed per step: kernel time by
    kind and the top kernels, the share of the wall time some kernel ran (device busy), kernel launches,
    scalar reads (``.item()`` / ``float()``: of CPU tensors too) and stream synchronisations."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    kinds: dict[str, float] = {}
    per_name: dict[str, float] = {}
    spans = []
    launches = items = syncs = 0
    for e in events:
        cat, name, dur = e.get("cat", ""), e.get("name", ""), float(e.get("dur", 0) or 0)
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            n = name.lower()
            kind = ("memcpy / memset" if cat != "kernel" else
                    "matmul" if any(k in n for k in ("gemm", "cutlass", "nvjet", "xmma", "sm90_", "cublas")) else
                    "attention" if any(k in n for k in ("flash", "fmha", "attention", "efficient")) else
                    "multi-tensor (foreach)" if "multi_tensor" in n or "foreach" in n else
                    "elementwise / reduction / other")
            kinds[kind] = kinds.get(kind, 0.0) + dur
            per_name[name] = per_name.get(name, 0.0) + dur
            spans.append((float(e["ts"]), float(e["ts"]) + dur))
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            launches += "launchkernel" in name.lower().replace("_", "")
            syncs += name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
        elif name == "aten::_local_scalar_dense":
            items += 1
    busy, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            busy, end = busy + b - a, b
        elif b > end:
            busy, end = busy + b - end, b
    ms = 1e3 * steps
    return {"steps": steps, "wall_ms_per_step": round(wall_us / ms, 2),
            "kernel_ms_per_step": round(sum(kinds.values()) / ms, 2),
            "device_busy_share": round(busy / wall_us, 4) if spans else None,
            "by_kind_ms_per_step": {k: round(v / ms, 3) for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "top_kernels_ms_per_step": [[n[:100], round(v / ms, 3)] for n, v in
                                        sorted(per_name.items(), key=lambda kv: -kv[1])[:15]],
            "kernel_launches_per_step": launches / steps, "scalar_reads_per_step": items / steps,
            "stream_syncs_per_step": syncs / steps}


def stair_step(device, tiny, clock, out: dict, save, only: list[str] | None = None) -> None:
    """STAIR's training step at the paper's per-GPU batch (256): where its time goes (``phase_profile``),
    then the step with each change and all together, with model-FLOPs utilisation."""
    name, batch = "stair-paper", 4 if tiny else MODELS["stair-paper"][2]
    warm, steps = (1, 2) if tiny else (3, 8)
    flops = forward_flops(name)
    out["forward_gflop_per_pair"] = {k: round(v / 1e9, 3) for k, v in flops.items()}
    if not only or "profile" in only:
        clock.check(20)
        try:
            out["profile"] = phase_profile(name, tiny, batch, device, 2 if tiny else 5)
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001 - recorded: the arms still run
            out["profile"] = {"error": f"{type(e).__name__}: {e}"}
        print(f"stair step profile: {out['profile']}", flush=True)
        save()
    arms = [("eager", set()), ("foreach-lamb", {"foreach-lamb"}), ("low-precision-max", {"low-precision-max"}),
            ("slab-16384", {"slab-16384"}), ("no-batch-metrics", {"no-batch-metrics"}),
            ("compile_blocks", {"compile"}),  # the first compilation of these blocks in this process: cold
            ("foreach-lamb + compile_blocks", {"foreach-lamb", "compile"}),
            ("all but no-batch-metrics", {"foreach-lamb", "low-precision-max", "slab-16384", "compile"})]
    if only:
        arms = [a for a in arms if a[0] in only]
    for label, changes in arms:
        clock.check(60 if label == "compile_blocks" else 15)
        r = out[label] = step_arm(name, tiny, batch, device, changes, warm, steps)
        if "step_s" in r:
            r.update(mfu(flops, batch, r["step_s"]))
        print(f"stair step {label}: {r}", flush=True)
        save()
    base = out.get("eager", {}).get("pairs_per_s")
    if base:
        out["speed-up vs eager"] = {k: round(v["pairs_per_s"] / base, 3) for k, v in out.items()
                                    if isinstance(v, dict) and "pairs_per_s" in v}


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
            # before: all D columns, [B, B] logits on every rank (the code before the active-columns loss);
            # active: the active columns; local: and one rank's rows at the per-GPU batch (the default now)
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
def _jpegs(folder: Path, n: int) -> list[Path]:
    """``n`` synthetic 500 x 375 JPEGs (quality 90): smooth random images (a noise field compresses badly
    and decodes slowly), the ImageNet-size photos of docs/scale.md's encode tables."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:05d}.jpg" for i in range(n)]

    def write(i: int) -> None:
        if not paths[i].exists():
            small = np.random.default_rng(i).integers(0, 256, (12, 16, 3), dtype=np.uint8)
            Image.fromarray(small).resize((500, 375), Image.BICUBIC).save(paths[i], quality=90)

    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:  # PIL encodes outside the GIL
        list(pool.map(write, range(n)))
    return paths


def _rate(n: int, seconds: float) -> dict:
    return {"images": n, "seconds": round(seconds, 4), "images_per_s": round(n / seconds, 1) if seconds else None}


def host_stages(paths, prep, n: int) -> dict:
    """The host path's per-image stages on one core (what each DataLoader worker does): read the file,
    decode it (Pillow), letterbox + resize + normalise (data/preprocess.py)."""
    from tokenspace.data.images import load_image
    from tokenspace.data.webdataset import decode_image_bytes

    sub = paths[:n]
    t0 = time.perf_counter()
    blobs = [Path(p).read_bytes() for p in sub]
    t1 = time.perf_counter()
    imgs = [decode_image_bytes(b, str(p)) for b, p in zip(blobs, sub)]
    t2 = time.perf_counter()
    for im in imgs:
        prep(im)
    t3 = time.perf_counter()
    load_image(sub[0])
    return {"images": len(sub), "read_ms": 1e3 * (t1 - t0) / len(sub), "decode_ms": 1e3 * (t2 - t1) / len(sub),
            "resize_ms": 1e3 * (t3 - t2) / len(sub),
            "one_core_images_per_s": round(len(sub) / (t3 - t0), 1)}


def tower_rates(model, device, batch: int, reps: int) -> dict:
    """The image tower alone (``model.image_grid``: for the release model both of its sizes) on random
    pixels already on the device, per precision and memory format (cudnn.benchmark on): images/s."""
    out = {}
    size = model.image_tower.image_size
    x = torch.randn(batch, 3, size, size, device=device)
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        for prec in ("fp32", "bf16", "fp16"):
            for layout in ("channels_last", "nchw"):
                xx = x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x
                dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
                with torch.inference_mode(), torch.autocast(device.type, dtype=dtype or torch.float32,
                                                            enabled=dtype is not None):
                    for _ in range(2):
                        model.image_grid(xx)
                    sync(device)
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        model.image_grid(xx)
                    sync(device)
                out[f"{prec} {layout}"] = round(batch * reps / (time.perf_counter() - t0), 1)
    finally:
        torch.backends.cudnn.benchmark = saved
    return out


def rows_agreement(a, b) -> dict:
    """Two encodings of the same images: mean / min Jaccard of each row's token set, and the largest
    weight difference on the tokens both keep."""
    jac, diff = [], 0.0
    for i in range(len(a)):
        ia, va = a.row(i)
        ib, vb = b.row(i)
        sa, sb = set(ia.tolist()), set(ib.tolist())
        jac.append(len(sa & sb) / max(1, len(sa | sb)))
        common, xa, xb = np.intersect1d(ia, ib, return_indices=True)
        if len(common):
            diff = max(diff, float(np.abs(va[xa] - vb[xb]).max()))
    return {"rows": len(a), "jaccard_mean": round(float(np.mean(jac)), 5), "jaccard_min": round(float(np.min(jac)), 5),
            "identical_rows": int(sum(j == 1.0 for j in jac)), "max_weight_diff_common": diff}


def pixel_agreement(model, paths, device) -> dict:
    """The device path's model inputs (nvJPEG on a GPU, then device_decode.letterbox) against the host
    path's (Pillow + data/preprocess.py), on the 0..255 scale."""
    from tokenspace.data import device_decode as dd
    from tokenspace.data.images import load_image
    from tokenspace.data.loader import Preprocess

    prep = Preprocess.for_model(model)
    ds = dd.RawFiles(paths, jpeg_bytes=True)
    batch = dd.collate_raw([ds[i] for i in range(len(ds))])
    imgs, keep, failed = dd.decode_batch(batch, device)
    got = dd.letterbox(imgs, prep.image_size, prep.mean, prep.std).cpu()
    want = torch.stack([prep(load_image(batch["keys"][p])) for p in keep])
    std = torch.tensor(prep.std, dtype=torch.float32)[None, :, None, None]
    d = ((got - want) * std).abs()
    return {"images": len(keep), "failed": len(failed), "nvjpeg": device.type == "cuda" and dd.nvjpeg_available(),
            "max_abs_levels": round(float(d.max()), 3), "mean_abs_levels": round(float(d.mean()), 5),
            "share_of_values_differing": round(float((d > 0.01).float().mean()), 5)}


def attempt(out: dict, key: str, fn, *args, **kw):
    """``out[key] = fn(...)``, or the error it raised (the budget's TimeoutError goes on up), printed."""
    try:
        out[key] = fn(*args, **kw)
    except TimeoutError:
        raise
    except Exception as e:  # noqa: BLE001 - recorded: the next measurements still run
        out[key] = {"error": f"{type(e).__name__}: {e}"}
    print(f"encode {key}: {out[key]}", flush=True)
    return out[key]


def timed_encode(model, paths, runs: int, device, **kw) -> tuple[dict, object]:
    """``encode_files(model, paths, **kw)`` ``runs`` times: the fastest run's images/s and the rows."""
    from tokenspace.encode import encode_files

    times = []
    for _ in range(runs):
        sync(device)
        t0 = time.perf_counter()
        rows, kept = encode_files(model, paths, **kw)
        sync(device)
        times.append(time.perf_counter() - t0)
    return {**_rate(len(kept), min(times)), "runs_s": [round(x, 3) for x in times],
            "nnz_mean": float(np.diff(rows.indptr).mean()) if len(rows) else 0.0}, rows


def profiled_encode(model, paths, **kw) -> dict:
    """The device path's seconds per stage (``encode_files(..., profile=)``: each stage waits for the device)."""
    from tokenspace.encode import encode_files

    prof = {}
    t0 = time.perf_counter()
    encode_files(model, paths, decode="device", profile=prof, **kw)
    wall = time.perf_counter() - t0
    return {**_rate(len(paths), wall), "seconds_per_stage": {k: round(v, 4) for k, v in prof.items()},
            "stage_images_per_s": {k: round(len(paths) / v, 1) for k, v in prof.items() if v}}


def encode_arms(model, paths, device, tiny, clock, out: dict, workers: int, big: int, quick: bool = False):
    """End to end (not profiled), the old path first (today's measurement repeated on this machine), then the
    device path (nvJPEG; and Pillow in the workers: ``jpeg="pillow"``); then whether they agree: pixels
    (nvJPEG + device letterbox against Pillow + preprocess) and rows. Returns (rows per arm, the first
    device fp32 arm's key)."""
    n = len(paths)
    device_arms = [(8, "fp32", "nvjpeg"), (8, "fp32", "pillow"), (8, "bf16", "nvjpeg")] if tiny else \
        [(512, "fp32", "nvjpeg"), (512, "fp32", "pillow")] if quick else \
        [(256, "fp32", "nvjpeg"), (512, "fp32", "nvjpeg"), (512, "fp32", "pillow"), (512, "fp16", "nvjpeg"),
         (512, "bf16", "nvjpeg")]
    if quick:  # a warm-up: cudnn's tuning at batch 512
        attempt(out, "device warm-up", lambda: len(encode_files_(model, paths[:big], batch_size=big,
                                                                 workers=workers, decode="device")[1]))
    arms = [("host", 256, "fp32", "-", 8 if tiny else 2048, 1)] + [
        ("device", bs, prec, jpeg, n, 1 if tiny else 2) for bs, prec, jpeg in device_arms]
    rows = {}
    for path, bs, prec, jpeg, m, runs in arms:
        key = f"{path} batch {bs} {prec}" + ("" if jpeg in ("-", "nvjpeg") else f" {jpeg}")
        clock.check(10 if path == "device" else 15)

        def arm():
            kw = {"jpeg": jpeg} if path == "device" else {}
            res, rows[key] = timed_encode(model, paths[:m], runs, device, batch_size=bs, workers=workers,
                                          decode=path, precision=prec, **kw)
            return res

        attempt(out, f"end_to_end {key}", arm)
    clock.check(5)
    agree = out["agreement"] = {}
    attempt(agree, "pixels", pixel_agreement, model, paths[:8 if tiny else 64], device)
    host = rows.get("host batch 256 fp32")
    first = next((k for k in rows if k.startswith("device") and k.endswith("fp32")), None)
    if host is not None:
        for k in rows:
            if k.startswith("device") and "fp32" in k:
                attempt(agree, f"{k} vs host fp32", rows_agreement, rows[k][:len(host)], host)
    if first is not None:
        for k in rows:
            if k.startswith("device") and "fp32" not in k:
                attempt(agree, f"{k} vs {first}", rows_agreement, rows[k], rows[first])
    return rows, first


def encode_files_(*a, **kw):
    from tokenspace.encode import encode_files

    return encode_files(*a, **kw)


def encode(device, tiny, clock, out: dict, work: Path, quick: bool = False) -> None:
    """The release model's ``encode_files`` from JPEG files: where the time goes on each path, then end to
    end, old (host decode) against new (device decode), and a ViT-B/16 STAIR (stair-paper's towers).
    ``quick``: the end-to-end arms at batch 512 in fp32 only and whether they agree."""
    import tokenspace
    from tokenspace.data import device_decode as dd
    from tokenspace.data.loader import Preprocess, files_loader
    from tokenspace.encode import encode_files, encode_to_index
    from tokenspace.index import InvertedIndex

    clock.check(30)
    try:
        import torchvision
        tv = torchvision.__version__
    except Exception as e:  # noqa: BLE001 - recorded: the device path then decodes JPEGs in the workers
        tv = f"not importable: {type(e).__name__}: {e}"
    out["env"] = {"torchvision": tv, "nvjpeg": dd.nvjpeg_available(), "cpu_cores": os.cpu_count()}
    n = 24 if tiny else 4096
    paths = _jpegs(work / "jpegs", n)
    model = tokenspace.load(str(RELEASE)).to(device)
    prep = Preprocess.for_model(model)
    workers = 0 if tiny else min(8, (os.cpu_count() or 2) - 1)
    big = 8 if tiny else 512
    out["setup"] = {"images": n, "jpeg": "500 x 375, quality 90", "workers": workers, "model": RELEASE.name}
    print(f"encode env: {out['env']}", flush=True)

    # 1. where the time goes: the host path's stages per image on one core, its loader alone (workers),
    # the tower alone per precision / layout, and the device path's stages (profiled: synchronised)
    if quick:
        out["setup"]["quick"] = True
        encode_arms(model, paths, device, tiny, clock, out, workers, big, quick=True)
        return
    attempt(out, "host_stages", host_stages, paths, prep, 8 if tiny else 256)

    def loader_alone():
        m = 8 if tiny else 2048
        t0 = time.perf_counter()
        got = sum(len(b["index"]) for b in files_loader(paths[:m], prep, 256, workers=workers, device=device))
        return {**_rate(got, time.perf_counter() - t0), "workers": workers}

    clock.check(15)
    attempt(out, "host_loader_alone", loader_alone)
    clock.check(15)
    attempt(out, "tower_alone images_per_s", tower_rates, model, device, 4 if tiny else 256, 1 if tiny else 5)
    attempt(out, "device warm-up", lambda: [len(encode_files(model, paths[:big], batch_size=bs, workers=workers,
                                                             decode="device")[1]) for bs in (big // 2, big)])
    for bs in ([8] if tiny else [256, 512]):
        clock.check(10)
        attempt(out, f"device_stages batch {bs}", profiled_encode, model, paths[:16 if tiny else 2048],
                batch_size=bs, workers=workers)

    rows, first = encode_arms(model, paths, device, tiny, clock, out, workers, big)
    # 4. writing: the rows as a part file, then into an index (what encode_parts does per part)
    def write():
        r = rows[first]
        ids = [f"img{i}" for i in range(len(r))]
        t0 = time.perf_counter()
        r.save(work / "rows.npz")
        t1 = time.perf_counter()
        index = InvertedIndex(len(model.vocab), model.vocab)
        index.add(r, ids)
        index.save(work / "index")
        t2 = time.perf_counter()
        return {"rows": len(r), "part_file_s": round(t1 - t0, 4), "index_add_save_s": round(t2 - t1, 4),
                "images_per_s": round(len(r) / (t2 - t0), 1)}

    clock.check(5)
    if first is not None:
        attempt(out, "write", write)

    # 5. a collection in shards into an index (tokenspace encode's road): parts written while the next encodes
    def to_index():
        from tokenspace.data.webdataset import TarCollection, write_shards

        write_shards(((f"k{i:05d}", p.read_bytes(), "a photo") for i, p in enumerate(paths)),
                     str(work / "shards" / "s-%03d.tar"), per_shard=max(1, n // 4), image_ext="jpg")
        c = TarCollection.open(str(work / "shards" / "s-*.tar"))
        t0 = time.perf_counter()
        idx = encode_to_index(model, c, work / "idx", work / "parts", part_size=max(8, n // 4), batch_size=big,
                              workers=workers, decode="device")
        return {**_rate(len(idx), time.perf_counter() - t0), "part_size": max(8, n // 4), "batch": big}

    clock.check(15)
    attempt(out, "encode_to_index device batch 512 fp32", to_index)

    # 6. a ViT-B/16 STAIR (stair-paper's towers and heads, random init; rows cut to their 100 heaviest
    # tokens as the release model's): the device path, bf16 (the recipe's precision) and fp32
    model = None
    gc.collect()
    reset_peak(device)
    clock.check(25)
    vit, _ = build("stair-paper", tiny)
    vit = vit.to(device).eval()
    vit.image_top_n = 100
    m = 8 if tiny else 4096
    attempt(out, "vit-b16 stair warm-up", lambda: len(encode_files(
        vit, paths[:big], batch_size=big, workers=workers, decode="device", precision="bf16")[1]))
    for bs, prec in ([(8, "bf16")] if tiny else [(256, "bf16"), (512, "bf16"), (256, "fp32")]):
        clock.check(10)

        def vit_arm():
            res, _ = timed_encode(vit, paths[:m], 1, device, batch_size=bs, workers=workers, decode="device",
                                  precision=prec)
            return {**res, "peak_mib": peak_mib(device)}

        attempt(out, f"vit-b16 stair device batch {bs} {prec}", vit_arm)
    clock.check(10)
    attempt(out, "vit-b16 stair device_stages batch 256 bf16", profiled_encode, vit, paths[:16 if tiny else 2048],
            batch_size=256 if not tiny else 8, workers=workers, precision="bf16")


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
    from benchmarks import gpu_smoke

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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["smoke"]:  # the smoke run alone, at its own step count (make gpu-smoke)
        from benchmarks import gpu_smoke  # start-up: only this subcommand needs it

        sys.argv = ["python -m benchmarks.gpu_run smoke", *argv[1:]]
        return gpu_smoke.cli(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="toy width on the CPU: the same code paths, about a minute")
    ap.add_argument("--sections", nargs="+", default=SECTIONS, choices=SECTIONS)
    ap.add_argument("--budget", type=float, default=None,
                    help=f"seconds for the whole run (default {BUDGET}; tiny 300)")
    ap.add_argument("--encode-arms", choices=("all", "quick"), default="all",
                    help="quick: the encode section's end-to-end arms at batch 512 fp32 and their agreement only")
    ap.add_argument("--step-arms", nargs="+", default=None, metavar="LABEL",
                    help="the stair_step section's arms to run (labels as in its results, 'profile' for the profile; "
         "default all)")
    ap.add_argument("--merge", type=Path, default=None,
                    help="start from this results JSON: sections not run keep its numbers (a rerun of some)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON results (default benchmarks/results/gpu_run.json; tiny: not written unless given)")
    a = ap.parse_args(argv)
    if not a.tiny and not torch.cuda.is_available():
        print("gpu_run: no CUDA GPU here; run with --tiny for the CPU check", file=sys.stderr)
        return 2
    device = torch.device("cpu") if a.tiny else torch.device("cuda", 0)
    budget = a.budget or (300 if a.tiny else BUDGET)  # tiny: a cap for a loaded machine
    end = time.time() + budget
    threads = torch.get_num_threads()
    if a.tiny:
        torch.set_num_threads(1)  # a check of the code paths: leave the other cores alone
    out = a.out if a.out is not None or a.tiny else ROOT / "benchmarks" / "results" / "gpu_run.json"
    results = {**run_record(__file__, argv), "torch": torch.__version__,
               "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0) if not a.tiny else
               f"cpu ({platform.machine()}, {os.cpu_count()} cores)", "sections": {}}
    try:
        import torchvision
        results["torchvision"] = torchvision.__version__
    except Exception as e:  # noqa: BLE001 - the CPU machines have none; the device decode then falls back
        results["torchvision"] = f"not importable: {type(e).__name__}"
    print(f"gpu_run: torch {results['torch']} (CUDA {results['cuda']}), torchvision {results['torchvision']}, "
          f"{results['device']}, {os.cpu_count()} CPU cores", flush=True)
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
                        encode(device, a.tiny, clock, part, Path(tmp), quick=a.encode_arms == "quick")
                    elif section == "gpu_days":
                        gpu_days(results["sections"], part)
                    elif section == "open_clip":
                        open_clip_reference(device, a.tiny, clock, results["sections"], part)
                    elif section == "compile":
                        compiled(device, a.tiny, clock, results["sections"], save)
                    else:
                        stair_step(device, a.tiny, clock, part, save, a.step_arms)
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
