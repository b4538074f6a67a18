"""tokenspace decode --model DIR --image|--text ...: top tokens of images or texts."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import UsageError, positive_int, text
from tokenspace.cli.model_loading import load_model


def add_arguments(dc: argparse.ArgumentParser) -> None:
    dc.add_argument("--model", required=True, help="model folder or release name")
    dc.add_argument("--image", nargs="*", default=None, help="image files")
    dc.add_argument("--text", nargs="*", default=None, type=text, help="texts")
    dc.add_argument("-k", type=positive_int, default=15, help="tokens per input (default 15)")


def run(args) -> int:
    if not args.image and not args.text:
        raise UsageError("give --image or --text")
    model = load_model(args.model)
    for names, encode in ((args.image, model.encode_images), (args.text, model.encode_texts)):
        if not names:
            continue
        for name, row in zip(names, model.decode(encode(names), top_k=args.k)):
            print(f"{name}:")
            print("  " + ", ".join(f"{t} {w:.3f}" for t, w in row))
    return 0
