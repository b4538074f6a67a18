"""tokenspace serve --model M --index I: the HTTP API and web page."""
from __future__ import annotations

import argparse
import functools
import socket
from pathlib import Path

from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.model_loading import check_model_ref, device_named, has_torch
from tokenspace.cli.run.search import as_typed, dense_half
from tokenspace.index.folder import index_model
from tokenspace.models.releases import DEFAULT_RELEASE, release_path
from tokenspace.searcher import Searcher, SearchError


def _default_release() -> str | None:
    """The release model, when installed (an index that names no model is searched with it)."""
    if not has_torch():  # a lean install loads no release model
        return None
    return DEFAULT_RELEASE if release_path(DEFAULT_RELEASE) else None


def run(args) -> int:
    app = web_app()  # first: without the serve extra installed, say so before loading anything
    device_named(args.device)  # a bad --device is reported next, as on the other commands
    _check_host(args.host)  # before the model loads; a busy --port is the app's own check
    if not Path(args.index).is_dir():
        raise CLIError(f"--index {args.index}: no index folder there (make one with `make demo` or "
                       "`tokenspace index build`)")
    model_ref = args.model or _recorded_model(args.index) or _default_release()
    if not model_ref:
        raise CLIError(f"serve needs --model: the index at {args.index} does not name its model and no release "
                       "model is installed")
    if args.dense_model and not args.dense_index:
        raise UsageError("--dense-model: only with --dense-index (hybrid search)")
    check_model_ref(model_ref)
    check_model_ref(args.dense_model, "--dense-model")
    session = functools.partial(open_session, args.index, model_ref, args.dense_index, args.dense_model, args.device)
    searcher = session()  # here first, with several processes too: a bad index or model is one error, not N
    if args.processes == 1:
        app.run(searcher, host=args.host, port=args.port, upload_pixels=args.upload_pixels)
        return 0
    del searcher  # each process opens its own (spawned: torch's threads do not survive a fork)
    app.run_processes(session, args.processes, host=args.host, port=args.port, upload_pixels=args.upload_pixels)
    return 0


def open_session(index, model_ref, dense_index, dense_model, device) -> Searcher:
    """The search session `serve` runs (module level: several processes each call it after a spawn)."""
    try:  # the index, its ranking, the dense half (hybrid search), then the model: one session
        dense = dense_half(argparse.Namespace(dense_index=dense_index, dense_model=dense_model), device)
        return Searcher.open(index, model_ref, dense, device=device)
    except SearchError as e:
        raise CLIError(as_typed(e)) from None


def _recorded_model(index_dir) -> str | None:
    try:
        return index_model(index_dir)
    except ValueError as e:  # a damaged manifest or collection.json, named
        raise CLIError(str(e)) from None


def _check_host(host: str) -> None:
    """--host names an address this machine can listen on (999.1.1.1 was reported as a busy --port)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
        with socket.create_server(address[:2], family=family):  # port 0: any free one, so only the host is tried
            pass
    except socket.gaierror:
        raise CLIError(f"--host {host}: not an IP address or a known host name") from None
    except OSError as e:
        raise CLIError(f"--host {host}: this machine cannot listen on that address ({e.strerror or e})") from None


def web_app():
    """tokenspace.serve.processes: ``run`` serves a session from this process (serve/app.py's), ``run_processes``
    from several on one port, until Ctrl-C."""
    # optional: fastapi (the serve extra); `serve --help` works without it
    from tokenspace.serve import processes  # run (one process, serve/app.py's) and run_processes (several)

    return processes
