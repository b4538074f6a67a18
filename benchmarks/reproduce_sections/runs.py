"""The models the sections compare: recipe, recipe overrides and each one's label in the tables."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from tokenspace.train.recipe import Recipe


@dataclass(frozen=True)
class Run:
    """One trained model: the recipe it comes from, recipe overrides, and its label in the tables."""

    recipe: str
    label: str
    overrides: dict = field(default_factory=dict)

    def recipe_overrides(self, quick: bool = False) -> dict:
        """A fresh copy every time, so no two runs ever share (and could alter) one overrides dict."""
        return {**copy.deepcopy(self.overrides), **(quick_overrides(self.recipe) if quick else {})}


def _lambda_run(lam: str) -> Run:
    # the whole loss block is replaced by a recipe override, so flops_warmup is restated (as stair-emoji)
    loss = {"lambda_image": float(lam), "lambda_text": float(lam), "flops_warmup": 100}
    return Run("stair-emoji", f"λ = {lam}", {"name": f"stair-emoji-lambda{lam}", "loss": loss})


RUNS: dict[str, Run] = {
    "stair-emoji": Run("stair-emoji", "STAIR 3-stage"),
    "stair-emoji-single": Run("stair-emoji-single", "STAIR single-stage"),
    "dense-emoji": Run("dense-emoji", "dense baseline"),
    "stair-emoji-lambda1e-2": _lambda_run("1e-2"),
    "stair-emoji-lambda1e-4": _lambda_run("1e-4"),
}
MAIN = ("stair-emoji", "stair-emoji-single", "dense-emoji")
STAIRS = ("stair-emoji", "stair-emoji-single")
# (run, lambda) in increasing lambda; 1e-3 is the recipe's own value
LAMBDAS = (("stair-emoji-lambda1e-4", 1e-4), ("stair-emoji", 1e-3), ("stair-emoji-lambda1e-2", 1e-2))


def quick_overrides(recipe: str) -> dict:
    """3 steps per stage on 128 emoji pairs, no in-training eval: exercises every code path in seconds."""
    r = Recipe.load(recipe)
    return {"stages": [{**s.__dict__, "steps": 3, "warmup_steps": 0} for s in r.stages],
            "data": {"train": ["emoji:train:128"], "eval": []}, "batch_size": 16}
