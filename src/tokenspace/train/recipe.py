"""Training recipes: YAML files naming a model config, data, losses and the stage plan.

    model: stair-emoji              # config name or path (tokenspace.models.config), or a mapping that
                                    # changes fields of one: {config: sparse-clip-emoji, extra: {topk: 64}}
    data: {train: [emoji:train, openclipart:train], eval: [emoji:test]}
    batch_size: 128
    loss: {lambda_image: 1.0e-3, lambda_text: 1.0e-3, flops_warmup: 100}
    # optional, not STAIR: distillation from a trained teacher's in-batch scores (train/distill.py)
    # loss: {..., distill: 1.0, distill_teacher: runs/demo/dense/model, distill_scale: null}
    stages:                          # STAIR's 3 stages; a single entry is single-stage training
      - {name: masked-text, steps: 300, lr: 1.0e-3, restrict_text: true}
      - {name: frozen-image, steps: 200, lr: 1.0e-3, freeze_image: true}
      - {name: joint, steps: 300, lr: 1.0e-4}
    # or, instead of `stages`, STAIR's 3 stages derived from the dense model's budget (StagePlan):
    plan: {dense_steps: 300, split: paper, ratio: [1, 1, 2], lr: 1.0e-3, stage3_lr: 1.0e-4}
    # optional, GPU speed (docs/scale.md): bf16 autocast, regional torch.compile of the towers' blocks
    # precision: auto
    # compile: blocks
"""
from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from tokenspace.models.config import ModelConfig, missing_fields
from tokenspace.models.registry import list_releases, release_path
from tokenspace.train.precision import CHOICES as PRECISIONS

RECIPE_DIR = Path(__file__).resolve().parent.parent / "configs" / "recipes"
COMPILE_CHOICES = (None, "blocks")  # the recipe's `compile`
RECIPE_SUFFIXES = (".yaml", ".yml", ".json")  # .json: a run's saved recipe.json loads as it is


# ------------------------------------------------------------------------------------ value types
# A recipe comes from YAML and --set, where `batch_size: abc` or `stages: 5` are easy to write: each
# field is checked against its annotation up front, so the error names the key instead of surfacing
# later as "'<' not supported" or "slice indices must be integers" half-way into training.
def _shown(value) -> str:
    """A value as the YAML the user wrote it in (null, true), cut short."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _union_args(hint):
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else None


def _expected(hint) -> str:
    args = _union_args(hint)
    if args is not None:
        return " or ".join(_expected(a) for a in args)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple:
        return f"a list of {len(args)} numbers" if all(a is float for a in args) else "a list"
    return {type(None): "null", bool: "true or false", int: "an integer", float: "a number", str: "a string",
            dict: "a mapping", list: "a list", Stage: "a stage mapping {name, steps, ...}",
            StagePlan: "a plan mapping {dense_steps, ...}"}.get(origin or hint, str(hint))


def _fits(value, hint) -> bool:
    args = _union_args(hint)
    if args is not None:
        return any(_fits(value, a) for a in args)
    origin = typing.get_origin(hint) or hint
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # YAML's true is not a step count, nor 2.5 a batch size
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # 1 is a fine learning rate
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is tuple:  # YAML gives lists
        args = typing.get_args(hint)
        return isinstance(value, (list, tuple)) and len(value) == len(args) and all(map(_fits, value, args))
    if hint in (Stage, StagePlan):  # built from their mapping by the recipe
        return isinstance(value, (hint, dict))
    return isinstance(value, origin)  # str, dict, list (a list's items are checked where they are built)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def check_types(obj, where: str) -> None:
    """Every field of dataclass ``obj`` against its annotation: a ValueError naming ``where`` (a prefix:
    "recipe ", "recipe plan.") and the key otherwise. Ints given for floats become floats (``lr: 1``)."""
    for name, hint in _hints(type(obj)).items():
        value = getattr(obj, name)
        if not _fits(value, hint):
            note = ""
            if isinstance(value, str) and _fits(1.0, hint) and not _fits("", hint):
                try:
                    float(value)
                    note = " (YAML reads 1e-3 as a string: write 1.0e-3)"
                except ValueError:
                    pass
            raise ValueError(f"{where}{name}: expected {_expected(hint)}, not {_shown(value)}{note}")
        if hint is float:
            setattr(obj, name, float(value))


def _named(stage) -> bool:
    return isinstance(stage, dict) and "name" in stage


def _build(cls, value, where: str):
    """A Stage or StagePlan from its recipe mapping; a wrong shape is a ValueError naming ``where``."""
    if isinstance(value, cls):
        return value
    names = [f.name for f in fields(cls)]
    if not isinstance(value, dict):
        raise ValueError(f"recipe {where}: expected a mapping with keys {names}, not {_shown(value)}")
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise ValueError(f"recipe {where}: unknown keys {unknown} (known: {names})")
    missing = missing_fields(cls, value)
    if missing:
        raise ValueError(f"recipe {where}: missing {missing}")
    try:
        return cls(**value)
    except TypeError as e:  # a check the field types missed: still one line naming the stage
        raise ValueError(f"recipe {where}: {e}") from None


@dataclass
class Stage:
    name: str
    steps: int
    lr: float = 1e-3
    restrict_text: bool = False  # STAIR stage 1: text may only activate its own tokens (eq. 8)
    freeze_image: bool = False  # STAIR stage 2: image tower + head frozen, text learns to match it
    warmup_steps: int = 0  # linear lr warm-up, then decay to 0 at the stage end
    schedule: str = "linear"  # the decay: linear | cosine (OpenCLIP's, half a cosine from lr to 0)

    def __post_init__(self):
        check_types(self, f"recipe stage {self.name!r} ")
        if self.steps < 0 or self.lr <= 0:
            raise ValueError(f"stage {self.name!r}: steps must be >= 0 and lr > 0")
        if self.schedule not in ("linear", "cosine"):
            raise ValueError(f"stage {self.name!r}: schedule must be linear or cosine, not {self.schedule!r}")


@dataclass
class StagePlan:
    """STAIR's 3 stages sized from the dense baseline's budget (paper Sec. 4.2: CLIP 600K steps; STAIR
    300K / 300K / 600K, i.e. stage 3 alone gets the dense model's whole budget and stages 1+2 come on
    top; stage 3 at a 10x lower learning rate against catastrophic forgetting).

    split "paper": stage 3 = dense_steps, stages 1 and 2 = dense_steps x ratio[i] / ratio[2] on top.
    split "equal": the same ratio squeezed into dense_steps in all (the equal-budget comparison).
    Every stage gets ``warmup_steps`` of linear lr warm-up (the paper warms each stage up)."""

    dense_steps: int
    split: str = "paper"  # paper | equal
    ratio: tuple[float, float, float] = (1.0, 1.0, 2.0)  # stage 1 : stage 2 : stage 3 steps
    lr: float = 1e-3  # stages 1 and 2 (the dense model's lr in the paper)
    stage3_lr: float = 1e-4
    warmup_steps: int = 0

    def __post_init__(self):
        check_types(self, "recipe plan.")
        self.ratio = tuple(float(r) for r in self.ratio)
        if self.split not in ("paper", "equal"):
            raise ValueError(f"plan.split must be paper or equal, not {self.split!r}")
        if len(self.ratio) != 3 or min(self.ratio) < 0 or self.ratio[2] <= 0:
            raise ValueError(f"plan.ratio needs 3 non-negative numbers with stage 3 > 0, not {self.ratio}")
        if self.dense_steps < 1:
            raise ValueError("plan.dense_steps must be >= 1")

    def steps(self) -> tuple[int, int, int]:
        r1, r2, r3 = self.ratio
        if self.split == "paper":
            return round(self.dense_steps * r1 / r3), round(self.dense_steps * r2 / r3), self.dense_steps
        s1 = round(self.dense_steps * r1 / sum(self.ratio))
        s2 = round(self.dense_steps * r2 / sum(self.ratio))
        return s1, s2, self.dense_steps - s1 - s2  # the remainder to stage 3: exactly dense_steps in all

    def stages(self) -> list[Stage]:
        s1, s2, s3 = self.steps()
        w = self.warmup_steps
        return [Stage("masked-text", s1, self.lr, restrict_text=True, warmup_steps=min(w, s1)),
                Stage("frozen-image", s2, self.lr, freeze_image=True, warmup_steps=min(w, s2)),
                Stage("joint", s3, self.stage3_lr, warmup_steps=min(w, s3))]


def model_config(model: str | dict):
    """A recipe's ``model`` as a ModelConfig: a config name or path, or ``{config: NAME_OR_PATH, <field>:
    value, ...}`` whose ``extra`` adds to the config's (each key checked by the family's typed options)."""
    if isinstance(model, str):
        return ModelConfig.load(model)
    if not isinstance(model, dict) or not isinstance(model.get("config"), str):
        raise ValueError(f"recipe model must be a config name or {{config: NAME, ...}}, not {model!r}")
    over = {k: v for k, v in model.items() if k != "config"}
    d = ModelConfig.load(model["config"]).to_dict()
    if isinstance(over.get("extra"), dict):
        over["extra"] = {**(d.get("extra") or {}), **over["extra"]}
    unknown = sorted(set(over) - set(d))
    if unknown:
        raise ValueError(f"unknown model config keys {unknown} in the recipe's model (known: {sorted(d)})")
    return ModelConfig.from_dict({**d, **over})


@dataclass
class Recipe:
    name: str
    model: str | dict  # a config name or path, or {config: NAME, ...fields to change} (model_config)
    stages: list[Stage] = field(default_factory=list)
    plan: StagePlan | None = None  # instead of `stages`: STAIR's stages sized from a dense budget
    data: dict = field(default_factory=dict)
    batch_size: int = 128
    weight_decay: float = 1e-2
    lambda_image: float = 0.0
    lambda_text: float = 0.0
    flops_warmup: int = 0
    # the quadratic growth of lambda restarts with every stage: the paper trains each stage "using the
    # same configuration as CLIP" (Sec. 4.2; each stage warms its lr up again), and lambda's growth
    # (Formal et al. 2021a) is part of that configuration. False: one ramp over the whole run
    flops_warmup_per_stage: bool = True
    # FLOPs (eq. 6) squares a batch mean, so its expectation is sum_k mu_k^2 + Var_k / B: the second
    # term is a per-sample L2 penalty 256x stronger at batch 64 than at the paper's 16,384. A batch
    # size here makes the loss an unbiased estimate of eq. 6 at that batch, whatever the training
    # batch (losses.flops_loss); None = eq. 6 on the batch as it is
    flops_reference_batch: int | None = None
    # distillation (SPLADE++ / D2S style; a labelled deviation from STAIR, train/distill.py): weight mu of
    # the KL between the teacher's and the student's in-batch softmax (losses.distillation_loss); the
    # teacher is a trained model folder or release name; its scores use distill_scale, or (null) the
    # teacher's own logit scale. 0 = no teacher consulted
    distill: float = 0.0
    distill_teacher: str | None = None
    distill_scale: float | None = None
    seed: int = 0
    # lr multiplier for the pretrained text tower: SPLADE's calibrated token weights survive small
    # steps, while the new heads learn at full rate (1.0 = one rate for all, as in the paper)
    text_lr_scale: float = 1.0
    # steps between checkpoints inside a stage (and one at each stage end): a kill or Ctrl-C loses at most
    # this many; 0 = at stage ends only
    checkpoint_every: int = 50
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
    # which part of the image tower learns: None = none (heads on cached final grids); "all" = the whole
    # tower from pixels (= train_image_tower); a block index k (negative from the end) or "head" = the
    # tower's top from block k on, on cached activations at block k's input (models/towers.py, split)
    train_image_from: int | str | None = None
    image_lr_scale: float = 1.0  # lr multiplier for the image tower's trained (pretrained) layers
    gradient_checkpointing: bool = False  # recompute tower activations in backward: memory for time
    channels_last: bool = False  # NHWC memory format for conv towers on GPUs (tensor cores)
    # regional torch.compile: null (off) or "blocks", each repeated block of the towers that learn
    # (a ViT's layers, a text transformer's layers) compiled, one graph per kind of block; the heads stay
    # eager. On a GPU: seconds of compiling, then a faster step (train/trainer.py, compile_blocks)
    compile: str | bool | None = None

    def __post_init__(self):
        check_types(self, "recipe ")
        for k in ("train", "eval"):  # data specs: the pipeline iterates them (eval may be empty)
            v = self.data.get(k, [])
            if not (isinstance(v, str) or isinstance(v, list) and all(isinstance(x, str) for x in v)
                    or k == "eval" and v is None):
                raise ValueError(f"recipe data.{k}: expected a data spec (emoji:train) or a list of them, "
                                 f"not {_shown(v)}")
        if isinstance(self.model, dict):  # changed fields: a typo fails here, before any data loads
            model_config(self.model)
        if self.plan is not None:
            self.plan = _build(StagePlan, self.plan, "plan")
        self.stages = [_build(Stage, s, f"stages[{i}]" + (f" ({s['name']!r})" if _named(s) else ""))
                       for i, s in enumerate(self.stages)]
        if self.plan is not None:
            # both only when they agree (a saved recipe.json holds the plan and its expansion)
            if self.stages and self.stages != self.plan.stages():
                raise ValueError("give either `stages` or `plan`, not both")
            self.stages = self.plan.stages()
        if not self.stages:
            raise ValueError("a recipe needs at least one stage")
        f = self.train_image_from
        if self.train_image_tower and f not in (None, "all"):
            raise ValueError(f"train_image_tower: true trains the whole tower; it contradicts train_image_from: {f!r}")
        if self.train_image_tower or f == "all":
            self.train_image_tower, self.train_image_from = True, "all"
        elif f is not None and f != "head" and (isinstance(f, bool) or not isinstance(f, int)):
            raise ValueError(f"train_image_from must be null, 'all', 'head' or a block index, not {f!r}")
        if self.flops_reference_batch is not None and self.flops_reference_batch < 2:
            raise ValueError("flops_reference_batch must be >= 2 (or null)")
        self._check_distill()
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.optimizer not in ("adamw", "lamb"):
            raise ValueError(f"optimizer must be adamw or lamb, not {self.optimizer!r}")
        if self.compile is False:  # `compile: false` says off too
            self.compile = None
        if self.compile not in COMPILE_CHOICES:
            raise ValueError(f"recipe compile must be null (off) or blocks (the towers' repeated blocks), "
                             f"not {_shown(self.compile)}")
        self.betas = tuple(float(b) for b in self.betas)  # YAML gives a list
        if self.batch_size < 2:
            raise ValueError("contrastive training needs batch_size >= 2")

    def _check_distill(self) -> None:
        """The distillation keys: a weight >= 0, a teacher whenever the weight is > 0, one that exists
        (a folder with config.json or a release name; whether it loads is train/distill.py's check)."""
        if self.distill < 0:
            raise ValueError(f"recipe loss.distill must be >= 0, not {self.distill}")
        if self.distill_scale is not None and not self.distill_scale > 0:
            raise ValueError(f"recipe loss.distill_scale must be > 0 (or null: the teacher's own), "
                             f"not {self.distill_scale}")
        t = self.distill_teacher
        if self.distill and not t:
            raise ValueError("recipe loss.distill needs loss.distill_teacher: a trained model folder or "
                             "release name")
        if t and not (Path(t) / "config.json").is_file() and release_path(t) is None:
            releases = list_releases()
            known = f" ({', '.join(releases)})" if releases else ""
            raise ValueError(f"recipe loss.distill_teacher: {t!r} is no trained model folder (with "
                             f"config.json) nor a release name{known}")

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Recipe:
        if not isinstance(d, dict):
            raise ValueError(f"a recipe is a mapping (name, model, data, stages, ...), not {_shown(d)}")
        d = dict(d)
        loss = d.pop("loss", None) or {}
        if not isinstance(loss, dict):
            raise ValueError(f"recipe loss: expected a mapping (lambda, lambda_image, flops_warmup, ...), "
                             f"not {_shown(loss)}")
        loss = dict(loss)  # a copy: the caller's mapping is left as given
        if "lambda" in loss:  # both sides, unless a side is given on its own (below)
            d["lambda_image"] = d["lambda_text"] = loss.pop("lambda")
        for k in ("lambda_image", "lambda_text"):
            if k in loss:
                d[k] = loss.pop(k)
        for k in ("flops_warmup", "flops_warmup_per_stage", "flops_reference_batch",
                  "distill", "distill_teacher", "distill_scale"):
            if k in loss:
                d[k] = loss.pop(k)
        if loss:
            raise ValueError(f"unknown loss keys: {sorted(loss)}")
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise ValueError(f"unknown recipe keys: {sorted(set(d) - known)}")
        return cls(**d)

    @classmethod
    def load(cls, name_or_path: str | Path, **overrides) -> Recipe:
        p = Path(name_or_path)
        if p.suffix not in RECIPE_SUFFIXES:
            p = RECIPE_DIR / f"{name_or_path}.yaml"
            if not p.exists():
                known = sorted(q.stem for q in RECIPE_DIR.glob("*.yaml"))
                raise KeyError(f"unknown recipe {name_or_path!r} (a recipe is a name or a "
                               f"{'/'.join(RECIPE_SUFFIXES)} file); known: {known}")
        if p.suffix == ".json":  # not the YAML loader: YAML 1.1 reads JSON's 1e-08 (recipe.json's eps) as a string
            try:
                d = json.loads(p.read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}: not valid JSON ({e})") from None
        else:
            d = yaml.safe_load(p.read_text())
        if not isinstance(d, dict):  # an empty file is None: say so rather than fail on setdefault
            raise ValueError(f"{p}: a recipe is a mapping (name, model, data, stages, ...), "
                             f"not {'an empty file' if d is None else _shown(d)}")
        d.setdefault("name", p.stem)
        # an override of the stage plan replaces the file's, whichever form each is in
        for given, other in (("stages", "plan"), ("plan", "stages")):
            if given in overrides:
                d.pop(other, None)
        overrides = {k: _merge_dotted(d.get(k), k, v) if isinstance(v, DottedValue) else v
                     for k, v in overrides.items()}
        m = overrides.get("model")
        if isinstance(m, dict) and "config" not in m and d.get("model") is not None:
            # a model override without `config` ({extra: {topk: 64}}) changes the file's model config
            base = d["model"] if isinstance(d["model"], dict) else {"config": d["model"]}
            merged = {**base, **m}
            if isinstance(base.get("extra"), dict) and isinstance(m.get("extra"), dict):
                merged["extra"] = {**base["extra"], **m["extra"]}
            overrides = {**overrides, "model": merged}
        d.update(overrides)
        return cls.from_dict(d)


class DottedValue(dict):
    """What dotted ``--set`` keys give a top-level key (``model.extra.topk=64`` -> ``model:
    {extra: {topk: 64}}``): Recipe.load merges it into the recipe file's mapping at that key, level by
    level, where a plain override replaces the file's value."""


def _merge_dotted(base, key: str, value: DottedValue):
    """``value`` merged into the file's ``base`` (a model config name counts as ``{config: NAME}``)."""
    if key == "model" and isinstance(base, str):
        base = {"config": base}
    if not isinstance(base, dict):
        return _plain(value)
    out = dict(base)
    for k, v in value.items():
        out[k] = _merge_dotted(out.get(k), k, v) if isinstance(v, DottedValue) else v
    return out


def _plain(value):
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, DottedValue) else value


def parse_overrides(pairs: Iterable[str] | None) -> dict:
    """``--set KEY=VALUE`` options (the CLI's and torchrun's) as ``Recipe.load`` overrides. VALUE is YAML,
    the recipe's own syntax: ``batch_size=64`` is an int, ``stages=[...]`` a list. A dotted KEY sets one
    field inside a mapping and keeps the rest of it: ``model.extra.topk=64``, ``loss.flops_warmup=100``
    (DottedValue). A pair without ``KEY=``, an empty part of a dotted key, a dotted key inside a value
    that is not a mapping, or a VALUE that is not YAML is a ValueError naming the option (keys are
    checked by ``Recipe.from_dict``, which knows the fields)."""
    overrides: dict = {}
    for kv in pairs or []:
        key, sep, value = kv.partition("=")
        path = [part.strip() for part in key.split(".")]
        if not sep or not all(path):
            raise ValueError(f"--set takes KEY=VALUE, got {kv!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ValueError(f"--set {kv}: not a YAML value ({yaml_problem(e)})") from None
        node = overrides
        for depth, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = DottedValue()
            elif not isinstance(child, dict):
                raise ValueError(f"--set {kv}: {'.'.join(path[:depth + 1])} is set to {child!r} by an "
                                 "earlier --set, not to a mapping")
            node = child
        node[path[-1]] = parsed  # the last one wins, as argparse
    return overrides


def yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: "expected ',' or ']' at line 2, column 6"."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(e, 'problem', None) or ' '.join(str(e).split())}{where}"
