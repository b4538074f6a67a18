"""Row metadata: the fields each index row carries (source dataset, caption, any JSON a user gives at
build time) and the filters on them.

A row's metadata is a JSON object. A filter is a JSON object too, one clause per field, all ANDed::

    {"source": "emoji"}                    equality (a string, number or bool)
    {"source": {"in": ["emoji", "photos"]}}  set membership
    {"caption": {"word": "dog"}}           the field's text holds this word (case-insensitive,
                                           whole words: "dog" matches "A dog." but not "dogs")

Engines apply it inside the search, before top-k, so a filtered search still returns k hits when k
rows match (InvertedIndex and ExactIndex through ``MetaFilter.mask`` / ``matches``, MilvusIndex
through ``MetaFilter.milvus``, a scalar filter on its JSON field). A row without the field never
matches. Field names a filter may use are letters, digits, ``_`` and ``-`` (they go into Milvus
expressions); stored rows may hold any keys. ``parse_cli`` reads the command line's short form
(``source=emoji``, ``source=emoji|photos``, ``caption~dog``).

This is about what a row *is* (where it came from, what its caption says); ``where=`` / ``must=``
filter on the tokens of the row's vector (query.py).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenspace.index.storage import IndexCorruptError

FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
WORD = re.compile(r"\w+")
OPS = ("eq", "in", "word")


# ----------------------------------------------------------------------------- rows
def check_rows(rows, n: int) -> list[dict] | None:
    """``rows`` (one JSON object per document, or None) checked: n objects with string keys, JSON only."""
    if rows is None:
        return None
    if isinstance(rows, (str, bytes, dict)):
        raise TypeError("metadata: give a list of dicts, one per document")
    rows = list(rows)
    if len(rows) != n:
        raise ValueError(f"metadata: got {len(rows)} rows for {n} documents")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise TypeError(f"metadata[{i}]: expected a dict, got {type(r).__name__}")
        try:
            json.dumps(r, allow_nan=False)  # keys must be strings: JSON would turn 1 into "1"
        except (TypeError, ValueError) as e:
            raise ValueError(f"metadata[{i}]: not JSON ({e})") from None
        if any(not isinstance(k, str) for k in r):
            raise TypeError(f"metadata[{i}]: keys must be strings")
    return rows


def dumps(rows: list[dict]) -> str:
    """JSON lines, one object per row (the segment's metadata.jsonl)."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n" for r in rows)


def loads(path: Path, n: int) -> list[dict]:
    """The rows of a metadata.jsonl; IndexCorruptError naming the file and line when damaged."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise IndexCorruptError(f"{path}: unreadable metadata ({e})") from None
    if lines[-1] != "" or len(lines) - 1 != n:
        raise IndexCorruptError(f"{path}: {len(lines) - 1} lines for a segment of {n} rows")
    rows = []
    for i, line in enumerate(lines[:-1], 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        if not isinstance(row, dict):
            raise IndexCorruptError(f"{path}:{i}: not a JSON object")
        rows.append(row)
    return rows


def words(text) -> set[str]:
    """The words of a text field, as a word filter compares them (case-folded runs of letters/digits)."""
    return set(WORD.findall(text.casefold())) if isinstance(text, str) else set()


# ----------------------------------------------------------------------------- filters
@dataclass(frozen=True)
class Clause:
    field: str
    op: str  # eq | in | word
    values: tuple  # eq: (value,); in: the set; word: (the case-folded word,)

    def matches(self, row: dict) -> bool:
        if self.field not in row:
            return False
        x = row[self.field]
        if self.op == "word":
            return self.values[0] in words(x)
        return any(_same(x, v) for v in self.values)


def _same(a, b) -> bool:
    """JSON equality: a bool equals only a bool (Python's True == 1 is not JSON's)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _scalar(value, where: str):
    ok = isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
    if not ok:
        raise ValueError(f"filter {where}: {value!r} is not a string, number or bool")
    return value


@dataclass(frozen=True)
class MetaFilter:
    clauses: tuple[Clause, ...]

    @classmethod
    def resolve(cls, spec) -> "MetaFilter | None":
        """A checked filter from its JSON form (see the module docstring); None for None or {}."""
        if spec is None or isinstance(spec, MetaFilter):
            return spec or None
        if not isinstance(spec, dict):
            raise TypeError(f"filter: give an object of field -> value, got {type(spec).__name__}")
        clauses = []
        for field, cond in spec.items():
            if not isinstance(field, str) or not FIELD.fullmatch(field):
                raise ValueError(f"filter: field name {field!r} must be letters, digits, _ or - "
                                 "(starting with a letter or _)")
            if isinstance(cond, dict):
                if len(cond) != 1 or next(iter(cond)) not in ("in", "word"):
                    raise ValueError(f'filter {field}: an object must be {{"in": [values]}} or {{"word": "text"}}, '
                                     f"got {sorted(cond)}")
                op, arg = next(iter(cond.items()))
                if op == "in":
                    if not isinstance(arg, list) or not arg:
                        raise ValueError(f"filter {field}: \"in\" takes a non-empty list of values")
                    clauses.append(Clause(field, "in", tuple(_scalar(v, field) for v in arg)))
                else:
                    if not isinstance(arg, str) or not WORD.fullmatch(arg.casefold()):
                        raise ValueError(f"filter {field}: \"word\" takes one word (letters and digits), got {arg!r}")
                    clauses.append(Clause(field, "word", (arg.casefold(),)))
            else:
                clauses.append(Clause(field, "eq", (_scalar(cond, field),)))
        return cls(tuple(clauses)) if clauses else None

    def matches(self, row: dict) -> bool:
        return all(c.matches(row) for c in self.clauses)

    def mask(self, rows: "list[dict] | RowIndex") -> np.ndarray:
        """bool[len(rows)]: the rows that pass. With a RowIndex, from its per-field postings (built on
        first use of a field, then O(matches) per clause); with a list, row by row (the reference)."""
        if isinstance(rows, RowIndex):
            out = np.ones(rows.n, bool)
            for c in self.clauses:
                out &= rows.clause_mask(c)
            return out
        return np.fromiter((self.matches(r) for r in rows), bool, len(rows))

    def milvus(self, json_field: str, words_field: str) -> str:
        """The filter as a Milvus boolean expression over the JSON field and the field:word array."""
        parts = []
        for c in self.clauses:
            path = f"{json_field}[{_literal(c.field)}]"
            if c.op == "eq":
                parts.append(f"{path} == {_literal(c.values[0])}")
            elif c.op == "in":
                parts.append(f"{path} in [{', '.join(_literal(v) for v in c.values)}]")
            else:
                parts.append(f"array_contains({words_field}, {_literal(field_word(c.field, c.values[0]))})")
        return " and ".join(parts)

    def to_dict(self) -> dict:
        out = {}
        for c in self.clauses:
            out[c.field] = c.values[0] if c.op == "eq" else {"in": list(c.values)} if c.op == "in" else {"word": c.values[0]}
        return out


class RowIndex:
    """Postings over one segment's metadata rows, built lazily per field: value -> rows for equality and
    set membership, word -> rows for word filters. Matches Clause.matches exactly (tests compare)."""

    def __init__(self, rows: list[dict]):
        self.rows, self.n = rows, len(rows)
        self._values: dict[str, dict] = {}
        self._words: dict[str, dict] = {}

    def clause_mask(self, c: Clause) -> np.ndarray:
        out = np.zeros(self.n, bool)
        if c.op == "word":
            post = self._postings(self._words, c.field, lambda x: words(x))
            hit = post.get(c.values[0])
            if hit is not None:
                out[hit] = True
            return out
        post = self._postings(self._values, c.field, lambda x: (k for k in (_key(x),) if k is not None))
        for v in c.values:
            hit = post.get(_key(v))
            if hit is not None:
                out[hit] = True
        return out

    def _postings(self, cache: dict, field: str, keys) -> dict:
        if field not in cache:
            lists: dict = {}
            for i, r in enumerate(self.rows):
                if field in r:
                    for k in keys(r[field]):
                        lists.setdefault(k, []).append(i)
            cache[field] = {k: np.array(v, np.int64) for k, v in lists.items()}
        return cache[field]


def _key(v):
    """The equality class of a JSON scalar (_same): bools apart from numbers, 1 == 1.0; None otherwise."""
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", v)  # hash(1) == hash(1.0) and 1 == 1.0: one key
    if isinstance(v, str):
        return ("s", v)
    return None


def field_word(field: str, word: str) -> str:
    """How a word of a text field is stored in Milvus' words array."""
    return f"{field}:{word}"


def _literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_cli(items: list[str]) -> dict:
    """The command line's filters as one JSON filter: ``field=value`` (equality), ``field=a|b|c`` (any of
    them), ``field~word`` (the field's text holds the word). A value that reads as a JSON number, true or
    false is that value (``year=2020``); anything else is text. ValueError with a one-line reason."""
    spec: dict = {}
    for item in items:
        m = re.fullmatch(r"([^=~]+)([=~])(.*)", item, re.S)
        if not m or not m.group(3):
            raise ValueError(f"filter {item!r}: expected field=value, field=a|b or field~word")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3)
        if field in spec:
            raise ValueError(f"filter {item!r}: {field} is filtered twice (use field=a|b for any of several values)")
        if op == "~":
            spec[field] = {"word": value}
        elif "|" in value:
            spec[field] = {"in": [_cli_value(v) for v in value.split("|")]}
        else:
            spec[field] = _cli_value(value)
    MetaFilter.resolve(spec)  # the same checks as the library's, at parse time
    return spec


def _cli_value(text: str):
    if text in ("true", "false"):
        return text == "true"
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else text


def read_jsonl(path, ids=None) -> dict[str, dict]:
    """A user's metadata file: one JSON object per line, ``{"id": <a row id>, <field>: <value>, ...}``
    (blank lines skipped) -> id -> fields. ValueError naming the file and line for a line that is not a
    JSON object, has no string id, repeats one, or (when ``ids`` is given) names an id not in ``ids``."""
    known, out = None if ids is None else set(ids), {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror or e})") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{path}:{i}: not JSON ({str(e)[:60]})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{i}: expected a JSON object, got a {type(row).__name__}")
        rid = row.pop("id", None)
        if not isinstance(rid, str):
            raise ValueError(f'{path}:{i}: needs "id": the id of the image it describes (a string)')
        if known is not None and rid not in known:
            raise ValueError(f"{path}:{i}: id {rid!r} is not an image of this collection")
        if rid in out:
            raise ValueError(f"{path}:{i}: id {rid!r} appears twice")
        try:
            json.dumps(row, allow_nan=False)
        except ValueError:
            raise ValueError(f"{path}:{i}: NaN or Infinity is not JSON") from None
        out[rid] = row
    return out
