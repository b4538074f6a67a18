"""Search with explanations: the sequence the search session runs (searcher.py's Searcher, which
`tokenspace search`, the HTTP service and the demo call).

    options = search_options(index, vocab, must=["dog"], where="beach OR sand", meta={"source": "emoji"})
    hits = explained_search(index, steer(query, {"red": 2.0}, vocab), k=10, **options)

``search_options`` turns what a user typed (token names, a boolean query on tokens, a metadata filter)
into the index's search options, with one-line ValueErrors that name the option; ``explained_search``
runs the search, reads the hits' rows and splits each score into per-token contributions (they sum to
it, less the hit's hub penalty when the index has a hub prior). The query comes as the index scores it
(the Searcher shapes, steers and weighs it by idf, once); ``prior_weight`` is a number, 0 included. A
hybrid search (index/hybrid.py) brings its fused ranking as ``hits``: only the explanation runs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tokenspace.explain.hits import Contribution, contributions
from tokenspace.explain.steer import resolve_tokens
from tokenspace.index.metadata import MetaFilter
from tokenspace.index.query import parse_query
from tokenspace.sparse import SparseBatch


@dataclass(frozen=True)
class ExplainedHit:
    id: str
    score: float
    parts: list[Contribution]  # shared tokens, largest contribution first; they sum to ``score`` + penalty
    penalty: float = 0.0  # the hub prior's part: prior_weight x the image's hubness (0 without a prior)


def search_options(index, vocab, *, must: Sequence[str] = (), must_not: Sequence[str] = (),
                   where: str | None = None, meta: Mapping | None = None) -> dict:
    """The index's search options (``must``, ``must_not``, ``where``, ``meta``) from a user's input;
    empty ones are left out. ValueError ``"<option>: <why>"`` on an unknown token, a malformed query or
    filter, or a metadata filter on an index whose rows carry none (it would answer "no hits")."""
    options: dict = {}
    for name, tokens in (("must", must), ("must_not", must_not)):
        if tokens:
            try:
                options[name] = resolve_tokens(list(tokens), vocab)
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
    if where is not None and where.strip():
        try:
            options["where"] = parse_query(where, vocab)
        except ValueError as e:
            raise ValueError(f"where: {e}") from None
    if meta:
        try:
            options["meta"] = MetaFilter.resolve(dict(meta) if isinstance(meta, Mapping) else meta)
        except TypeError as e:
            raise ValueError(str(e)) from None
        if not index.has_metadata():
            raise ValueError("filter: this index carries no row metadata (built before tokenspace stored source "
                             "and caption): rebuild it with `tokenspace index build`")
    return options


def explained_search(index, query: SparseBatch, k: int = 10, *, hits=None, vocab=None, prior_weight: float = 0.0,
                     **options) -> list[ExplainedHit]:
    """The top ``k`` hits of one query row, each with its score split into per-token contributions.
    ``query``: the vector the index scores, as it is (shaped, steered and idf-weighted by the caller:
    the contributions are its weights times the rows'). ``prior_weight``: the hub prior's weight, a
    number (0: the plain dot product), given to the index as it is. ``hits``: an already ranked list (a
    hybrid search's), explained as given. ``vocab`` names the rows' dimensions when the index stores
    none. An empty query matches nothing: no hits."""
    if len(query) != 1:
        raise ValueError("explained_search takes a single query row")
    ranked = hits is None
    has_prior = hasattr(index, "prior_weight")  # an engine without hub priors takes no weight
    if ranked:
        extra = {"prior_weight": float(prior_weight)} if has_prior else {}
        hits = index.search(query, k=k, **extra, **options)[0] if query.nnz else []
    if not hits:
        return []
    ids = [h.id for h in hits]
    docs = index.get(ids)
    penalty = ((prior_weight * index.hubness(ids)).tolist() if ranked and prior_weight and has_prior
               else [0.0] * len(hits))
    return [ExplainedHit(h.id, float(h.score), parts, p)
            for h, parts, p in zip(hits, contributions(query, docs, vocab=vocab), penalty)]
