"""tokenspace search --index DIR "query": search, with each hit explained token by token."""
from __future__ import annotations

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, UsageError, ranking_changes
from tokenspace.cli.hybrid import DenseHalf
from tokenspace.cli.index_loading import load_index
from tokenspace.cli.model_loading import load_model
from tokenspace.explain.hits import format_hit
from tokenspace.explain.ranking import Ranking, encode_queries
from tokenspace.explain.search import explained_search, search_options
from tokenspace.explain.steer import steer
from tokenspace.index.metadata import parse_cli as parse_filters


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
    index = load_index(args.index)
    dense = DenseHalf.from_args(args)  # None unless --dense-index (hybrid search)
    if dense is not None:
        dense.check_collection(index, f"--index {args.index}")
    meta = pipeline.read_collection_meta(args.index)
    model_path = args.model or meta.get("model")
    if not model_path:
        raise CLIError(f"no --model given and the index at {args.index} does not name one")
    try:
        ranking = Ranking.from_dict(meta.get("ranking")).with_(**ranking_changes(args))
        index.prior_weight(ranking.prior_weight)  # refused here when the index has no hub prior
    except ValueError as e:
        raise CLIError(str(e).replace("prior_weight:", "--prior-weight:", 1)) from None
    model = load_model(model_path)
    if not getattr(model, "sparse", True):
        raise CLIError(f"--model {model_path}: a {model.family} model gives dense vectors, not the token vectors the "
                       "index holds: search with a sparse model, or pass it as --dense-model with --dense-index")
    if args.image:
        queries = model.encode_image([args.image])
    else:
        try:
            queries = encode_queries(model, args.query, ranking)
        except ValueError as e:
            raise CLIError(f"--expansion: {e}") from None
    dense_queries = dense.encode(args.query, args.image) if dense is not None else None
    try:
        options = search_options(index, model.vocab, must=args.must or (), must_not=args.must_not or (),
                                 where=args.where, meta=meta_filter)
        steering = dict(args.steer or [])
        if steering and args.image:
            raise ValueError("steer: reweighs a text query's tokens; give query texts, not --image")
        try:
            queries = steer(queries, steering, model.vocab)
        except ValueError as e:
            raise ValueError(f"steer: {e}") from None
    except ValueError as e:
        raise CLIError("--" + str(e).replace("must_not:", "must-not:", 1)) from None  # the option as typed
    for q_text, qi in zip(args.query or [args.image], range(len(queries))):
        q = queries[qi]
        hits = None if dense is None else dense.search(index, q, dense_queries[qi : qi + 1], args.k)[0]
        # a hybrid search's scores are the fused ones; the tokens still explain the sparse side's dot product
        ranked = {} if dense is not None else {"idf": ranking.idf, **ranking.index_options()}
        found = explained_search(index, q, args.k, hits=hits, vocab=model.vocab, **ranked, **options)  # (no options with --dense-index: refused above)
        print(f"\nquery: {q_text}" + (f"  (hybrid, {dense.fusion} fusion)" if dense is not None else ""))
        shown = q if dense is not None else index.weigh(q, ranking.idf)  # the weights the hits were scored with
        print("  query tokens: " + ", ".join(f"{t} {w:.2f}" for t, w in model.decode(shown, top_k=8)[0]))
        if not found:
            print("  no hits")
        for rank, h in enumerate(found, 1):
            print(format_hit(rank, h.id, h.score, h.parts, meta["items"].get(h.id, {}).get("text"), penalty=h.penalty))
    return 0
