"""Several server processes on one port, for the cores one process cannot use.

A search's Python side (HTTP, the explanation, the Searcher's own work) runs on one core at a time in one
process: Python's interpreter lock. The release model's server spends most of its 7.6 ms of CPU per request
there (only the text side's products run outside it), so one process answers at most about 150 searches a
second however many cores the machine has; two processes served it at twice one's rate, measured back to
back on the same shared cores (docs/benchmarks.md, serve load). Each process opens its own search session and listens on the same
port with SO_REUSEPORT, and the kernel spreads the connections over them (Linux and the BSDs; elsewhere this
refuses). The index's files are memory-mapped, so the processes share its pages; each holds its own model.

    run_processes(functools.partial(Searcher.open, "runs/demo/index"), processes=2, port=8000)
"""
from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import wait

import uvicorn

from tokenspace.models.fused_queries import one_blas_thread
from tokenspace.serve.app import (
    UPLOAD_PIXEL_BUDGET,
    _check_port_free,
    create_app,
    run,  # noqa: F401 - one process: what `tokenspace serve` runs without --processes (cli/run/serve.py)
    server_settings,
)

log = logging.getLogger(__name__)


def shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other processes may bind too (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def serve_one(open_session: Callable, host: str, port: int, upload_pixels: int) -> None:
    """One server process: its own search session (``open_session()``), the app, uvicorn on its own socket
    of the shared port (what ``app.run`` does for a single process)."""
    searcher = open_session()
    one_blas_thread()
    sock = shared_socket(host, port)
    server = uvicorn.Server(uvicorn.Config(create_app(searcher, upload_pixels=upload_pixels), **server_settings()))
    server.run(sockets=[sock])


def run_processes(open_session: Callable, processes: int = 2, host: str = "127.0.0.1", port: int = 8000,
                  upload_pixels: int = UPLOAD_PIXEL_BUDGET) -> None:
    """Serve the API from ``processes`` processes on one port until interrupted (Ctrl-C or SIGTERM stops
    them all, as does one of them exiting). ``open_session``: a picklable callable that opens the search
    session in each process, e.g. ``functools.partial(Searcher.open, index_dir, model)``."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive int, got {processes!r}")
    if not hasattr(socket, "SO_REUSEPORT"):
        raise OSError("several server processes on one port need SO_REUSEPORT, which this system lacks")
    _check_port_free(host, port)
    # fresh interpreters: a fork would copy torch's and OpenMP's threads' state, which a child cannot use
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=serve_one, args=(open_session, host, port, upload_pixels), name=f"serve-{i}")
             for i in range(processes)]
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # through the finally below: the children go too
    try:
        for p in procs:
            p.start()
        log.info("serving from %d processes on http://%s:%d", processes, host, port)
        wait([p.sentinel for p in procs])  # until one of them exits
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(10)
