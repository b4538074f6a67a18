"""tokenspace search --index DIR "query": search, with each hit explained token by token (a caller of
searcher.py's Searcher: the checks here only turn the command line into its arguments and its errors
into one line naming the option as typed)."""
from __future__ import annotations

from pathlib import Path

from tokenspace.cli import search_output
from tokenspace.cli.common import CLIError, UsageError, ranking_changes
from tokenspace.cli.hybrid import check_dense_args
from tokenspace.cli.model_loading import check_model_ref, has_torch
from tokenspace.index.metadata import parse_cli as parse_filters
from tokenspace.models.fused_queries import one_blas_thread
from tokenspace.searcher import IMAGE_NEEDS_TORCH, DenseHalf, Searcher, SearchError


def run(args) -> int:
    if not args.query and not args.image:
        raise UsageError("give a query text or --image")
    if any(not q.strip() for q in args.query):  # refused here: the model would load for nothing
        raise UsageError('a query text is empty: give words to search for, e.g. "a red car"')
    try:  # parsed before the index and the model load: a typo costs no wait
        meta_filter = parse_filters(args.filter) if args.filter else None
    except ValueError as e:
        raise UsageError(f"--filter: {e}") from None
    if args.query and args.image:
        raise UsageError("give query texts or --image, not both (--image searches by the image alone)")
    if args.where is not None and not args.where.strip():  # it was dropped: a search with no filter at all
        raise UsageError("--where is empty: give a boolean query on tokens, or leave --where out")
    check_dense_args(args)
    check_model_ref(args.model)
    check_model_ref(args.dense_model, "--dense-model")
    if args.image and not has_torch():  # refused before the index loads: there is no image tower to run
        raise CLIError(f"--image: {IMAGE_NEEDS_TORCH}")
    # text queries: the model's text side without torch where it has one (Searcher.open's text_only), else
    # torch; either on one thread (it encodes a few short texts: no work worth a second thread)
    text_only = not args.image
    threads = 1 if text_only else None
    if text_only:
        one_blas_thread()
    try:  # the index, the ranking (a flag left out keeps the index's), the dense half, then the model
        searcher = Searcher.open(args.index, args.model, dense_half(args, torch_threads=threads), ranking_changes(args),
                                 text_only=text_only, torch_threads=threads)
    except SearchError as e:
        raise CLIError(as_typed(e)) from None
    if len(searcher.index) == 0:
        raise CLIError(f"the index at {args.index} is empty")
    dense = searcher.dense
    fusion = (args.fusion or "rrf") if dense is not None else None
    options = dict(filter=meta_filter, where=args.where, must=args.must or (), must_not=args.must_not or (),
                   steer=dict(args.steer or []), fusion=fusion, weight=0.5 if args.weight is None else args.weight)
    queries = args.query or [Path(args.image)]  # a Path is an image file, a str a text
    for n, query in enumerate(queries):
        try:
            res = searcher.search(query, args.k, **options)
        except SearchError as e:
            raise CLIError(as_typed(e).replace("give a text, not an image", "give query texts, not --image")) from None
        if args.json:
            print(search_output.json_line(query, res, fusion, res.notes), flush=True)
        else:  # flushed per query: a reader (`| head -1`) sees the first hits while the next query runs
            print(search_output.text_block(query, res, fusion, several=len(queries) > 1, first=n == 0,
                                           notes=res.notes), flush=True)
    return 0


# the Searcher's option names, as the command line spells them
OPTIONS = {"index": "--index", "model": "--model", "dense_index": "--dense-index", "dense_model": "--dense-model",
           "idf": "--idf", "prior_weight": "--prior-weight", "expansion": "--expansion",
           "expansion_floor": "--expansion-floor", "must": "--must", "must_not": "--must-not", "where": "--where",
           "filter": "--filter", "steer": "--steer", "fusion": "--fusion", "weight": "--weight"}


def as_typed(e: Exception) -> str:
    """A SearchError ("<option> [what]: why") with its option as the command line spells it
    (``must_not: ...`` -> ``--must-not: ...``)."""
    text = str(e)
    first, sep, rest = text.partition(" ") if text.find(" ") < text.find(":") else text.partition(":")
    return OPTIONS[first] + sep + rest if sep and first in OPTIONS else text


def dense_half(args, device: str = "cpu", torch_threads: int | None = None):
    """--dense-index (and --dense-model) as Searcher.open takes them: the folder, whose own record names
    its model, or the half opened with the model given."""
    if args.dense_index is None or args.dense_model is None:
        return args.dense_index
    return DenseHalf.open(args.dense_index, args.dense_model, device, torch_threads)
