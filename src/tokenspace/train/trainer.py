"""The trainer: one loop for every family, driven by a Recipe's stage plan, on cached backbone grids.

Run folder layout:
    log.jsonl       one JSON object per step: stage, lr, named loss parts, sparsity (nnz, FLOPs)
    checkpoint/     latest checkpoint: model/ (save_pretrained), optimizer.pt, trainer.json; replaced
                    atomically, so a crash leaves the previous one intact
    model/          the final model (save_pretrained)
Resume: ``Trainer(...).fit(resume=True)`` continues from checkpoint/ at the exact step.

Regional compilation (recipe ``compile: blocks``): ``_setup_model`` compiles each repeated block of the
towers that learn (``compile_blocks``), and ``fit`` undoes it at its end (evaluations inside a run
execute the blocks eagerly); the heads, the loss and the optimizer stay eager.

Under torchrun every rank runs the same loop on its shard of each global batch (train/ranks.py, train/distributed.py);
rank 0 alone writes the log, checkpoints and the final model. ``data.inputs`` holds cached backbone
grids, pixels when the recipe trains the image tower end to end (``train_image_from: all``), or the
cached activations at block k's input when it trains the tower's top from block k.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import pickle
import shutil
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_model
from tqdm.auto import tqdm

from tokenspace import atomic
from tokenspace.models.capabilities import GradCheckpointing, LowPrecisionHeads, RestrictsText, require
from tokenspace.models.card import run_info
from tokenspace.models.dual import DualEncoder
from tokenspace.train import active, precision, ranks

# the teacher scores a distilling run trains against; teacher_scores builds them (pipeline.train imports
# it from here with the Trainer: one start-up import for both)
from tokenspace.train.distill import TeacherScores, teacher_scores  # noqa: F401 - teacher_scores re-exported
from tokenspace.train.losses import SparseContrastiveLoss
from tokenspace.train.optim import build_optimizer

# training pairs are built in pairs.py (numpy only, no torch); the trainer's callers import them from here too
from tokenspace.train.pairs import PairData  # noqa: F401 - re-exported
from tokenspace.train.recipe import Recipe, Stage

logger = logging.getLogger(__name__)  # `log` is fit's log.jsonl


class BatchSampler:
    """Endless batches of distinct groups: each epoch shuffles groups and draws one member of each."""

    def __init__(self, groups: np.ndarray, batch_size: int, rng: np.random.Generator):
        order = np.argsort(groups, kind="stable")
        bounds = np.flatnonzero(np.diff(groups[order])) + 1
        self.members = np.split(order, bounds)
        if len(self.members) < 2:
            raise ValueError("need at least 2 distinct groups for contrastive batches")
        self.batch_size = min(batch_size, len(self.members))
        self.rng = rng
        self._queue: list[int] = []

    def next(self) -> np.ndarray:
        if len(self._queue) < self.batch_size:
            perm = self.rng.permutation(len(self.members))
            self._queue = [int(self.rng.choice(self.members[g])) for g in perm]
        batch, self._queue = self._queue[: self.batch_size], self._queue[self.batch_size :]
        return np.sort(np.array(batch))


def lr_at(stage: Stage, step: int) -> float:
    """Linear warm-up to the stage's lr, then decay to 0 at the stage's end: linear, or cosine as
    OpenCLIP's ``cosine_lr`` (0.5 * (1 + cos(pi * e / es)) * lr, e steps past the warm-up of es)."""
    if stage.warmup_steps and step < stage.warmup_steps:
        return stage.lr * (step + 1) / stage.warmup_steps
    span = max(1, stage.steps - stage.warmup_steps)
    done = min(1.0, max(0.0, (step - stage.warmup_steps) / span))
    if stage.schedule == "cosine":
        return stage.lr * 0.5 * (1 + math.cos(math.pi * done))
    return stage.lr * (1 - done)


def batch_sparsity(image_emb: torch.Tensor, text_emb: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        if image_emb.shape[1] != text_emb.shape[1]:
            return {}
        pi, pt = (image_emb > 0).float(), (text_emb > 0).float()
        return {
            "nnz_image": pi.sum(1).mean().item(),
            "nnz_text": pt.sum(1).mean().item(),
            # expected multiply-adds of an image-text dot product (the retrieval cost FLOPs measures)
            "flops": (pi.mean(0) * pt.mean(0)).sum().item(),
        }


class _Embed(torch.nn.Module):
    """One module call for both towers (what DDP wraps): (inputs, ids, mask) -> embeddings + scale.
    The logit scale is returned, not read from the model by the loss, so DDP sees it used.
    ``image_from``: None (x = final grids), "all" (x = pixels) or a block index k (x = cached
    activations at block k's input, run through the tower's top)."""

    def __init__(self, model: DualEncoder, image_from: int | str | None):
        super().__init__()
        self.model, self.image_from = model, image_from

    def forward(self, x, ids, mask, restrict_text: bool):
        m, at = self.model, self.image_from
        if at == "all":
            grid = m.image_grid(x)  # pixels [b, 3, S, S]
        elif at is not None:
            grid = m.image_tower.top(x, at)  # block-k activations -> [b, C, h, w]
        else:
            grid = x  # cached final grids [b, C, h, w]
        # only a RestrictsText model takes restrict_to_input (the Trainer checked it); the others are
        # called with the two arguments every family takes
        text = m.text_embed(ids, mask, restrict_to_input=True) if restrict_text else m.text_embed(ids, mask)
        return m.image_embed(grid), text, m.logit_scale


class _ScaleFrom:
    """The model as the loss sees it, with the logit scale computed inside the DDP forward."""

    def __init__(self, model, scale):
        self._model, self.logit_scale = model, scale

    def __getattr__(self, name):
        return getattr(self._model, name)


class Trainer:
    # the loss over the columns active somewhere in the global batch (train/active.py): the same values
    # and gradients, cheaper for sparse batches; False scores all D columns (benchmarks compare the two)
    sparse_loss = True
    # torch.compile's backend for the recipe's ``compile: blocks``: inductor generates the kernels;
    # "eager" (dynamo's tracing alone) is for checks of the code path on CPUs, where inductor's C++
    # compilation takes long
    compile_backend = "inductor"

    def __init__(self, model: DualEncoder, recipe: Recipe, data: PairData, out_dir: str | os.PathLike,
                 evaluate: Callable[[DualEncoder], dict] | None = None, progress: bool = True,
                 teacher: TeacherScores | None = None):
        """``teacher``: the teacher's scores of ``data``'s pairs (train/distill.py), needed when the recipe
        distils (loss.distill > 0) and not consulted otherwise."""
        self.model, self.recipe, self.data = model, recipe, data
        self.out = Path(out_dir)
        self.evaluate = evaluate
        self.dist = ranks.context()
        self.device = self.dist.device if self.dist.enabled else torch.device("cpu")
        self.progress = progress and self.dist.is_main
        self.precision = precision.resolve(recipe.precision, self.device)
        # fp16 needs loss scaling (its range underflows small gradients); bf16 and fp32 do not
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        # the part of the image tower that learns: None, "all" or a block index (recipe.train_image_from)
        f = recipe.train_image_from
        self.image_from = model.image_tower.split_index(f) if f not in (None, "all") else f
        self._embed = _Embed(model, self.image_from)
        self._forward = self._embed
        self.loss_fn = SparseContrastiveLoss(recipe.lambda_image, recipe.lambda_text, recipe.flops_warmup,
                                             recipe.flops_reference_batch, distill=recipe.distill)
        self.teacher = teacher if recipe.distill else None
        if recipe.distill and teacher is None:
            raise ValueError("recipe loss.distill > 0 needs the teacher's scores: Trainer(..., teacher="
                             "train.distill.TeacherScores) (pipeline.train builds them from "
                             "loss.distill_teacher)")
        if self.teacher is not None and len(self.teacher) != len(data):
            raise ValueError(f"teacher scores cover {len(self.teacher)} pairs, the training data "
                             f"{len(data)}")
        if any(s.restrict_text for s in recipe.stages):
            require(model, RestrictsText, "a restrict_text stage")

    # ------------------------------------------------------------------ optimisation
    def _trainable(self, stage: Stage) -> list[torch.nn.Parameter]:
        # the backbone is frozen whenever we train on cached grids (all of it, or the trunk below
        # train_image_from's block); stage 2 also freezes the image head (and the tower's top)
        tower = self.model.image_tower
        frozen = set() if self.image_from == "all" else {id(p) for p in tower.parameters()}
        if isinstance(self.image_from, int):
            frozen -= {id(p) for p in tower.top_parameters(self.image_from)}
        if stage.freeze_image:
            frozen |= {id(p) for p in self.model.image_parameters()}
        params = []
        for p in self.model.parameters():
            p.requires_grad_(id(p) not in frozen)
            if p.requires_grad:
                params.append(p)
        return params

    def _optimizer(self, params) -> torch.optim.Optimizer:
        text = {id(p) for p in self.model.text_tower.parameters()}
        image = {id(p) for p in self.model.image_tower.parameters()}  # trained: its top, or all of it
        groups = []
        for scale, members in ((self.recipe.text_lr_scale, [p for p in params if id(p) in text]),
                               (self.recipe.image_lr_scale, [p for p in params if id(p) in image]),
                               (1.0, [p for p in params if id(p) not in text | image])):
            decay = [p for p in members if p.ndim >= 2]
            no_decay = [p for p in members if p.ndim < 2]  # biases, norms and the logit scale
            groups += [{"params": decay, "weight_decay": self.recipe.weight_decay, "lr_scale": scale},
                       {"params": no_decay, "weight_decay": 0.0, "lr_scale": scale}]
        r = self.recipe
        return build_optimizer(r.optimizer, [g for g in groups if g["params"]], lr=1e-3, betas=r.betas, eps=r.eps)

    def _inputs(self, idx: np.ndarray):
        """This rank's shard of a global batch: (grids or pixels, ids, mask) on the device."""
        shard = self.dist.shard(idx)
        x = torch.from_numpy(np.asarray(self.data.inputs[shard], dtype=np.float32)).to(self.device)
        if self.recipe.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        ids, mask = self.model.tokenize([self.data.texts[i] for i in shard])
        return x, ids.to(self.device), mask.to(self.device)

    def forward_loss(self, idx: np.ndarray, stage: Stage, global_step: int):
        """Loss parts of one global batch (this rank's shard, gathered) and the global embeddings (their
        active columns unless ``sparse_loss`` is off)."""
        x, ids, mask = self._inputs(idx)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)
        with torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            image_emb, text_emb, scale = self._forward(x, ids, mask, stage.restrict_text)
        # exact: drops the columns zero in the whole global batch (train/active.py); dense models have none
        if self.sparse_loss and self.model.sparse:
            image_emb, text_emb = active.keep_active(image_emb, text_emb)  # [b, U] each
        # the loss in fp32: the FLOPs sums and the softmax are where low precision would hurt.
        # Gathered: each rank's rows of the contrastive logits reach the whole global batch, and the
        # FLOPs means cover the global batch (train/distributed.py)
        rows = ranks.local_rows(len(image_emb))
        image_emb = ranks.gather_with_grad(image_emb.float())  # [B, U or D]
        text_emb = ranks.gather_with_grad(text_emb.float())  # [B, U or D]
        # a single process without distillation calls the loss exactly as before
        extra = {} if rows is None else {"rows": rows}
        if self.teacher is not None:  # the global batch's teacher logits [B, B]; gathered rows are idx's
            teacher = self.teacher.logits(idx[:len(image_emb)])  # (shards trimmed to a multiple of ranks)
            extra["teacher_logits"] = torch.from_numpy(teacher).to(self.device)
        parts = self.loss_fn(image_emb, text_emb, _ScaleFrom(self.model, scale.float()), global_step, **extra)
        return ranks.global_values(parts), image_emb, text_emb

    def step(self, idx: np.ndarray, stage: Stage, global_step: int, opt) -> dict[str, float]:
        parts, image_emb, text_emb = self.forward_loss(idx, stage, global_step)
        opt.zero_grad(set_to_none=True)
        self.scaler.scale(parts["loss"]).backward()
        self.scaler.step(opt)
        self.scaler.update()
        self.model.clamp_logit_scale_()  # the parameter itself stays under the cap (open_clip's clamp_)
        rec = {k: float(v.detach()) for k, v in parts.items()}
        rec.update(batch_sparsity(image_emb, text_emb))
        return rec

    def _setup_model(self) -> None:
        """Device, memory format and checkpointing flags: once per fit."""
        r = self.recipe
        self.model.to(self.device)
        if r.channels_last:
            self.model.image_tower.to(memory_format=torch.channels_last)
        if r.gradient_checkpointing:
            set_grad_checkpointing(self.model, True)
        self.compiled_blocks = 0
        if r.compile == "blocks":
            # the towers that run in training: the text tower, and the image tower unless its output is
            # cached (image_from None); a frozen trunk below block k compiles too (never called, no cost)
            towers = [self.model.text_tower] + ([self.model.image_tower] if self.image_from is not None else [])
            self.compiled_blocks = compile_blocks(towers, backend=self.compile_backend)
            if self.dist.is_main:
                logger.info("compile: blocks: %d tower blocks compiled (%s)", self.compiled_blocks,
                            self.compile_backend)
            if not self.compiled_blocks:
                logger.warning("compile: blocks: the towers that learn have no repeated blocks (a ModuleList "
                               "of one class of module); training runs eagerly")

    def _train_mode(self) -> None:
        self.model.train()
        if isinstance(self.image_from, int):
            # a trained top keeps eval-mode BatchNorm (ImageNet statistics, like the cached trunk below
            # it) and no drop-connect: its forward is the one the final-grid cache later computes
            self.model.image_tower.eval()

    # ------------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> DualEncoder:
        check_run_folder(self.out, resume)  # before anything in the folder is written
        self.out.mkdir(parents=True, exist_ok=True)
        r = self.recipe
        # per-rank dropout streams (rank 0 keeps the single-process one); a resume restores them instead
        torch.manual_seed(r.seed + self.dist.rank)
        self._setup_model()
        if isinstance(self.model, LowPrecisionHeads):
            self.model.compute_dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        rng = np.random.default_rng(r.seed)
        sampler = BatchSampler(self.data.groups, r.batch_size, rng)
        start_stage, start_step, opt_state, scaler_state = 0, 0, None, None
        has_checkpoint = any((self.out / d / "trainer.json").exists() for d in ("checkpoint", "checkpoint.old"))
        if resume and has_checkpoint:
            start_stage, start_step, opt_state, rng_state, scaler_state = self._load_checkpoint()
            sampler.rng.bit_generator.state = rng_state
            sampler._queue = list(self._resume_queue)
        elif resume:
            logger.warning("resume: %s holds no checkpoint; training from the start", self.out)
        main = self.dist.is_main
        global_step = sum(s.steps for s in r.stages[:start_stage]) + start_step
        if resume and has_checkpoint and main:
            where = (f"stage {start_stage + 1} of {len(r.stages)} ({r.stages[start_stage].name}), step "
                     f"{start_step} of {r.stages[start_stage].steps}" if start_stage < len(r.stages)
                     else "the end of the last stage")
            logger.info("resuming %s at %s: step %d of %d", self.out, where, global_step, r.total_steps)
        if main:
            (self.out / "recipe.json").write_text(json.dumps(r.to_dict(), indent=2))
            if resume:  # the rows a killed run wrote after its checkpoint are about to be redone
                truncate_log(self.out / "log.jsonl", global_step)
        log = open(self.out / "log.jsonl", "a") if main else open(os.devnull, "w")  # noqa: SIM115 - closed in finally

        def sync_log() -> None:  # with every checkpoint: a kill then loses no row the resume skips
            log.flush()
            if main:
                os.fsync(log.fileno())
        bar = tqdm(total=r.total_steps, initial=global_step, disable=not self.progress, desc=r.name)
        try:
            for si in range(start_stage, len(r.stages)):
                stage = r.stages[si]
                self._train_mode()
                opt = self._optimizer(self._trainable(stage))
                # DDP over this stage's trainable parameters (a no-op in a single process)
                self._forward = ranks.wrap_ddp(self._embed, self.dist)
                first = start_step if si == start_stage else 0
                if opt_state is not None and si == start_stage:
                    opt.load_state_dict(opt_state)
                    if scaler_state:
                        self.scaler.load_state_dict(scaler_state)
                t0 = time.time()
                for s in range(first, stage.steps):
                    for g in opt.param_groups:
                        g["lr"] = lr_at(stage, s) * g["lr_scale"]
                    # the FLOPs weight's quadratic warm-up restarts per stage unless the recipe says not
                    rec = self.step(sampler.next(), stage, s if r.flops_warmup_per_stage else global_step, opt)
                    global_step += 1
                    rec.update(step=global_step, stage=stage.name, lr=lr_at(stage, s), time=time.time() - t0)
                    log.write(json.dumps(rec) + "\n")
                    bar.update(1)
                    bar.set_postfix(stage=stage.name, loss=f"{rec['loss']:.3f}",
                                    nnz=f"{rec.get('nnz_image', 0):.0f}/{rec.get('nnz_text', 0):.0f}")
                    if r.checkpoint_every and global_step % r.checkpoint_every == 0:
                        sync_log()
                        self._save_checkpoint(si, s + 1, opt, sampler)
                    if r.eval_every and global_step % r.eval_every == 0:
                        self._eval(log, global_step, stage.name)
                sync_log()
                self._save_checkpoint(si + 1, 0, None, sampler)
                self._eval(log, global_step, stage.name)
        finally:
            bar.close()
            log.close()
            uncompile_blocks(self.model)  # the returned model's blocks run their own forward again
        self._forward = self._embed  # drop the DDP wrapper (and its hooks)
        for p in self.model.parameters():
            p.requires_grad_(True)
        if isinstance(self.model, LowPrecisionHeads):
            self.model.compute_dtype = torch.float32  # inference is exact
        if self.recipe.gradient_checkpointing:
            set_grad_checkpointing(self.model, False)
        self.model.eval()
        if main:
            self.model.save_pretrained(self.out / "model", card=run_info(self.out))  # card: recipe, metrics
        self.dist.barrier()
        return self.model

    def _eval(self, log, step: int, stage: str) -> None:
        if self.evaluate is None or not self.dist.is_main:
            return
        self.model.eval()
        # compiled blocks run eagerly here: no second compilation for eval mode and no_grad
        with torch.compiler.set_stance("force_eager") if self.compiled_blocks else contextlib.nullcontext():
            metrics = self.evaluate(self.model)
        self._train_mode()
        log.write(json.dumps({"step": step, "stage": stage, "eval": metrics}) + "\n")
        log.flush()

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, stage_idx: int, step_in_stage: int, opt, sampler: BatchSampler) -> None:
        """Rank 0 writes the model and optimizer (identical on every rank); each rank adds its own RNG
        state, so dropout after a resume matches the uninterrupted run on every rank."""
        final = self.out / "checkpoint"
        # a fixed name, not atomic.temp_folder: every rank writes its RNG file into the same folder
        tmp = self.out / "checkpoint.tmp"
        main = self.dist.is_main
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            self.model.save_pretrained(tmp / "model")
            # torch's RNG too: dropout masks after a resume must be the ones the uninterrupted run draws
            torch.save({"optimizer": opt.state_dict() if opt is not None else None,
                        "torch_rng": torch.get_rng_state(),
                        "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None},
                       tmp / "optimizer.pt")
            # the sampler's queue too: the rest of the current epoch's draw, which the RNG cannot redo
            state = {"stage": stage_idx, "step": step_in_stage, "rng": sampler.rng.bit_generator.state,
                     "queue": [int(i) for i in sampler._queue], "world": self.dist.world,
                     "stages": self._stage_plan()}  # a resume checks the recipe still has these stages
            (tmp / "trainer.json").write_text(json.dumps(state))
        self.dist.barrier()
        if self.dist.enabled:
            torch.save({"torch_rng": torch.get_rng_state()}, tmp / f"rng-rank{self.dist.rank}.pt")
            self.dist.barrier()
        if main:
            atomic.replace_folder(tmp, final, aside=self.out / "checkpoint.old")  # _load_checkpoint reads .old too
        self.dist.barrier()

    def _stage_plan(self) -> list[dict]:
        """The recipe's stages as JSON values: what a checkpoint's stage and step index into."""
        return json.loads(json.dumps([dataclasses.asdict(s) for s in self.recipe.stages]))

    def _load_checkpoint(self):
        ck = self.out / "checkpoint"
        if not ck.exists() and (self.out / "checkpoint.old").exists():
            ck = self.out / "checkpoint.old"  # crashed between the two renames
        try:
            state = json.loads((ck / "trainer.json").read_text())
            load_model(self.model, str(ck / "model" / "model.safetensors"), device=str(self.device))
            saved = torch.load(ck / "optimizer.pt", weights_only=False, map_location=self.device)
            rank_rng = ck / f"rng-rank{self.dist.rank}.pt"
            if self.dist.enabled and rank_rng.exists():
                saved["torch_rng"] = torch.load(rank_rng, weights_only=False)["torch_rng"]
        except (OSError, ValueError, KeyError, EOFError, RuntimeError, SafetensorError, pickle.UnpicklingError) as e:
            # checkpoints are written whole (temp folder + rename): a damaged one was damaged afterwards
            other = " (checkpoint.old may hold the one before)" if (self.out / "checkpoint.old").exists() else ""
            raise ValueError(f"{ck}: a damaged checkpoint ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                             f"move it aside to restart the run{other}") from None
        if "stages" in state:  # checkpoints from before the plan was recorded cannot be checked
            _check_same_plan(ck, state["stages"], self._stage_plan(), begun=state["stage"] + bool(state["step"]))
        torch.set_rng_state(saved["torch_rng"].cpu())
        self._resume_queue = state.get("queue", [])
        return state["stage"], state["step"], saved["optimizer"], state["rng"], saved.get("scaler")


def _check_same_plan(checkpoint: Path, saved: list[dict], now: list[dict], begun: int) -> None:
    """A resume continues the stages the checkpoint was made in: the ``begun`` first stages (done, or the
    one the checkpoint is inside) must be the same, or its stage and step would point at other work (a
    stage added before, one longer, at another lr, ...): ValueError naming the change. Stages not begun
    may differ (a stage appended to a finished run): logged."""
    if saved[:begun] != now[:begun]:
        if len(now) < begun or any(a.get("name") != b.get("name") for a, b in zip(saved[:begun], now)):
            def names(plan):
                return ", ".join(f"{s.get('name')} ({s.get('steps')} steps)" for s in plan)
            change = f"stages {names(saved)} then, {names(now)} now"
        else:
            i, a, b = next((i, a, b) for i, (a, b) in enumerate(zip(saved, now)) if a != b)
            key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            change = f"stage {i + 1} ({a.get('name')}): {key} {a.get(key)!r} then, {b.get(key)!r} now"
        raise ValueError(f"{checkpoint}: the run was started with another stage plan ({change}); resume it "
                         "with the recipe and --set it was started with, or train into a new --out")
    if saved[begun:] != now[begun:]:
        logger.info("the stages after the checkpoint differ from the run's first plan: training them as the "
                    "recipe says now")


def check_run_folder(out: str | os.PathLike, resume: bool) -> None:
    """Refuse a run folder that is a file, and, for a new run (no ``resume``), one already holding a run:
    training over it would overwrite its model/ and checkpoint/ and append a second step 1.. to its
    log.jsonl. Trainer.fit calls it before writing anything; pipeline.train and scale.train also before
    loading data."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: is a file, not a run folder; choose a new --out")
    if resume or not out.is_dir():
        return
    log = out / "log.jsonl"
    held = [name for name, there in (
        ("checkpoint/", any((out / d / "trainer.json").is_file() for d in ("checkpoint", "checkpoint.old"))),
        ("model/", (out / "model").is_dir()),
        ("log.jsonl", log.is_file() and log.stat().st_size > 0)) if there]
    if held:
        raise ValueError(f"{out} already holds a training run ({', '.join(held)}): pass --resume to continue "
                         "it or choose a new --out")


def truncate_log(path: Path, step: int) -> None:
    """Keep the log rows of steps <= ``step`` (a checkpoint's global step) and drop a torn last line, so
    a resumed run's log.jsonl has each step once (rows are synced to disk before every checkpoint)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a row cut short by the kill
        if isinstance(row, dict) and row.get("step", 0) <= step:
            keep.append(line)
    atomic.write_text(path, "".join(f"{line}\n" for line in keep))


def set_grad_checkpointing(model: torch.nn.Module, enable: bool) -> None:
    """Activation checkpointing in every tower that supports it: GradCheckpointing towers (their own
    switch) and any Hugging Face model inside one (e.g. the bert-mlm tower's BERT)."""
    from transformers import PreTrainedModel  # start-up: transformers takes seconds to import

    for tower in (model.image_tower, model.text_tower):
        if isinstance(tower, GradCheckpointing):
            tower.set_grad_checkpointing(enable)
            continue
        for sub in tower.modules():
            if isinstance(sub, PreTrainedModel) and sub.supports_gradient_checkpointing:
                if enable:
                    sub.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                else:
                    sub.gradient_checkpointing_disable()


def tower_blocks(tower: torch.nn.Module) -> list[torch.nn.Module]:
    """A tower's repeated blocks: the members of each ``ModuleList`` whose members are all of one class
    (a ViT's layers, a text transformer's layers), outermost lists only (a block's own lists of sublayers
    are compiled with it)."""
    blocks, inside = [], set()
    for m in tower.modules():  # a module before its children
        if id(m) in inside:
            continue
        if isinstance(m, torch.nn.ModuleList) and len(m) and len({type(b) for b in m}) == 1:
            blocks += list(m)
            inside |= {id(x) for b in m for x in b.modules()}
    return blocks


# block -> the forward it had before compile_blocks (None: its class's)
_EAGER_FORWARD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_blocks(towers, backend: str = "inductor") -> int:
    """Regional compilation: every repeated block of ``towers`` (a module or a list of them; a model
    gives its image and text towers) gets a ``torch.compile``d forward, in place. Blocks of one class
    share their code, so one compiled graph serves all of them (per mode: training, eval, grad off); the
    heads' slab loops and the loss are not touched. Returns how many blocks; a second call leaves
    compiled blocks as they are. ``uncompile_blocks`` undoes it.

    Measured on an H200 (docs/scale.md): stair-paper's 24 blocks compile in 14-16 s, then its step is
    1.10x faster alone and 1.57x with the multi-tensor LAMB (train/optim.py)."""
    import torch._dynamo  # start-up: torch._dynamo (the compiler) loads only when compiling

    if hasattr(towers, "image_tower") and hasattr(towers, "text_tower"):  # a model
        towers = [towers.image_tower, towers.text_tower]
    elif isinstance(towers, torch.nn.Module):
        towers = [towers]
    blocks = [b for t in towers for b in tower_blocks(t)]
    # each mode (training, eval, grad off) and new input shape adds an entry to the cache of a block
    # class's forward code: room for them, past the default limit (8) that would quietly leave the rest eager
    cfg = torch._dynamo.config
    key = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, key, max(64, 4 * len(blocks), getattr(cfg, key)))
    for b in blocks:
        if b in _EAGER_FORWARD:
            continue
        _EAGER_FORWARD[b] = b.__dict__.get("forward")
        # the bound forward, not Module.compile: dynamo skips a top frame inside torch itself, so an
        # nn.TransformerEncoderLayer.compile() would stay eager
        b.forward = torch.compile(b.forward, backend=backend)
    return len(blocks)


def uncompile_blocks(model: torch.nn.Module) -> int:
    """Undo ``compile_blocks`` for every block inside ``model``: each runs the forward it had before.
    Returns how many."""
    n = 0
    for m in model.modules():
        if m in _EAGER_FORWARD:
            before = _EAGER_FORWARD.pop(m)
            if before is None:
                del m.forward
            else:
                m.forward = before
            n += 1
    return n
