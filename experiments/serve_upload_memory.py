"""Memory of `tokenspace serve` under concurrent image uploads: bursts of N simultaneous uploads of one
110 KB PNG of 5,000 x 5,000 RGBA pixels (just inside the 25-megapixel cap); the server's RSS idle, at
the peak and 20 s after each burst.

    python -m experiments.run serve_upload_memory              # after make demo: its index
    python -m experiments.run serve_upload_memory --set 'upload.bursts=[8,32,32]' --set serve.upload_pixels=25000000
    python -m experiments.run serve_upload_memory --set serve.src=/tmp/old/src    # another checkout's code

The server is the real command (`python -m tokenspace.cli serve`) in its own process; the peak is the
kernel's high-water mark of that process (VmHWM, reset before each burst through /proc/PID/clear_refs),
so nothing is missed between samples. Linux only. Prints one JSON line per burst.
"""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from PIL import Image

from experiments import config

ROOT = Path(__file__).resolve().parents[1]


def big_png(side: int = 5000) -> bytes:
    """A small file with a 25-megapixel RGBA raster (half its rows half transparent): about 110 KB."""
    a = np.zeros((side, side, 4), np.uint8)
    a[..., 0], a[..., 3] = 200, 255
    a[: side // 2, :, 3] = 128
    buf = io.BytesIO()
    Image.fromarray(a, "RGBA").save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def upload(port: int, data: bytes) -> tuple[int, str | None]:
    b = uuid.uuid4().hex
    body = (f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="big.png"\r\n'
            "Content-Type: image/png\r\n\r\n").encode() + data + f"\r\n--{b}--\r\n".encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/search/image", data=body,
                                 headers={"Content-Type": f"multipart/form-data; boundary={b}"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, None
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After")


def burst(pid: int, port: int, data: bytes, n: int, settle: float) -> dict:
    idle = status(pid, "VmRSS")
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := the current RSS
    answers: list = [None] * n
    start = threading.Barrier(n)

    def one(i: int) -> None:
        start.wait()
        answers[i] = upload(port, data)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    peak = status(pid, "VmHWM")
    time.sleep(settle)
    return {"uploads": n, "rss_before_mb": round(idle / 1e6), "peak_mb": round(peak / 1e6),
            "peak_over_before_mb": round((peak - idle) / 1e6), f"rss_{settle:g}s_later_mb": round(status(pid, "VmRSS") / 1e6),
            "answers": dict(Counter(str(c) for c, _ in answers)),
            "retry_after": sorted({r for _, r in answers if r}), "seconds": round(took, 1)}


def main(argv=None) -> int:
    run, _ = config.start("serve_upload_memory", argv)
    srv, up = run["serve"], run["upload"]
    args = SimpleNamespace(
        index=str(ROOT / srv["index"]),
        model=srv["model"] or None,  # '' = the model the index names
        upload_pixels=srv["upload_pixels"] or None,  # serve --upload-pixels; 0 = its own default
        serve_src=srv["src"] or None,  # run the server from this src/ folder (e.g. an older checkout)
        start_timeout=srv["start_timeout"],
        bursts=up["bursts"],  # uploads per burst, in order
        side=up["side"],  # the PNG's width and height
        settle=up["settle"])  # seconds after each burst before the RSS is read
    run.ready()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "tokenspace.cli", "serve", "--index", args.index, "--port", str(port)]
    cmd += ["--model", args.model] if args.model else []
    cmd += ["--upload-pixels", str(args.upload_pixels)] if args.upload_pixels else []
    env = dict(os.environ, **({"PYTHONPATH": args.serve_src} if args.serve_src else {}))
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + args.start_timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start: {server.stderr.read()[-2000:]}") from None
                time.sleep(0.5)
        data = big_png(args.side)
        print(json.dumps({"server_rss_idle_mb": round(status(server.pid, "VmRSS") / 1e6), "png_bytes": len(data),
                          "cpus": os.cpu_count()}), flush=True)
        for n in args.bursts:
            print(json.dumps(burst(server.pid, port, data, n, args.settle)), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
