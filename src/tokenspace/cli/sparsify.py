"""tokenspace sparsify --dense MODEL --data S.. --out DIR: a sparse, interpretable head on a frozen dense
model (the recipe sparsify-dense with the model, data and steps given here; models/sparsified.py).
tokenspace sparsify --inference-free MODEL --data S.. --out DIR: a sparse model's query side as a stored
weight per token, no text network at query time (models/inference_free.py).

The arguments (light: `tokenspace sparsify --help` imports no library); run/sparsify.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int

RECIPE = "sparsify-dense"


def add_arguments(s: argparse.ArgumentParser) -> None:
    which = s.add_mutually_exclusive_group(required=True)
    which.add_argument("--dense", help="the dense model: a trained model folder or release name")
    which.add_argument("--inference-free", metavar="MODEL",
                       help="instead: an inference-free model over this sparse model (folder or release name): "
                            "its image side as it is, queries as the text's own tokens at a stored weight, no "
                            "text network at query time (no training; --out is the model folder)")
    s.add_argument("--data", nargs="+", default=None, metavar="SPEC",
                   help="training data: DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT); with "
                        "--inference-free, the training captions the query weights come from")
    s.add_argument("--out", required=True, help="run folder (checkpoints, log.jsonl, model/); with "
                                                "--inference-free, the model folder (new or empty)")
    s.add_argument("--weights", choices=["idf", "index-idf", "model"], default=None,
                   help="--inference-free: each token's query weight: idf: BM25's idf over the --data captions; "
                        "index-idf: over the --index's images; model: the base's mean text-side weight of the "
                        "token in the --data captions (default model: the best on validation data)")
    s.add_argument("--index", default=None, help="--inference-free --weights index-idf: an index of the base "
                                                 "model's image vectors")
    s.add_argument("--text-top-n", type=positive_int, default=None,
                   help="--inference-free: keep each query's n heaviest tokens (default: all)")
    s.add_argument("--steps", type=positive_int, default=None, help="training steps (default: the recipe's, 300)")
    s.add_argument("--eval", nargs="+", default=None, metavar="SPEC",
                   help="data specs to measure recall on at the end of training, into log.jsonl and the "
                        "model card (default: none)")
    s.add_argument("--resume", action="store_true", help="continue from the run folder's last checkpoint")
    s.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help=f"override a field of the {RECIPE} recipe with a YAML value (repeatable), "
                        "e.g. --set loss.lambda=1.0e-2")
