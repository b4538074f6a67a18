"""The texts an ``encode_text`` takes, checked once for every encoder (torch-free: the numpy text sides use it)."""
from __future__ import annotations

from collections.abc import Sequence


def as_texts(texts: str | Sequence[str]) -> tuple[list[str], bool]:
    """(the texts as a list, whether one string was given). TypeError names the first item that is no
    string; ValueError the empty ones: an empty caption has no meaning to encode, and a zero row for it
    would hide a data bug."""
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"encode_text takes strings; position {bad[0]} is {type(texts[bad[0]]).__name__}")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise ValueError(f"empty text at positions {empty[:10]}")
    return texts, single
