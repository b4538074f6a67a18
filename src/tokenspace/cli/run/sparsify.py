"""tokenspace sparsify --dense MODEL --data S.. --out DIR: a sparse, interpretable head on a frozen dense
model (the recipe sparsify-dense with the model, data and steps given here; models/sparsified.py)."""
from __future__ import annotations

import json
from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, check_writable_place
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.sparsify import RECIPE
from tokenspace.models.config import CONFIG_FILE, TOKENIZER_FILE, VOCAB_FILE
from tokenspace.models.inference_free import make_inference_free
from tokenspace.models.registry import release_path
from tokenspace.outputs import RUN, check_output
from tokenspace.train.evaluation import texts_and_targets
from tokenspace.train.recipe import Recipe, parse_overrides
from tokenspace.train.trainer import check_run_folder


def run(args) -> int:
    if args.inference_free:
        return _inference_free(args)
    given = [f"--{o.replace('_', '-')}" for o in ("weights", "index", "text_top_n") if getattr(args, o) is not None]
    if given:
        raise CLIError(f"{', '.join(given)}: only with --inference-free")
    if not args.data:
        raise CLIError("--data: give the training data specs")
    _check_run_out(Path(args.out), args.resume)  # before the data and the dense model are read
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


def _check_run_out(out: Path, resume: bool) -> None:
    """--out is new, empty, or a run folder (a run there is refused without --resume, as `train` does)."""
    check_writable_place(out, "--out")
    try:
        check_run_folder(out, resume)
    except ValueError as e:
        raise CLIError(f"--out {e}") from None
    check_output(out, "--out", own=(RUN,), what="training run")  # an index, shards, the user's files: refused


def _inference_free(args) -> int:
    """--inference-free MODEL: fit the query weights, write the model folder (no training)."""
    given = [o for o, v in (("--steps", args.steps), ("--eval", args.eval), ("--resume", args.resume),
                            ("--set", args.set)) if v]
    if given:
        raise CLIError(f"{', '.join(given)}: not with --inference-free (nothing is trained)")
    weights = args.weights or "model"  # the best of the three on the release's val splits
    if weights == "index-idf":
        if not args.index or args.data:
            raise CLIError("--weights index-idf: give --index DIR (the base model's index), not --data")
    elif args.index or not args.data:
        raise CLIError(f"--weights {weights}: give --data SPEC.. (training captions), not --index")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CLIError(f"--out {out} exists and is not an empty folder: choose a new or empty folder")
    check_output(out, "--out", what="model")  # nor a new folder inside an index
    check_writable_place(out, "--out")
    # before the model loads: a bad spec or index fails in one line
    captions = index = None
    if args.data:
        captions = texts_and_targets(pipeline.load_data(args.data, args.home))[0]
        if not captions:
            raise CLIError(f"--data {' '.join(args.data)}: no captions")
    if args.index:
        index = load_index(args.index)
    try:
        model = make_inference_free(args.inference_free, weights, captions=captions, index=index,
                                    text_top_n=args.text_top_n, source=" ".join(args.data or [args.index]))
    except ValueError as e:
        raise CLIError(str(e)) from None
    notes = (f"Inference-free queries over `{args.inference_free}`: its image side as it is; a query is the "
             f"text's own content word pieces at a stored weight ({weights}, from {model.config.options.source}), "
             "no text network at query time (models/inference_free.py). Not a paper model.")
    model.save_pretrained(out, card={"command": "tokenspace sparsify --inference-free " + args.inference_free,
                                     "data": args.data, "notes": notes})
    nonzero = int((model.query_weights > 0).sum())
    print(f"inference-free {args.inference_free} ({weights} weights, {nonzero} tokens): {out}")
    return 0
