"""The trainer: one loop for every family, driven by a Recipe's stage plan, on cached backbone grids.

Run folder layout:
    log.jsonl       one JSON object per step: stage, lr, named loss parts, sparsity (nnz, FLOPs)
    checkpoint/     latest checkpoint: model/ (save_pretrained), optimizer.pt, trainer.json; replaced
                    atomically, so a crash leaves the previous one intact
    model/          the final model (save_pretrained)
Resume: ``Trainer(...).fit(resume=True)`` continues from checkpoint/ at the exact step.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from tokenspace.models.dual import DualEncoder
from tokenspace.train.losses import SparseContrastiveLoss
from tokenspace.train.recipe import Recipe, Stage


@dataclass
class PairData:
    """Training pairs on cached grids. Pairs of one group (same caption or concept) never share a batch:
    two drawings of one emoji with one caption would otherwise be each other's false negatives."""

    grids: np.ndarray  # [N, C, h, w]
    texts: list[str]
    groups: np.ndarray  # [N] int

    def __post_init__(self):
        if not (len(self.grids) == len(self.texts) == len(self.groups)):
            raise ValueError("grids, texts and groups must have one entry per pair")
        empty = [i for i, t in enumerate(self.texts) if not t or not t.strip()]
        if empty:
            raise ValueError(f"{len(empty)} empty texts (e.g. rows {empty[:5]}); filter them first")

    @classmethod
    def from_texts(cls, grids, texts: list[str]) -> "PairData":
        _, groups = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        return cls(grids, list(texts), groups.astype(np.int64))

    def __len__(self) -> int:
        return len(self.texts)


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
    """Linear warm-up to the stage's lr, then linear decay to 0 at the stage's end."""
    if stage.warmup_steps and step < stage.warmup_steps:
        return stage.lr * (step + 1) / stage.warmup_steps
    span = max(1, stage.steps - stage.warmup_steps)
    return stage.lr * max(0.0, 1 - (step - stage.warmup_steps) / span)


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


class Trainer:
    def __init__(self, model: DualEncoder, recipe: Recipe, data: PairData, out_dir: str | os.PathLike,
                 evaluate: Callable[[DualEncoder], dict] | None = None, progress: bool = True):
        self.model, self.recipe, self.data = model, recipe, data
        self.out = Path(out_dir)
        self.evaluate = evaluate
        self.progress = progress
        self.loss_fn = SparseContrastiveLoss(recipe.lambda_image, recipe.lambda_text, recipe.flops_warmup)
        if any(s.restrict_text for s in recipe.stages) and not hasattr(model, "token_mask"):
            raise ValueError(f"restrict_text needs a token-space model; {model.family!r} has none")

    # ------------------------------------------------------------------ optimisation
    def _trainable(self, stage: Stage) -> list[torch.nn.Parameter]:
        # the backbone is frozen whenever we train on cached grids; stage 2 also freezes the image head
        frozen = {id(p) for p in self.model.image_tower.parameters()}
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
        groups = []
        for scale, members in ((self.recipe.text_lr_scale, [p for p in params if id(p) in text]),
                               (1.0, [p for p in params if id(p) not in text])):
            decay = [p for p in members if p.ndim >= 2]
            no_decay = [p for p in members if p.ndim < 2]  # biases, norms and the logit scale
            groups += [{"params": decay, "weight_decay": self.recipe.weight_decay, "lr_scale": scale},
                       {"params": no_decay, "weight_decay": 0.0, "lr_scale": scale}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=1e-3)

    def step(self, idx: np.ndarray, stage: Stage, global_step: int, opt) -> dict[str, float]:
        m = self.model
        grids = torch.from_numpy(np.asarray(self.data.grids[idx], dtype=np.float32))
        ids, mask = m.tokenize([self.data.texts[i] for i in idx])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.recipe.precision == "bf16"):
            image_emb = m.image_embed(grids)
            text_emb = m.text_embed(ids, mask, restrict_to_input=stage.restrict_text)
        # the loss in fp32: the FLOPs sums and the softmax are where low precision would hurt
        image_emb, text_emb = image_emb.float(), text_emb.float()
        parts = self.loss_fn(image_emb, text_emb, m, global_step)
        opt.zero_grad(set_to_none=True)
        parts["loss"].backward()
        opt.step()
        rec = {k: float(v.detach()) for k, v in parts.items()}
        rec.update(batch_sparsity(image_emb, text_emb))
        return rec

    # ------------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> DualEncoder:
        self.out.mkdir(parents=True, exist_ok=True)
        r = self.recipe
        torch.manual_seed(r.seed)  # a resume below restores the checkpoint's RNG state instead
        if hasattr(self.model, "compute_dtype"):
            self.model.compute_dtype = torch.bfloat16 if r.precision == "bf16" else torch.float32
        rng = np.random.default_rng(r.seed)
        sampler = BatchSampler(self.data.groups, r.batch_size, rng)
        start_stage, start_step, opt_state = 0, 0, None
        if resume and any((self.out / d / "trainer.json").exists() for d in ("checkpoint", "checkpoint.old")):
            start_stage, start_step, opt_state, rng_state = self._load_checkpoint()
            sampler.rng.bit_generator.state = rng_state
        (self.out / "recipe.json").write_text(json.dumps(r.to_dict(), indent=2))
        log = open(self.out / "log.jsonl", "a")
        global_step = sum(s.steps for s in r.stages[:start_stage]) + start_step
        bar = tqdm(total=r.total_steps, initial=global_step, disable=not self.progress, desc=r.name)
        try:
            for si in range(start_stage, len(r.stages)):
                stage = r.stages[si]
                self.model.train()
                opt = self._optimizer(self._trainable(stage))
                first = start_step if si == start_stage else 0
                if opt_state is not None and si == start_stage:
                    opt.load_state_dict(opt_state)
                t0 = time.time()
                for s in range(first, stage.steps):
                    for g in opt.param_groups:
                        g["lr"] = lr_at(stage, s) * g["lr_scale"]
                    rec = self.step(sampler.next(), stage, global_step, opt)
                    global_step += 1
                    rec.update(step=global_step, stage=stage.name, lr=lr_at(stage, s), time=time.time() - t0)
                    log.write(json.dumps(rec) + "\n")
                    bar.update(1)
                    bar.set_postfix(stage=stage.name, loss=f"{rec['loss']:.3f}",
                                    nnz=f"{rec.get('nnz_image', 0):.0f}/{rec.get('nnz_text', 0):.0f}")
                    if r.checkpoint_every and global_step % r.checkpoint_every == 0:
                        self._save_checkpoint(si, s + 1, opt, sampler)
                    if r.eval_every and global_step % r.eval_every == 0:
                        self._eval(log, global_step, stage.name)
                log.flush()
                self._save_checkpoint(si + 1, 0, None, sampler)
                self._eval(log, global_step, stage.name)
        finally:
            bar.close()
            log.close()
        for p in self.model.parameters():
            p.requires_grad_(True)
        if hasattr(self.model, "compute_dtype"):
            self.model.compute_dtype = torch.float32  # inference is exact
        self.model.eval()
        self.model.save_pretrained(self.out / "model")
        return self.model

    def _eval(self, log, step: int, stage: str) -> None:
        if self.evaluate is None:
            return
        self.model.eval()
        metrics = self.evaluate(self.model)
        self.model.train()
        log.write(json.dumps({"step": step, "stage": stage, "eval": metrics}) + "\n")
        log.flush()

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, stage_idx: int, step_in_stage: int, opt, sampler: BatchSampler) -> None:
        final = self.out / "checkpoint"
        tmp = self.out / "checkpoint.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        self.model.save_pretrained(tmp / "model")
        # torch's RNG too: dropout masks after a resume must be the ones the uninterrupted run draws
        torch.save({"optimizer": opt.state_dict() if opt is not None else None,
                    "torch_rng": torch.get_rng_state()}, tmp / "optimizer.pt")
        state = {"stage": stage_idx, "step": step_in_stage, "rng": sampler.rng.bit_generator.state}
        (tmp / "trainer.json").write_text(json.dumps(state))
        old = self.out / "checkpoint.old"
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)

    def _load_checkpoint(self):
        from safetensors.torch import load_model

        ck = self.out / "checkpoint"
        if not ck.exists() and (self.out / "checkpoint.old").exists():
            ck = self.out / "checkpoint.old"  # crashed between the two renames
        state = json.loads((ck / "trainer.json").read_text())
        load_model(self.model, str(ck / "model" / "model.safetensors"))
        saved = torch.load(ck / "optimizer.pt", weights_only=False)
        torch.set_rng_state(saved["torch_rng"])
        return state["stage"], state["step"], saved["optimizer"], state["rng"]
