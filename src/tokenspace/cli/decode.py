"""tokenspace decode --model DIR --image|--text ...: top tokens of images or texts."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import UsageError, positive_int
from tokenspace.cli.model_loading import load_model


def add_arguments(dc: argparse.ArgumentParser) -> None:
    dc.add_argument("--model", required=True, help="model folder or release name")
    dc.add_argument("--image", nargs="*", default=None, help="image files")
    dc.add_argument("--text", nargs="*", default=None, help="texts")
    dc.add_argument("-k", type=positive_int, default=15, help="tokens per input (default 15)")


def run(args) -> int:
    if not args.image and not args.text:
        raise UsageError("give --image or --text")
    model = load_model(args.model)
    batch = model.encode_images(args.image) if args.image else model.encode_texts(args.text)
    for name, row in zip(args.image or args.text, model.decode(batch, top_k=args.k)):
        print(f"{name}:")
        print("  " + ", ".join(f"{t} {w:.3f}" for t, w in row))
    return 0
