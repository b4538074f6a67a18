"""tokenspace sparsify --dense MODEL --data S.. --out DIR: a sparse, interpretable head on a frozen dense
model (the recipe sparsify-dense with the model, data and steps given here; models/sparsified.py)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, positive_int
from tokenspace.models.config import CONFIG_FILE, TOKENIZER_FILE, VOCAB_FILE
from tokenspace.models.registry import release_path
from tokenspace.train.recipe import Recipe, parse_overrides

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


def run(args) -> int:
    folder = Path(args.dense) if (Path(args.dense) / CONFIG_FILE).is_file() else release_path(args.dense)
    if folder is None:
        raise CLIError(f"--dense {args.dense}: no trained model folder (with {CONFIG_FILE}) there, nor a release name")
    # the dense model's own vocabulary is the sparse vectors' (as from_pretrained reads it)
    vocab = folder / (TOKENIZER_FILE if (folder / TOKENIZER_FILE).exists() else VOCAB_FILE)
    pipeline.load_data(args.data, args.home)  # a bad spec fails here, in one line, before any model loads
    sets = [f"model.extra.dense={json.dumps(str(folder))}", f"model.vocab={json.dumps(str(vocab))}",
            f"data.train={json.dumps(args.data)}", f"data.eval={json.dumps(args.eval or [])}"]
    if args.steps is not None:
        stages = [{**s.__dict__, "steps": args.steps, "warmup_steps": min(s.warmup_steps, args.steps)}
                  for s in Recipe.load(RECIPE).stages]
        sets.append(f"stages={json.dumps(stages)}")
    recipe = Recipe.load(RECIPE, **parse_overrides(sets + (args.set or [])))  # the user's --set last: it wins
    pipeline.train(recipe, args.out, home=args.home, resume=args.resume)
    print(f"sparsified {args.dense}: {Path(args.out) / 'model'}")
    return 0
