"""Memory of `tokenspace serve` under concurrent image uploads: bursts of N simultaneous uploads of one
110 KB PNG of 5,000 x 5,000 RGBA pixels (just inside the 25-megapixel cap); the server's RSS idle, at
the peak and 20 s after each burst.

    python -m experiments.serve_upload_memory                                  # after make demo: its index
    python -m experiments.serve_upload_memory --bursts 8 32 32 --upload-pixels 25000000
    python -m experiments.serve_upload_memory --serve-src /tmp/old/src --bursts 8   # another checkout's code

The server is the real command (`python -m tokenspace.cli serve`) in its own process; the peak is the
kernel's high-water mark of that process (VmHWM, reset before each burst through /proc/PID/clear_refs),
so nothing is missed between samples. Linux only. Prints one JSON line per burst.
"""
from __future__ import annotations

import argparse
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

import numpy as np
from PIL import Image

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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "runs/demo/index"))
    ap.add_argument("--model", default=None, help="default: the model the index names")
    ap.add_argument("--bursts", type=int, nargs="+", default=[8, 32], help="uploads per burst, in order")
    ap.add_argument("--upload-pixels", type=int, default=None, help="serve --upload-pixels (default: its own)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds after each burst before the RSS is read")
    ap.add_argument("--serve-src", default=None, help="run the server from this src/ folder (e.g. an older checkout)")
    args = ap.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "tokenspace.cli", "serve", "--index", args.index, "--port", str(port)]
    cmd += ["--model", args.model] if args.model else []
    cmd += ["--upload-pixels", str(args.upload_pixels)] if args.upload_pixels else []
    env = dict(os.environ, **({"PYTHONPATH": args.serve_src} if args.serve_src else {}))
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start: {server.stderr.read()[-2000:]}") from None
                time.sleep(0.5)
        data = big_png()
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
