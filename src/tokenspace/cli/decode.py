"""tokenspace decode --model DIR --image|--text ...: top tokens of images or texts.

The arguments (light: `tokenspace decode --help` imports no library); run/decode.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int, text


def add_arguments(dc: argparse.ArgumentParser) -> None:
    dc.add_argument("--model", required=True, help="model folder or release name")
    dc.add_argument("--image", nargs="*", default=None, help="image files")
    dc.add_argument("--text", nargs="*", default=None, type=text, help="texts")
    dc.add_argument("-k", type=positive_int, default=15, help="tokens per input (default 15)")
