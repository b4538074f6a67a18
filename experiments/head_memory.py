"""Peak memory and time of STAIR's token head, forward + backward: the plain autograd head against
``models.maxproj.max_projection`` (the head the models use), at paper-like shapes.

    nice -n 10 python -m experiments.head_memory
    python -m experiments.head_memory --shapes image:8:196 --repeats 1

The head: ENC = log(1 + relu(max_j (h_j . e_v + b_v))) over positions j, V = 30,522, H = 512 (STAIR's
text width, the width e is tied to). Shapes: ``image`` = 196 cells (ViT-B/16 at 224 px), ``text`` = 76
tokens with padding masked. Each arm runs in a fresh child process; its memory is the child's peak RSS
(``resource.getrusage``) minus the RSS after its inputs were built, so the interpreter, torch and the
inputs are not counted. (tracemalloc cannot see torch's allocations.)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
V, H = 30522, 512


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(arm: str, side: str, batch: int, length: int) -> dict:
    import torch

    from tokenspace.models.maxproj import max_projection
    from tokenspace.models.pooling import log1p_relu, max_log1p_relu

    torch.manual_seed(0)
    h = (torch.randn(batch, length, H) * 0.05).requires_grad_()
    w = (torch.randn(V, H) * 0.05).requires_grad_()
    b = torch.zeros(V, requires_grad=True)
    valid = None
    if side == "text":
        valid = torch.arange(length)[None] < torch.randint(8, length + 1, (batch, 1))
    g = torch.randn(batch, V)
    # the baseline after the inputs exist: what the head itself adds is above it
    head = (lambda: max_log1p_relu(h @ w.T + b, valid)) if arm == "autograd" else \
        (lambda: log1p_relu(max_projection(h, w, b, valid)))
    base = _rss_mib()
    t0 = time.perf_counter()
    out = head()
    (out * g).sum().backward()
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"arm": arm, "side": side, "batch": batch, "positions": length, "seconds": dt,
            "peak_above_inputs_mib": peak - base, "scores_mib": batch * length * V * 4 / 2**20,
            "checksum": float(out.detach().double().sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["image:32:196", "text:64:76"], help="side:batch:positions")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "head_memory.json"))
    ap.add_argument("--child", nargs=4, metavar=("ARM", "SIDE", "BATCH", "POSITIONS"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        arm, side, batch, length = a.child
        print(json.dumps(child(arm, side, int(batch), int(length))))
        return 0
    rows = []
    for shape in a.shapes:
        side, batch, length = shape.split(":")
        for _ in range(a.repeats):
            for arm in ("autograd", "max_projection"):
                out = subprocess.run([sys.executable, "-m", "experiments.head_memory", "--child", arm, side, batch,
                                      length], capture_output=True, text=True, check=True, cwd=ROOT)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                r = rows[-1]
                print(f"{side} B={batch} L={length} {arm}: peak +{r['peak_above_inputs_mib']:.0f} MiB "
                      f"(scores tensor {r['scores_mib']:.0f} MiB), {r['seconds']:.2f} s", flush=True)
    import torch

    from tokenspace.atomic import write_text

    res = {"command": "python -m experiments.head_memory " + " ".join(sys.argv[1:] if argv is None else argv),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": os.getloadavg(), "rows": rows}
    write_text(Path(a.json), json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
