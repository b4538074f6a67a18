"""cairosvg vs resvg on 60 random icons per Iconify set: CPU milliseconds per 224 px render and the mean
absolute pixel difference (0-255, composited on white).

    python benchmarks/render_compare.py
"""
from __future__ import annotations

import io
import random
import resource

import cairosvg
import numpy as np
import resvg_py
from PIL import Image

from tokenspace import assets
from tokenspace.data.iconify import read_iconify

SETS = ("fluent-emoji", "noto", "mdi", "game-icons", "ph")
N, SIZE = 60, 224


def on_white(png: bytes) -> np.ndarray:
    im = Image.open(io.BytesIO(png)).convert("RGBA")
    bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(bg, im).convert("RGB"), dtype=np.float32)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(fn, svgs):
    t = cpu()
    out = [fn(x) for x in svgs]
    return out, (cpu() - t) / len(svgs) * 1000


def main() -> None:
    random.seed(0)
    for prefix in SETS:
        s = read_iconify(assets.path(f"iconify-{prefix}"))
        svgs = [s.svg(n) for n in random.sample(sorted(s.icons), N)]
        a, ms_a = timed(lambda x: cairosvg.svg2png(bytestring=x.encode(), output_width=SIZE, output_height=SIZE), svgs)
        b, ms_b = timed(lambda x: bytes(resvg_py.svg_to_bytes(svg_string=x, width=SIZE, height=SIZE)), svgs)
        d = [np.abs(on_white(x) - on_white(y)).mean() for x, y in zip(a, b)]
        print(f"{prefix:12s} cairosvg {ms_a:5.1f} ms CPU/icon, resvg {ms_b:5.1f} ms; "
              f"mean |diff| median {np.median(d):.2f}, max {max(d):.2f} (0-255)")


if __name__ == "__main__":
    main()
