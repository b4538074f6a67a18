"""tokenspace search --index DIR "query": search, with each hit explained token by token (a caller of
searcher.py's Searcher: the checks here only turn the command line into its arguments and its errors
into one line naming the option as typed)."""
from __future__ import annotations

from pathlib import Path

from tokenspace.cli.common import CLIError, UsageError, ranking_changes
from tokenspace.cli.hybrid import check_dense_args, open_dense
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.model_loading import load_model, one_thread
from tokenspace.explain.hits import format_hit
from tokenspace.index.metadata import parse_cli as parse_filters
from tokenspace.searcher import Collection, Searcher, SearchError

SHOWN_TOKENS = 8  # the query's heaviest tokens printed above its hits


def run(args) -> int:
    if not args.query and not args.image:
        raise UsageError("give a query text or --image")
    try:  # parsed before the index and the model load: a typo costs no wait
        meta_filter = parse_filters(args.filter) if args.filter else None
    except ValueError as e:
        raise UsageError(f"--filter: {e}") from None
    if args.query and args.image:
        raise UsageError("give query texts or --image, not both (--image searches by the image alone)")
    if args.where is not None and not args.where.strip():  # it was dropped: a search with no filter at all
        raise UsageError("--where is empty: give a boolean query on tokens, or leave --where out")
    check_dense_args(args)
    index = load_index(args.index)
    try:
        collection = Collection.of(index, args.index)
        ranking = collection.ranking.with_(**ranking_changes(args))
        index.prior_weight(ranking.prior_weight)  # refused here when the index has no hub prior
    except ValueError as e:
        raise CLIError(str(e).replace("prior_weight:", "--prior-weight:", 1)) from None
    dense = open_dense(args.dense_index, args.dense_model, index=index, where=f"--index {args.index}") \
        if args.dense_index is not None else None
    model_ref = args.model or collection.model
    if not model_ref:
        raise CLIError(f"no --model given and the index at {args.index} does not name one")
    if not args.image:
        one_thread()  # the model loads and encodes a few short texts: no work worth a second thread
    model = load_model(model_ref)
    if not getattr(model, "sparse", True):
        raise CLIError(f"--model {model_ref}: a {model.family} model gives dense vectors, not the token vectors the "
                       "index holds: search with a sparse model, or pass it as --dense-model with --dense-index")
    searcher = Searcher(model, index, collection=collection, base_dir=args.index, dense=dense, ranking=ranking)
    fusion = (args.fusion or "rrf") if dense is not None else None
    options = dict(filter=meta_filter, where=args.where, must=args.must or (), must_not=args.must_not or (),
                   steer=dict(args.steer or []), fusion=fusion, weight=0.5 if args.weight is None else args.weight)
    for query in args.query or [Path(args.image)]:  # a Path is an image file, a str a text
        try:
            res = searcher.search(query, args.k, **options)
        except SearchError as e:  # the option as typed
            text = str(e).replace("must_not:", "must-not:", 1).replace("prior_weight:", "prior-weight:", 1)
            raise CLIError("--" + text.replace("give a text, not an image", "give query texts, not --image")) from None
        print(f"\nquery: {query}" + (f"  (hybrid, {fusion} fusion)" if fusion else ""))
        print("  query tokens: " + ", ".join(f"{t} {w:.2f}" for t, w in res.query[:SHOWN_TOKENS]))
        if not res.hits:
            print("  no hits")
        for rank, h in enumerate(res.hits, 1):
            print(format_hit(rank, h.id, h.score, h.parts, h.item.get("text"), penalty=h.penalty))
    return 0
