"""tokenspace train --recipe R --out DIR: train a model (resumable with --resume)."""
from __future__ import annotations

from pathlib import Path

import yaml

from tokenspace import pipeline
from tokenspace.cli.common import CLIError
from tokenspace.data.specs import shard_pattern
from tokenspace.train import scale
from tokenspace.train.recipe import Recipe, parse_overrides, yaml_problem


def run(args) -> int:
    overrides = parse_overrides(args.set)  # a bad --set is a ValueError naming it: one line, exit 1
    try:
        recipe = Recipe.load(args.recipe, **overrides)
    except yaml.YAMLError as e:
        raise CLIError(f"{args.recipe}: not valid YAML ({yaml_problem(e)})") from None
    specs = recipe.data.get("train") or []
    specs = [specs] if isinstance(specs, str) else specs
    if recipe.train_image_tower or any(shard_pattern(s) is not None for s in specs):
        # pixels end to end (webdataset shards); under torchrun use `python -m tokenspace.train.distributed`
        train = scale.train
    else:
        train = pipeline.train  # cached backbone grids, per-step eval on data.eval
    model = train(recipe, args.out, home=args.home, resume=args.resume)
    print(f"trained {model.config.name}: {Path(args.out) / 'model'}")
    return 0
