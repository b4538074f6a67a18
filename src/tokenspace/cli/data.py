"""tokenspace data build: the manifests of the installed datasets.

The arguments (light: `tokenspace data --help` imports no library); run/data.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int


def add_arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("action", choices=["build"], help="build: write the manifests of the installed datasets")
    d.add_argument("--out", default=None, help="manifest folder (default: the one under --home)")
    d.add_argument("--force", action="store_true", help="rebuild manifests that already exist")
    d.add_argument("--seed", type=int, default=0, help="seed of the split assignment (default 0)")
    d.add_argument("--openclipart-max-items", type=positive_int, default=None,
                   help="cap the OpenClipart manifest at this many items")
    d.add_argument("--only", nargs="+", default=None, metavar="DATASET",
                   help="build only these (emoji icons openclipart fashion-mnist mnist photos); default: all")
