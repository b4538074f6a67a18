"""tokenspace eval --model DIR --data S..: retrieval metrics."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import DEVICE_HELP
from tokenspace.cli.model_loading import load_model


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("--model", required=True, help="model folder or release name")
    e.add_argument("--data", nargs="+", required=True, help="DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    e.add_argument("--json", default=None, help="also write the metrics here")
    e.add_argument("--device", default="cpu", help=DEVICE_HELP)


def run(args) -> int:
    model = load_model(args.model, args.device)
    results = pipeline.evaluate(model, args.data, home=args.home)
    for spec, metrics in results.items():
        print(spec)
        for k, v in metrics.items():
            print(f"  {k:32s} {v:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0
