"""tokenspace search --index DIR "query": search, with each hit explained token by token.

The arguments (light: `tokenspace search --help` imports no library); run/search.py runs it."""
from __future__ import annotations

import argparse

from tokenspace.cli.common import add_ranking_arguments, positive_int, text, unit_fraction


def steer_pair(value: str) -> tuple[str, float]:
    """TOKEN=FACTOR (explain/steer.py: a present token scaled, an absent one added, 0 removes it)."""
    token, sep, factor = value.rpartition("=")
    try:
        f = float(factor)
    except ValueError:
        f = None
    if not sep or not token.strip() or f is None or f != f or f in (float("inf"), float("-inf")) or f < 0:
        raise argparse.ArgumentTypeError(f"expected TOKEN=FACTOR with a factor >= 0, e.g. red=2, got {value!r}")
    return token.strip(), f


steer_pair.__name__ = "TOKEN=FACTOR"  # argparse names the type in its message


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--index", required=True, help="index folder")
    s.add_argument("--model", default=None, help="default: the model the index was built with")
    s.add_argument("query", nargs="*", type=text, help="query texts (one search each)")
    s.add_argument("--image", default=None, help="search by an image file instead")
    s.add_argument("-k", type=positive_int, default=5, help="hits per query (default 5)")
    s.add_argument("--json", action="store_true",
                   help="for scripts: one JSON object per query per line (query, query_tokens, hits with their "
                        "tokens, notes), the HTTP API's hit fields")
    s.add_argument("--where", default=None, type=text,
                   help="filter on the image's TOKENS (what its vector holds, not its caption): a boolean query, "
                        "e.g. 'dog AND (beach OR sand) NOT cat'; --filter filters on the row's metadata")
    s.add_argument("--must", action="append", default=None, metavar="TOKEN",
                   help="only images whose vector holds this token (repeatable; a vocabulary entry or a one-token word)")
    s.add_argument("--must-not", action="append", default=None, metavar="TOKEN",
                   help="no image whose vector holds this token (repeatable)")
    s.add_argument("--steer", action="append", default=None, type=steer_pair, metavar="TOKEN=FACTOR",
                   help="reweigh the query before searching (repeatable): red=2 doubles red, cat=0 removes cat, a "
                        "token absent from the query is added at FACTOR x its top weight")
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
    add_ranking_arguments(s, "the index's ranking, chosen when it was built")
