"""tokenspace search --index DIR "query": search, with each hit explained token by token."""
from __future__ import annotations

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.hybrid import DenseHalf
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.model_loading import load_model
from tokenspace.explain.hits import contributions, format_hit
from tokenspace.index import parse_query
from tokenspace.index.metadata import parse_cli as parse_filters


def run(args) -> int:
    if not args.query and not args.image:
        raise UsageError("give a query text or --image")
    options = {}
    if args.filter:
        try:
            options["meta"] = parse_filters(args.filter)
        except ValueError as e:
            raise UsageError(f"--filter: {e}") from None
    if args.query and args.image:
        raise UsageError("give query texts or --image, not both (--image searches by the image alone)")
    if args.where is not None and not args.where.strip():  # it was dropped: a search with no filter at all
        raise UsageError("--where is empty: give a boolean query on tokens, or leave --where out")
    index = load_index(args.index)
    if "meta" in options and not index.has_metadata():
        raise CLIError(f"--filter: the index at {args.index} carries no row metadata (built before tokenspace stored "
                       "source and caption): rebuild it with `tokenspace index build`")
    dense = DenseHalf.from_args(args)  # None unless --dense-index (hybrid search)
    if dense is not None:
        dense.check_collection(index, f"--index {args.index}")
    meta = pipeline.read_collection_meta(args.index)
    model_path = args.model or meta.get("model")
    if not model_path:
        raise CLIError(f"no --model given and the index at {args.index} does not name one")
    model = load_model(model_path)
    if args.image:
        queries = model.encode_images([args.image])
    else:
        queries = model.encode_texts(args.query)
    dense_queries = dense.encode(args.query, args.image) if dense is not None else None
    if args.where:
        options["where"] = parse_query(args.where, model.vocab)
    for q_text, qi in zip(args.query or [args.image], range(len(queries))):
        q = queries[qi]
        if dense is None:
            hits = index.search(q, k=args.k, **options)[0]
        else:  # scores are the fused ones; the tokens still explain the sparse side's dot product
            hits = dense.search(index, q, dense_queries[qi : qi + 1], args.k)[0]
        print(f"\nquery: {q_text}" + (f"  (hybrid, {dense.fusion} fusion)" if dense is not None else ""))
        print("  query tokens: " + ", ".join(f"{t} {w:.2f}" for t, w in model.decode(q, top_k=8)[0]))
        if not hits:
            print("  no hits")
            continue
        docs = index.get([h.id for h in hits])
        for rank, (h, parts) in enumerate(zip(hits, contributions(q, docs)), 1):
            text = meta["items"].get(h.id, {}).get("text")
            print(format_hit(rank, h.id, h.score, parts, text))
    return 0
