"""tokenspace sparsify --dense MODEL --data S.. --out DIR: a sparse, interpretable head on a frozen dense
model (the recipe sparsify-dense with the model, data and steps given here; models/sparsified.py)."""
from __future__ import annotations

import json
from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError
from tokenspace.cli.sparsify import RECIPE
from tokenspace.models.config import CONFIG_FILE, TOKENIZER_FILE, VOCAB_FILE
from tokenspace.models.registry import release_path
from tokenspace.train.recipe import Recipe, parse_overrides


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
