"""tokenspace serve --model M --index I: the HTTP API and web page.

The arguments (light: `tokenspace serve --help` imports no library); run/serve.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import DEVICE_HELP, tcp_port


def add_arguments(sv: argparse.ArgumentParser) -> None:
    sv.add_argument("--model", help="model folder or release name (default: the model the index names, "
                    "else the release model)")
    sv.add_argument("--index", default="runs/demo/index",
                    help="index folder written by `tokenspace index build` (default: make demo's, runs/demo/index)")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=tcp_port, default=8000, help="TCP port (default 8000)")
    sv.add_argument("--device", default="cpu", help=DEVICE_HELP)
    sv.add_argument("--dense-index", default=None, metavar="DIR",
                    help="hybrid search: a dense index of the same images (`index build` with a dense model); "
                         "requests then may set \"fusion\"")
    sv.add_argument("--dense-model", default=None, help="--dense-index: default the model it was built with")
