"""tokenspace demo: the main job: train STAIR and the dense baseline, index, search, report."""
from __future__ import annotations

import argparse
from pathlib import Path

from tokenspace import demo
from tokenspace.cli.common import tcp_port
from tokenspace.cli.serve import web_app
from tokenspace.pipeline import read_collection_meta


def add_arguments(dm: argparse.ArgumentParser) -> None:
    dm.add_argument("--out", default="runs/demo", help="demo folder (default runs/demo)")
    dm.add_argument("--quick", action="store_true", help="a tiny run to check the plumbing")
    dm.add_argument("--results", default=None,
                    help="markdown file for the results table (default DIR/results.md; docs/results.md updates "
                         "the docs page: a clone's tracked files stay as they are unless asked)")
    dm.add_argument("--serve", action="store_true", help="then serve the page on the demo index (Ctrl-C stops)")
    dm.add_argument("--port", type=tcp_port, default=8000, help="--serve: TCP port (default 8000)")


def run(args) -> int:
    app = web_app() if args.serve else None  # before minutes of training: the serve extra is there
    out = Path(args.out)
    demo.run(out=out, home=args.home, quick=args.quick, results=args.results or out / "results.md")
    if app is not None:
        # the model that built the index (the release model, or the STAIR trained here without one)
        model = read_collection_meta(out / "index")["model"] or out / "stair-emoji" / "model"
        app.run(model=model, index=out / "index", host="127.0.0.1", port=args.port)
    return 0
