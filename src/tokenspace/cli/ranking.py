"""The ranking flags (explain/ranking.py) of `tokenspace search` and `tokenspace index build`.

Light: no library import beyond argparse helpers. A flag left out keeps the index's stored ranking
(`index build` records one in collection.json: the flags given there, else the model folder's
ranking.json), so `search` needs none of them to search as the index's builder chose."""
from __future__ import annotations

import argparse
import math

FIELDS = ("idf", "prior_weight", "expansion", "expansion_floor")


def _number(lo: float, hi: float):
    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            x = math.nan
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"must be a number in [{lo:g}, {hi:g}], got {value}")
        return x

    parse.__name__ = f"number in [{lo:g}, {hi:g}]"
    return parse


def add_ranking_arguments(s: argparse.ArgumentParser, stored: str) -> None:
    """--idf, --prior-weight, --expansion, --expansion-floor; ``stored`` says what a left-out flag keeps."""
    g = s.add_argument_group("ranking (a left-out flag keeps " + stored + ")")
    g.add_argument("--idf", type=_number(0, 4), default=None, metavar="POWER",
                   help="query weights x BM25 idf ** POWER over the indexed images (0 off, 1 BM25's idf)")
    g.add_argument("--prior-weight", type=_number(0, 100), default=None, metavar="W",
                   help="subtract W x each image's hubness (the index's hub prior; 0 off, 0.5 CSLS's formula)")
    g.add_argument("--expansion", type=_number(0, 10), default=None, metavar="W",
                   help="weight of the tokens the text encoder adds, against the query's own words (1 as encoded)")
    g.add_argument("--expansion-floor", type=_number(0, 1), default=None, metavar="F",
                   help="drop added tokens below F x the query's top weight (the query's own words always stay)")


def ranking_changes(args) -> dict:
    """The ranking fields the user gave (None: not given)."""
    return {f: getattr(args, f) for f in FIELDS}
