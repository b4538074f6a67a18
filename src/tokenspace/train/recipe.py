"""Training recipes: YAML files naming a model config, data, losses and the stage plan.

    model: stair-emoji              # config name or path (tokenspace.models.config)
    data: {train: [emoji:train, openclipart:train], eval: [emoji:test]}
    batch_size: 128
    loss: {lambda_image: 1.0e-3, lambda_text: 1.0e-3, flops_warmup: 100}
    stages:                          # STAIR's 3 stages; a single entry is single-stage training
      - {name: masked-text, steps: 300, lr: 1.0e-3, restrict_text: true}
      - {name: frozen-image, steps: 200, lr: 1.0e-3, freeze_image: true}
      - {name: joint, steps: 300, lr: 1.0e-4}
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from tokenspace.train.precision import CHOICES as PRECISIONS

RECIPE_DIR = Path(__file__).resolve().parent.parent / "configs" / "recipes"


@dataclass
class Stage:
    name: str
    steps: int
    lr: float = 1e-3
    restrict_text: bool = False  # STAIR stage 1: text may only activate its own tokens (eq. 8)
    freeze_image: bool = False  # STAIR stage 2: image tower + head frozen, text learns to match it
    warmup_steps: int = 0  # linear lr warm-up, then linear decay to 0 at the stage end

    def __post_init__(self):
        if self.steps < 0 or self.lr <= 0:
            raise ValueError(f"stage {self.name!r}: steps must be >= 0 and lr > 0")


@dataclass
class Recipe:
    name: str
    model: str
    stages: list[Stage]
    data: dict = field(default_factory=dict)
    batch_size: int = 128
    weight_decay: float = 1e-2
    lambda_image: float = 0.0
    lambda_text: float = 0.0
    flops_warmup: int = 0
    seed: int = 0
    # lr multiplier for the pretrained text tower: SPLADE's calibrated token weights survive small
    # steps, while the new heads learn at full rate (1.0 = one rate for all, as in the paper)
    text_lr_scale: float = 1.0
    checkpoint_every: int = 0  # steps; 0 = at stage ends only
    eval_every: int = 0
    # bf16 autocast: matmuls into the 30,522-token space run ~2.7x faster on CPUs with AVX512-BF16 (and
    # ~10x slower on CPUs without it); fp16 autocast with a gradient scaler is for CUDA GPUs without
    # bf16 (V100, T4); auto picks per device (tokenspace.train.precision)
    precision: str = "fp32"  # auto | fp32 | bf16 | fp16
    optimizer: str = "adamw"  # adamw | lamb (STAIR's, for 16K batches)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # end-to-end training from pixels (paper scale: the ViT learns); default trains heads on cached grids
    train_image_tower: bool = False
    gradient_checkpointing: bool = False  # recompute tower activations in backward: memory for time
    channels_last: bool = False  # NHWC memory format for conv towers on GPUs (tensor cores)

    def __post_init__(self):
        self.stages = [s if isinstance(s, Stage) else Stage(**s) for s in self.stages]
        if not self.stages:
            raise ValueError("a recipe needs at least one stage")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.optimizer not in ("adamw", "lamb"):
            raise ValueError(f"optimizer must be adamw or lamb, not {self.optimizer!r}")
        self.betas = tuple(float(b) for b in self.betas)  # YAML gives a list
        if self.batch_size < 2:
            raise ValueError("contrastive training needs batch_size >= 2")

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Recipe:
        d = dict(d)
        loss = dict(d.pop("loss", {}) or {})  # a copy: the caller's mapping is left as given
        for k in ("lambda_image", "lambda_text"):
            if k in loss:
                d[k] = loss.pop(k)
        if "lambda" in loss:
            d["lambda_image"] = d["lambda_text"] = loss.pop("lambda")
        if "flops_warmup" in loss:
            d["flops_warmup"] = loss.pop("flops_warmup")
        if loss:
            raise ValueError(f"unknown loss keys: {sorted(loss)}")
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise ValueError(f"unknown recipe keys: {sorted(set(d) - known)}")
        return cls(**d)

    @classmethod
    def load(cls, name_or_path: str | Path, **overrides) -> Recipe:
        p = Path(name_or_path)
        if p.suffix not in (".yaml", ".yml"):
            p = RECIPE_DIR / f"{name_or_path}.yaml"
            if not p.exists():
                known = sorted(q.stem for q in RECIPE_DIR.glob("*.yaml"))
                raise KeyError(f"unknown recipe {name_or_path!r}; known: {known}")
        d = yaml.safe_load(p.read_text())
        d.setdefault("name", p.stem)
        d.update(overrides)
        return cls.from_dict(d)
