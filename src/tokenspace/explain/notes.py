"""What a search should tell the user about its query text before its hits are trusted: the text tower read
only the first pieces of a long query, or the query has no word that names anything ("the", "of a").

A query of function words alone still encodes to a vector (a learned text tower expands any input), and
its hits look as confident as any; they answer nothing the user asked, so such a query gets no hits and
a note saying why (``has_content``)."""
from __future__ import annotations

import functools

from tokenspace.models.classwords import emitted
from tokenspace.vocab import WordPieceTokenizer


def _tokenizer(model) -> WordPieceTokenizer | None:
    tok = getattr(model, "tokenizer", None)  # optional: an image-only or foreign model has none
    return tok if isinstance(tok, WordPieceTokenizer) else None


@functools.lru_cache(maxsize=256)
def _pieces(tok: WordPieceTokenizer, text: str) -> tuple[str, ...]:
    """The word pieces of ``text``, kept for the next call: a search asks query_notes and has_content of
    the same text one after the other (searcher.py), and tokenising it twice cost ~50 us of the service's
    ~5 ms per search (both calls on a new text: 85 -> 33 us)."""
    return tuple(tok.tokenize(text))


def has_content(model, text: str) -> bool:
    """Whether ``text`` has a word piece that names something (not a stop word, a special or punctuation:
    classwords.emitted, the test the fused model's lexical anchor uses). True when the model has no
    WordPiece tokenizer to tell."""
    tok = _tokenizer(model)
    if tok is None:
        return True
    return any(emitted(t) for t in _pieces(tok, text))


def query_notes(model, text: str) -> list[str]:
    """One line per thing to know about how ``text`` is searched: truncated to the text tower's length,
    or nothing to search for (see ``has_content``)."""
    tok = _tokenizer(model)
    if tok is None:
        return []
    notes = []
    pieces = _pieces(tok, text)
    limit = tok.max_length - 2  # [CLS] and [SEP] take two of the tower's positions
    if len(pieces) > limit:
        notes.append(f"the query is {len(pieces)} word pieces long and the text encoder reads the first "
                     f"{limit}: the rest was ignored")
    if not any(emitted(t) for t in pieces):
        notes.append("the query has no word that names anything (only words such as 'the', 'of', 'a', or "
                     "punctuation): nothing to search for, so no hits")
    return notes
