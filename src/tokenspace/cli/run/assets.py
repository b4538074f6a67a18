"""tokenspace assets install|status: the offline weights and datasets in the cache."""
from __future__ import annotations

import argparse

from tokenspace import assets


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("action", choices=["install", "status"], help="install: fetch into the cache; status: check it")
    a.add_argument("names", nargs="*", help="asset names (default: all required ones)")
    a.add_argument("--optional", action="store_true", help="also install optional assets")
    a.add_argument("--quiet", action="store_true", help="no progress messages")
    a.add_argument("--fast", action="store_true", help="status: skip sha256 checks")


def run(args) -> int:
    if args.action == "install":
        report = assets.install(args.names or None, home=args.home, progress=not args.quiet, optional=args.optional)
        print(report)
        return 0 if report.ok else 1
    st = assets.status(args.home, hashes=not args.fast)
    print(assets.format_status(st))
    return 0 if all(v["present"] or v["optional"] for v in st.values()) else 1
