"""tokenspace serve --model M --index I: the HTTP API and web page.

The arguments (light: `tokenspace serve --help` imports no library); run/serve.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import DEVICE_HELP, positive_int, tcp_port

# serve/uploads.py's UPLOAD_PIXEL_BUDGET and MAX_UPLOAD_PIXELS (this module imports no library)
UPLOAD_PIXELS = 50_000_000
MAX_UPLOAD_PIXELS = 25_000_000


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
    sv.add_argument("--processes", type=positive_int, default=1, metavar="N",
                    help="server processes sharing the one port, each with its own search session (a search's "
                         "Python work runs on one core per process: up to one per core; default 1)")
    sv.add_argument("--upload-pixels", type=positive_int, default=UPLOAD_PIXELS, metavar="N",
                    help="memory bound: image uploads in flight decode at most N pixels at once, about 9 bytes "
                         "each at the peak (default 50,000,000: two 25-megapixel uploads, about 0.45 GB); "
                         "an upload that does not fit waits for none: 503 with Retry-After. Below "
                         f"{MAX_UPLOAD_PIXELS:,} it also caps one upload's pixels")
