"""tokenspace train --recipe R --out DIR: train a model (resumable with --resume)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from tokenspace import pipeline
from tokenspace.cli.common import CLIError
from tokenspace.data.specs import shard_pattern
from tokenspace.models.card import run_info
from tokenspace.outputs import RUN, check_output
from tokenspace.train import scale
from tokenspace.train.recipe import Recipe, parse_overrides, yaml_problem

RECALL = re.compile(r"^(image|text)_retrieval_recall@(\d+)$")
# the other numbers the held-out evaluation reports, in the order shown, with what to call them
EXTRAS = (("mean_recall", "mean recall", "{:.3f}"), ("nnz_image", "nonzeros per image", "{:.1f}"),
          ("nnz_text", "nonzeros per text", "{:.1f}"), ("flops", "FLOPs", "{:.2f}"))


def run(args) -> int:
    # a run folder, or a new or empty one (--resume or not): never an index, shards or the user's files
    check_output(args.out, "--out", own=(RUN,), what="training run")
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
    # the run ends on what it achieved: the trainer's last held-out evaluation (log.jsonl), as a table
    info = run_info(args.out)
    print(metrics_table(info.get("metrics"), info.get("metrics_step"), recipe.data.get("eval")))
    return 0


def metrics_table(metrics: dict | None, step, eval_specs=None) -> str:
    """The held-out metrics as the few lines a run ends with: recall@K per direction, then the rest.
    A dict of dicts (one per data spec) gives one block per spec."""
    if not metrics and eval_specs:
        return "no held-out metrics: the run's log.jsonl holds no evaluation (eval_every longer than the run?)"
    if not metrics:
        return ("no held-out metrics: the recipe names no data.eval (add one to see recall on held-out "
                "pairs; `tokenspace eval` measures a trained model later)")
    on = ", ".join(eval_specs) if isinstance(eval_specs, list) else eval_specs
    head = f"held-out metrics at step {step}" + (f" on {on}" if on else "")
    if all(isinstance(v, dict) for v in metrics.values()):
        return "\n".join([head + ":"] + [f"  {spec}:\n" + _block(m, "    ") for spec, m in metrics.items()])
    return head + ":\n" + _block(metrics, "  ")


def _block(m: dict, pad: str) -> str:
    recalls: dict[str, dict[int, float]] = {}
    rest = []
    for key, value in m.items():
        hit = RECALL.match(key)
        if hit and isinstance(value, (int, float)):
            recalls.setdefault(hit.group(1), {})[int(hit.group(2))] = float(value)
    lines = []
    ks = sorted({k for r in recalls.values() for k in r})
    if ks:
        lines.append(pad + f"{'':17s}" + "".join(f"{'R@' + str(k):>8s}" for k in ks))
        for side in ("image", "text"):
            if side in recalls:
                row = "".join(f"{recalls[side][k]:8.3f}" if k in recalls[side] else f"{'-':>8s}" for k in ks)
                lines.append(pad + f"{side + ' retrieval':17s}" + row)
    for key, name, fmt in EXTRAS:
        if isinstance(m.get(key), (int, float)):
            rest.append(f"{name} {fmt.format(m[key])}")
    if isinstance(m.get("n_images"), (int, float)):
        rest.append(f"{int(m['n_images'])} images, {int(m.get('n_texts', 0))} texts")
    known = {k for k, *_ in EXTRAS} | {"n_images", "n_texts"}
    rest += [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items()
             if not RECALL.match(k) and k not in known]
    if rest:
        lines.append(pad + "; ".join(rest))
    return "\n".join(lines)
