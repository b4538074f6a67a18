# Usage: python benchmarks/emoji_overlap.py   (needs the emoji-google/-twitter and iconify-noto/-twemoji assets)
"""Same artwork? Mean absolute pixel difference (0-255, RGB on white, 64 px) between an Iconify SVG
rendered by cairosvg and the emoji-datasource PNG of the same emoji, against two different artists."""
import io
import random

import cairosvg
import numpy as np
from PIL import Image

from tokenspace import assets
from tokenspace.data.emoji import _load_json, norm_hex
from tokenspace.data.iconify import read_iconify


def on_white(im):
    im = im.convert("RGBA").resize((64, 64), Image.BICUBIC)
    bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
    return np.asarray(Image.alpha_composite(bg, im).convert("RGB"), dtype=np.float32)

def svg64(s, name):
    return on_white(Image.open(io.BytesIO(cairosvg.svg2png(bytestring=s.svg(name).encode(), output_width=64, output_height=64))))

random.seed(0)
ds = {a: assets.path(f"emoji-{a}") for a in ("google", "twitter")}
png = {}
for a, d in ds.items():
    png[a] = {norm_hex(e["unified"]): d / "img" / a / "64" / e["image"] for e in _load_json(d / "emoji.json")}
for prefix, same, other in (("noto", "google", "twitter"), ("twemoji", "twitter", "google")):
    s = read_iconify(assets.path(f"iconify-{prefix}"))
    pairs = [(norm_hex(c), n) for c, n in s.chars.items() if norm_hex(c) in png[same] and norm_hex(c) in png[other]]
    sample = random.sample(pairs, 100)
    d_same = [np.abs(svg64(s, n) - on_white(Image.open(png[same][k]))).mean() for k, n in sample]
    d_other = [np.abs(svg64(s, n) - on_white(Image.open(png[other][k]))).mean() for k, n in sample]
    print(f"{prefix} vs emoji-datasource-{same}: median {np.median(d_same):.1f}; vs {other}: median {np.median(d_other):.1f}; "
          f"same < other for {np.mean(np.array(d_same) < np.array(d_other)):.0%} of 100 emoji")
