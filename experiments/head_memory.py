"""Peak memory and time of STAIR's token head, forward + backward: the plain autograd head against
``models.maxproj.max_projection`` (the head the models use), at paper-like shapes.

    nice -n 10 python -m experiments.run head_memory
    python -m experiments.run head_memory --set 'head.shapes=["image:8:196"]'

The head: ENC = log(1 + relu(max_j (h_j . e_v + b_v))) over positions j, V = 30,522, H = 512 (STAIR's
text width, the width e is tied to; [head] vocab and width in experiments/head_memory.toml). Shapes: ``image`` = 196 cells (ViT-B/16 at 224 px), ``text`` = 76
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

from experiments import config

ROOT = Path(__file__).resolve().parent.parent


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(arm: str, side: str, batch: int, length: int, V: int, H: int) -> dict:
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
    ap.add_argument("--child", nargs=6, metavar=("ARM", "SIDE", "BATCH", "POSITIONS", "VOCAB", "WIDTH"),
                    help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--child"]:  # one arm in a fresh process: its parameters come from the parent
        a = ap.parse_args(argv)
        arm, side, *sizes = a.child
        print(json.dumps(child(arm, side, *map(int, sizes))))
        return 0
    run, a = config.start("head_memory", argv, ap)
    shapes, repeats = run["head"]["shapes"], run["head"]["repeats"]  # side:batch:positions
    vocab, width = run["head"]["vocab"], run["head"]["width"]
    out_json = run["output"]["json"]
    run.ready()
    rows = []
    for shape in shapes:
        side, batch, length = shape.split(":")
        for _ in range(repeats):
            for arm in ("autograd", "max_projection"):
                out = subprocess.run([sys.executable, "-m", "experiments.head_memory", "--child", arm, side, batch,
                                      length, str(vocab), str(width)], capture_output=True, text=True, check=True, cwd=ROOT)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                r = rows[-1]
                print(f"{side} B={batch} L={length} {arm}: peak +{r['peak_above_inputs_mib']:.0f} MiB "
                      f"(scores tensor {r['scores_mib']:.0f} MiB), {r['seconds']:.2f} s", flush=True)
    import torch

    from tokenspace.atomic import write_text

    res = {"command": run.command(),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": os.getloadavg(), "rows": rows}
    write_text(ROOT / out_json, json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
