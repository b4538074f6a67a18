"""What every command module shares, light enough for the parser: the error types main() reports, the
argument types, and the one-line form of an exception."""
from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path


class CLIError(Exception):
    """A runtime problem the user can fix, reported as one line (exit 1)."""


class UsageError(Exception):
    """Arguments that parse but say nothing to do (e.g. `search` without a query): reported like argparse's
    own usage errors, one line and exit 2."""


def positive_int(text: str) -> int:
    n = int(text)  # argparse turns the ValueError into "invalid positive integer value" (exit 2)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {n}")
    return n


positive_int.__name__ = "positive integer"  # argparse names the type in its message


def nonnegative_int(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    return n


nonnegative_int.__name__ = "non-negative integer"


def tcp_port(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1..65535, got {n}")
    return n


tcp_port.__name__ = "port"


def positive_float(text: str) -> float:
    x = float(text)
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return x


positive_float.__name__ = "positive number"


def unit_fraction(text: str) -> float:
    x = float(text)
    if not 0 <= x <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return x


unit_fraction.__name__ = "number in [0, 1]"


def text(value: str) -> str:
    # argv bytes that are not UTF-8 arrive as lone surrogates, which the tokenizer refuses with a TypeError
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "backslashreplace").decode()
        raise argparse.ArgumentTypeError(f"not valid UTF-8 text: {shown!r}") from None
    return value


text.__name__ = "text"

def check_writable_place(path: str | Path, what: str) -> None:
    """``path`` (a file or folder still to be written, maybe under folders still to be made) can be made:
    its nearest existing folder is a folder this process can create files in. Called before any model
    loads or data is read, so that `index build --out /proc/version/idx` fails in a second, not after
    encoding every image. Raises CLIError naming ``what`` (the option) and the folder."""
    p = Path(path).absolute()
    start = p if p.is_dir() else p.parent
    place = next(a for a in (start, *start.parents) if a.exists())
    if not place.is_dir():
        raise CLIError(f"{what} {path}: {place} is a file, not a folder")
    try:  # a file made and removed: permission bits do not tell for root, or for /proc
        with tempfile.TemporaryFile(dir=place):
            pass
    except OSError as e:
        raise CLIError(f"{what} {path}: cannot write in {place} ({e.strerror or e})") from None


DEVICE_HELP = "torch device for the model: cpu (default), cuda, cuda:N or mps"


def add_encoding_arguments(p: argparse.ArgumentParser) -> None:
    """How images are encoded: the same options for `encode` and `index build` (one road: encode.py)."""
    p.add_argument("--part-size", type=positive_int, default=8192,
                   help="images per part, the unit of resumption (default 8192)")
    p.add_argument("--batch-size", type=positive_int, default=256, help="images per model call (default 256)")
    p.add_argument("--workers", type=nonnegative_int, default=None,
                   help="image-decoding processes beside the model (default: cores - 1, at most 8)")
    p.add_argument("--tower", choices=("auto", "torch", "onnx"), default="auto",
                   help="image tower runtime: onnx = ONNX Runtime (CPU, checked against PyTorch to 1e-4 "
                        "before use; pip install 'tokenspace[onnx]'), torch = PyTorch, auto = onnx when "
                        "installed on a CPU model (default: auto)")


def one_line(e: BaseException) -> str:
    """An exception as one line: multi-line messages (YAML's) collapsed."""
    msg = e.args[0] if isinstance(e, KeyError) and e.args else e
    text = " ".join(str(msg).split())
    return text if isinstance(e, (CLIError, OSError, ValueError, KeyError)) else f"{type(e).__name__}: {text}"


# ---- the ranking flags (explain/ranking.py) of `search` and `index build`: a flag left out keeps the
# index's stored ranking (`index build` records one: the flags given there, else the model's ranking.json)
RANKING_FIELDS = ("idf", "prior_weight", "expansion", "expansion_floor")


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


def add_ingestion_ranking_arguments(s: argparse.ArgumentParser) -> None:
    """The ranking `index build` and `encode` record and apply (one road: the model's ranking.json, then
    these flags): the search levers and the hub prior's bank."""
    add_ranking_arguments(s, "the model's ranking.json, chosen on validation data (none: the dot product)")
    s.add_argument("--hub-bank", action="append", default=None, metavar="SPEC",
                   help="a hub prior from these TRAINING captions (DATASET:SPLIT specs, repeatable; never test "
                        "captions): each image's mean top-k dot product with them is subtracted at --prior-weight "
                        "(default: the model's ranking.json's bank, if any; its encoded captions are kept in "
                        "the asset cache, once per model)")
    s.add_argument("--hub-k", type=positive_int, default=None, help="the hub prior's k nearest bank captions (default 10)")
    s.add_argument("--no-hub-prior", action="store_true", help="no hub prior, even where the model's ranking has one")


def ranking_changes(args) -> dict:
    """The ranking fields the user gave (None: not given)."""
    return {f: getattr(args, f) for f in RANKING_FIELDS}
