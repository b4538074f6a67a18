"""tokenspace search --index DIR "query": search, with each hit explained token by token.

The arguments (light: `tokenspace search --help` imports no library); run/search.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import positive_int, text, unit_fraction


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--index", required=True, help="index folder")
    s.add_argument("--model", default=None, help="default: the model the index was built with")
    s.add_argument("query", nargs="*", type=text, help="query texts (one search each)")
    s.add_argument("--image", default=None, help="search by an image file instead")
    s.add_argument("-k", type=positive_int, default=5, help="hits per query (default 5)")
    s.add_argument("--where", default=None, type=text,
                   help="filter on the image's TOKENS (what its vector holds, not its caption): a boolean query, "
                        "e.g. 'dog AND (beach OR sand) NOT cat'; --filter filters on the row's metadata")
    s.add_argument("--filter", action="append", default=None, metavar="FIELD=VALUE",
                   help="filter on the row's METADATA (source, caption, your --metadata fields), repeatable, all "
                        "must hold: field=value, field=a|b (any of them), field~word (its text holds the word), "
                        "e.g. --filter source=emoji-noto --filter caption~heart")
    s.add_argument("--dense-index", default=None, metavar="DIR",
                   help="hybrid search: also search this dense index of the same images (`index build` with a "
                        "dense model) and fuse the two rankings (--fusion)")
    s.add_argument("--dense-model", default=None, help="--dense-index: default the model it was built with")
    s.add_argument("--fusion", choices=["rrf", "weighted"], default=None,
                   help="--dense-index: rrf (reciprocal ranks, default) or weighted (min-max normalised scores)")
    s.add_argument("--weight", type=unit_fraction, default=None,
                   help="--dense-index: the sparse index's share of the fused score, 0..1 (default 0.5)")
