"""The one filter resolver every engine uses: token lists and where= queries turned into checked dims.

InvertedIndex, ExactIndex, MilvusIndex and TokenFilter (deny / allow) all call ``dims`` and
``token_tree`` here, so the same filter gives the same answer or the same error on every engine:
a token needs a vocabulary and must be in it, an int must be a dim in [0, dim), a bool is refused
(True is not token 1), and one string where a list is expected is a TypeError rather than a list of
its letters.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tokenspace.index.query import And, Node, Not, Or, Term, all_of, none_of, parse_query


def dims(items: Iterable, dim: int, vocab, what: str) -> list[int]:
    """The dims of ``items`` (ints, or token names when there is a vocabulary), checked against ``dim``."""
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{what}: give a list of tokens or dims, not one string ({items!r})")
    try:
        items = list(items)
    except TypeError:
        raise TypeError(f"{what}: give a list of tokens or dims, got {type(items).__name__}") from None
    out = []
    for x in items:
        if isinstance(x, str):
            if vocab is None:
                raise ValueError(f"{what}: token {x!r} needs an index with a vocabulary")
            if x not in vocab:
                raise ValueError(f"{what}: unknown token {x!r}")
            out.append(vocab.id(x))
        elif isinstance(x, (bool, np.bool_)):
            raise ValueError(f"{what}: {x!r} is a bool, not a token or a dim")
        elif isinstance(x, (int, np.integer)) and 0 <= x < dim:
            out.append(int(x))
        else:
            raise ValueError(f"{what}: {x!r} is not a dim in [0, {dim}) or a token")
    return out


def token_tree(dim: int, vocab, must=None, must_not=None, where: "str | Node | None" = None) -> list[Node]:
    """The token filters of a search as query trees (all must hold), every dim checked."""
    trees = []
    if must is not None:
        trees.append(all_of(dims(must, dim, vocab, "must")))
    if must_not is not None:
        trees.append(none_of(dims(must_not, dim, vocab, "must_not")))
    if where is not None:
        if isinstance(where, str):
            if vocab is None:
                raise ValueError("where= as a string needs an index with a vocabulary (or pass parse_query(...))")
            where = parse_query(where, vocab)
        if not isinstance(where, (Term, And, Or, Not)):
            raise TypeError(f"where: give a query string or a query.Node, got {type(where).__name__}")
        for d in where.dims():
            if not 0 <= d < dim:
                raise ValueError(f"where: dim {d} out of range [0, {dim})")
        trees.append(where)
    return [t for t in trees if t is not None]
