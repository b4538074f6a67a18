"""What `tokenspace search` prints: for people, the hits first (so `tokenspace search ... | head -1` is the
best hit), each with the tokens that made its score; for scripts (``--json``), one JSON object per query
per line, in the HTTP service's hit schema.

Layout for people: one query prints its hits, then a line naming the query and its heaviest tokens.
Several queries print a ``query: ...`` header above each one's hits, blocks separated by one blank line
(never a leading one), because a hit list without its query would be ambiguous there."""
from __future__ import annotations

import json
import math

from tokenspace.explain.hits import format_hit

SHOWN_TOKENS = 8  # the query's heaviest tokens printed with its hits


def query_line(query, res, fusion: str | None) -> str:
    head = f"query: {query}" + (f"  (hybrid, {fusion} fusion)" if fusion else "")
    tokens = ", ".join(f"{t} {w:.2f}" for t, w in res.query[:SHOWN_TOKENS])
    return f"{head}\n  query tokens: {tokens or '-'}"


def hit_lines(res) -> list[str]:
    return [format_hit(rank, h.id, h.score, h.parts, h.item.get("text"), penalty=h.penalty)
            for rank, h in enumerate(res.hits, 1)]


def text_block(query, res, fusion: str | None, *, several: bool, first: bool, notes=()) -> str:
    """One query's block for a terminal or a pipe; ``notes`` (e.g. why there are no hits) follow the hits."""
    hits = hit_lines(res) or ["  no hits"]
    notes = [f"  note: {n}" for n in notes]
    if several:
        return ("" if first else "\n") + "\n".join([query_line(query, res, fusion), *hits, *notes])
    return "\n".join([*hits, *notes, query_line(query, res, fusion)])


def _number(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None  # JSON has no inf or nan


def json_line(query, res, fusion: str | None, notes=()) -> str:
    """One query as one line of JSON: what a script needs, with the explanation of each hit."""
    return json.dumps({
        "query": str(query),
        "fusion": fusion,
        "query_tokens": [{"token": t, "weight": _number(w)} for t, w in res.query],
        "hits": [{"rank": rank, "id": h.id, "score": _number(h.score), "text": h.item.get("text"),
                  "label": h.item.get("label"), "hub_penalty": _number(h.penalty),
                  "tokens": [{k: (_number(v) if k != "token" else v) for k, v in c.to_dict().items()}
                             for c in h.parts]}
                 for rank, h in enumerate(res.hits, 1)],
        "notes": list(notes),
    }, ensure_ascii=False)
