"""tokenspace serve --model M --index I: the HTTP API and web page."""
from __future__ import annotations

from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.hybrid import open_dense
from tokenspace.cli.model_loading import device_named, load_model
from tokenspace.models.registry import DEFAULT_RELEASE, release_path


def run(args) -> int:
    app = web_app()  # first: without the serve extra installed, say so before loading anything
    device_named(args.device)  # a bad --device is reported next, as on the other commands
    if not Path(args.index).is_dir():
        raise CLIError(f"--index {args.index}: no index folder there (make one with `make demo` or "
                       "`tokenspace index build`)")
    model_ref = args.model or pipeline.read_collection_meta(args.index).get("model") or (
        DEFAULT_RELEASE if release_path(DEFAULT_RELEASE) else None)
    if not model_ref:
        raise CLIError(f"serve needs --model: the index at {args.index} does not name its model and no release "
                       "model is installed")
    if args.dense_model and not args.dense_index:
        raise UsageError("--dense-model: only with --dense-index (hybrid search)")
    # hybrid search; the service checks that both indexes hold the same number of images
    dense = open_dense(args.dense_index, args.dense_model, args.device) if args.dense_index else None
    app.run(model=load_model(model_ref, args.device), index=args.index, host=args.host, port=args.port, dense=dense)
    return 0


def web_app():
    """tokenspace.serve.app (its ``run`` serves a model and an index folder until Ctrl-C)."""
    from tokenspace.serve import app  # optional: fastapi (the serve extra); `serve --help` works without it

    return app
