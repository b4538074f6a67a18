"""tokenspace train --recipe R --out DIR: train a model (resumable with --resume).

The arguments (light: `tokenspace train --help` imports no library); run/train.py runs it."""
from __future__ import annotations

import argparse


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("--recipe", required=True, help="recipe name (configs/recipes) or YAML path")
    t.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl, model/)")
    t.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a recipe field with a YAML value (repeatable), e.g. --set batch_size=64")
