"""tokenspace demo: the main job: train STAIR and the dense baseline, index, search, report.

The arguments (light: `tokenspace demo --help` imports no library); run/demo.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import tcp_port


def add_arguments(dm: argparse.ArgumentParser) -> None:
    dm.add_argument("--out", default="runs/demo", help="demo folder (default runs/demo)")
    dm.add_argument("--quick", action="store_true", help="a tiny run to check the plumbing")
    dm.add_argument("--results", default=None,
                    help="markdown file for the results table (default DIR/results.md; docs/results.md updates "
                         "the docs page: a clone's tracked files stay as they are unless asked)")
    dm.add_argument("--serve", action="store_true", help="then serve the page on the demo index (Ctrl-C stops)")
    dm.add_argument("--port", type=tcp_port, default=None,
                    help="--serve: TCP port (default 8000; refused without --serve)")
