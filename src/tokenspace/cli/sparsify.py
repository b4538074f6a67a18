"""tokenspace sparsify --dense MODEL --data S.. --out DIR: a sparse, interpretable head on a frozen dense
model (the recipe sparsify-dense with the model, data and steps given here; models/sparsified.py).

The arguments (light: `tokenspace sparsify --help` imports no library); run/sparsify.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int

RECIPE = "sparsify-dense"


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--dense", required=True, help="the dense model: a trained model folder or release name")
    s.add_argument("--data", nargs="+", required=True, metavar="SPEC",
                   help="training data: DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    s.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl, model/)")
    s.add_argument("--steps", type=positive_int, default=None, help="training steps (default: the recipe's, 300)")
    s.add_argument("--eval", nargs="+", default=None, metavar="SPEC",
                   help="data specs to measure recall on at the end of training, into log.jsonl and the "
                        "model card (default: none)")
    s.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help=f"override a field of the {RECIPE} recipe with a YAML value (repeatable), "
                        "e.g. --set loss.lambda=1.0e-2")
