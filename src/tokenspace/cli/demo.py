"""tokenspace demo: the main job: train STAIR and the dense baseline, index, search, report."""
from __future__ import annotations

import argparse
from pathlib import Path

from tokenspace import demo
from tokenspace.cli.common import tcp_port
from tokenspace.cli.serve import web_app


def add_arguments(dm: argparse.ArgumentParser) -> None:
    dm.add_argument("--out", default="runs/demo", help="demo folder (default runs/demo)")
    dm.add_argument("--quick", action="store_true", help="a tiny run to check the plumbing")
    dm.add_argument("--serve", action="store_true", help="then serve the page on the demo index (Ctrl-C stops)")
    dm.add_argument("--port", type=tcp_port, default=8000, help="--serve: TCP port (default 8000)")


def run(args) -> int:
    app = web_app() if args.serve else None  # before minutes of training: the serve extra is there
    demo.run(out=args.out, home=args.home, quick=args.quick)
    if app is not None:
        out = Path(args.out)
        app.run(model=out / "stair-emoji" / "model", index=out / "index", host="127.0.0.1", port=args.port)
    return 0
