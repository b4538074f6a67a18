"""tokenspace assets install|status: the offline weights and datasets in the cache.

The arguments (light: `tokenspace assets --help` imports no library); run/assets.py runs it."""
from __future__ import annotations

import argparse


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("action", choices=["install", "status"], help="install: fetch into the cache; status: check it")
    a.add_argument("names", nargs="*", help="asset names (default: all required ones)")
    a.add_argument("--optional", action="store_true", help="also install optional assets")
    a.add_argument("--quiet", action="store_true", help="no progress messages")
    a.add_argument("--fast", action="store_true", help="status: skip sha256 checks")
