"""tokenspace demo: the main job: train STAIR and the dense baseline, index, search, report."""
from __future__ import annotations

from pathlib import Path

from tokenspace import demo
from tokenspace.cli.common import UsageError
from tokenspace.cli.run.serve import web_app
from tokenspace.index.folder import index_model
from tokenspace.searcher import Searcher


def run(args) -> int:
    if args.port is not None and not args.serve:  # before minutes of training, as every check here
        raise UsageError("--port is the port of --serve: give --serve too, or leave --port out")
    app = web_app() if args.serve else None  # before minutes of training: the serve extra is there
    out = Path(args.out)
    demo.run(out=out, home=args.home, quick=args.quick, results=args.results or out / "results.md")
    if app is not None:
        # the model that built the index (the release model, or the STAIR trained here without one)
        model = index_model(out / "index") or out / "stair-emoji" / "model"
        app.run(Searcher.open(out / "index", model), host="127.0.0.1", port=args.port or 8000)
    return 0
