"""tokenspace eval --model DIR --data S..: retrieval metrics."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tokenspace import atomic, pipeline
from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.model_loading import load_model
from tokenspace.eval.retrieval import metric_label


def run(args) -> int:
    if args.overwrite and not args.json:  # it would do nothing: said, not dropped
        raise UsageError("--overwrite replaces the --json file: give --json FILE too, or leave --overwrite out")
    if args.json:  # before the evaluation: a path that cannot be written must not cost the whole run
        _check_writable(Path(args.json), args.overwrite)
    model = load_model(args.model, args.device)
    results = pipeline.evaluate(model, args.data, home=args.home)
    for spec, metrics in results.items():
        print(spec)
        for k, v in metrics.items():  # the direction said in words; --json keeps clip_benchmark's keys
            print(f"  {metric_label(k):24s} {v:.4f}")
    if args.json:
        atomic.write_text(Path(args.json), json.dumps(results, indent=2))
    return 0


def _check_writable(path: Path, overwrite: bool) -> None:
    if path.is_dir():
        raise CLIError(f"--json {path} is a folder; give a file path")
    if path.exists() and not overwrite:  # a file of the user's is replaced only when asked
        raise CLIError(f"--json {path} exists: pass --overwrite to replace it, or choose another path")
    try:  # a file made and removed: permission bits do not tell for root, or for /proc
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as e:
        raise CLIError(f"--json {path}: cannot write in {path.parent} ({e.strerror or e})") from None
