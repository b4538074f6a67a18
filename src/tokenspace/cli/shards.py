"""tokenspace shards --images DIR | --manifest FILE --out DIR: webdataset shards for `tokenspace encode`.

The arguments (light: `tokenspace shards --help` imports no library); run/shards.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int


def add_arguments(s: argparse.ArgumentParser) -> None:
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--images", metavar="DIR",
                     help="a folder of images (searched recursively: jpg, png, webp, bmp, ppm as they are; gif, "
                          "tif, svg stored as PNG); a caption from the .txt file beside each image "
                          "(cat.jpg -> cat.txt), else the file name's words; the key (index id) is the path "
                          "under DIR without its extension")
    src.add_argument("--manifest", metavar="FILE.jsonl",
                     help='a JSON object per line: "image" (or "path", relative to the manifest\'s folder), '
                          '"caption" (or "text"; absent: as for --images), optional "key" (the index id), any '
                          "other fields kept as the sample's metadata (KEY.json in the shard)")
    s.add_argument("--out", required=True, metavar="DIR",
                   help="folder for shard-000000.tar, shard-000001.tar, ... (created; must hold no shards yet)")
    s.add_argument("--per-shard", type=positive_int, default=1000,
                   help="samples per shard (default 1000)")
