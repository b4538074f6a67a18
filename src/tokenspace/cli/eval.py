"""tokenspace eval --model DIR --data S..: retrieval metrics.

The arguments (light: `tokenspace eval --help` imports no library); run/eval.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import DEVICE_HELP


def add_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("--model", required=True, help="model folder or release name")
    e.add_argument("--data", nargs="+", required=True, help="DATASET:SPLIT[:LIMIT] specs (or MANIFEST.jsonl:SPLIT)")
    e.add_argument("--json", default=None, help="also write the metrics here (clip_benchmark's keys: "
                   "image_retrieval_* is text→image, text_retrieval_* image→text)")
    e.add_argument("--device", default="cpu", help=DEVICE_HELP)
    e.add_argument("--overwrite", action="store_true", help="replace the --json file when it exists")
