"""Boolean query trees over tokens (STAIR appendix D): ``dog AND (beach OR sand) NOT cat``.

A tree restricts *which* documents may be returned; the sparse query vector still decides their
order. A leaf matches a document when the document's weight for that token is > 0.

Grammar (keywords are upper case so that lower-case ``and``/``or``/``not`` stay ordinary tokens)::

    expr    := and_expr ("OR" and_expr)*
    and_expr:= unary (("AND")? unary | "NOT" unary)*     # juxtaposition means AND; "a NOT b" = a AND NOT b
    unary   := "NOT" unary | "(" expr ")" | WORD | '"' any text '"'

Leaves are tokenized by the vocabulary's own tokenizer (``Vocabulary.tokenizer()``, the one the model
encodes text with: lower case, accents stripped, WordPiece), so a word gets the ids a caption with
that word gets. Entries no text tokenizes to (``##ing``, ``[unused3]``) and latent feature names
(``f00012``) are typed as they are. A word that splits into several pieces (``"skateboarding"`` ->
``skate ##board ##ing``) requires *all* its pieces (an AND of the pieces), the reading that keeps "NOT
word" meaning "none of ... " simple and never matches a document on one generic sub-piece alone. Use
double quotes for a word that looks like a keyword (``"AND"`` is the word "and") or contains
spaces/parentheses. Unknown tokens and malformed queries raise ValueError naming the character
position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

KEYWORDS = ("AND", "OR", "NOT")
# nesting of "(" and "NOT" a query may use: the parser and the tree's methods recurse once per level,
# and a bound far below Python's recursion limit turns a pathological query into a ValueError
MAX_DEPTH = 64


# ----------------------------------------------------------------------------- tree nodes
@dataclass(frozen=True)
class Term:
    """Leaf: documents whose weight for dimension ``dim`` is > 0."""

    dim: int
    text: str = ""

    def evaluate(self, leaf: Callable[[int], np.ndarray]) -> np.ndarray:
        return leaf(self.dim)

    def matches(self, dims: "set[int] | frozenset[int]") -> bool:
        return self.dim in dims

    def dims(self) -> set[int]:
        return {self.dim}

    def __str__(self) -> str:
        return self.text or f"#{self.dim}"


@dataclass(frozen=True)
class And:
    children: tuple

    def evaluate(self, leaf):
        out = self.children[0].evaluate(leaf).copy()
        for c in self.children[1:]:
            out &= c.evaluate(leaf)
        return out

    def matches(self, dims) -> bool:
        return all(c.matches(dims) for c in self.children)

    def dims(self) -> set[int]:
        return set().union(*(c.dims() for c in self.children))

    def __str__(self) -> str:
        return "(" + " AND ".join(map(str, self.children)) + ")"


@dataclass(frozen=True)
class Or:
    children: tuple

    def evaluate(self, leaf):
        out = self.children[0].evaluate(leaf).copy()
        for c in self.children[1:]:
            out |= c.evaluate(leaf)
        return out

    def matches(self, dims) -> bool:
        return any(c.matches(dims) for c in self.children)

    def dims(self) -> set[int]:
        return set().union(*(c.dims() for c in self.children))

    def __str__(self) -> str:
        return "(" + " OR ".join(map(str, self.children)) + ")"


@dataclass(frozen=True)
class Not:
    child: object

    def evaluate(self, leaf):
        return ~self.child.evaluate(leaf)

    def matches(self, dims) -> bool:
        return not self.child.matches(dims)

    def dims(self) -> set[int]:
        return self.child.dims()

    def __str__(self) -> str:
        return f"NOT {self.child}"


Node = Term | And | Or | Not


def all_of(dims: Iterable[int]) -> Node | None:
    """Tree requiring every dim (``must=``); None for an empty list."""
    leaves = tuple(Term(int(d)) for d in dims)
    return None if not leaves else leaves[0] if len(leaves) == 1 else And(leaves)


def none_of(dims: Iterable[int]) -> Node | None:
    """Tree excluding every dim (``must_not=``); None for an empty list."""
    leaves = tuple(Term(int(d)) for d in dims)
    return None if not leaves else Not(leaves[0] if len(leaves) == 1 else Or(leaves))


# ----------------------------------------------------------------------------- parsing
def _lex(text: str) -> list[tuple[str, str, int]]:
    """Tokens as (kind, value, position); kind in {"(", ")", "KW", "WORD"}."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "()":
            out.append((c, c, i))
            i += 1
        elif c == '"':
            j = text.find('"', i + 1)
            if j < 0:
                raise ValueError(f"unterminated quote at position {i} in query {text!r}")
            if j == i + 1:
                raise ValueError(f"empty quoted token at position {i} in query {text!r}")
            out.append(("WORD", text[i + 1 : j], i))
            i = j + 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in '()"':
                j += 1
            word = text[i:j]
            out.append(("KW" if word in KEYWORDS else "WORD", word, i))
            i = j
    return out


def _resolve(word: str, pos: int, vocab, text: str) -> Node:
    # entries no text tokenizes to ("##ing", "[unused3]") and feature names are typed as they are
    verbatim = word.startswith("##") or (word.startswith("[") and word.endswith("]")) or "[UNK]" not in vocab
    if verbatim and word in vocab:
        return Term(vocab.id(word), word)
    ids = vocab.word_ids(word)
    if not ids:
        raise ValueError(f"unknown token {word!r} at position {pos} in query {text!r}")
    leaves = tuple(Term(i, vocab.tokens[i]) for i in ids)
    return leaves[0] if len(leaves) == 1 else And(leaves)


class _Parser:
    def __init__(self, text: str, vocab):
        self.text, self.vocab = text, vocab
        self.toks = _lex(text)
        self.i = 0
        self.depth = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def error(self, what: str):
        tok = self.peek()
        pos = tok[2] if tok else len(self.text)
        found = f"{tok[1]!r}" if tok else "end of query"
        raise ValueError(f"{what} at position {pos} (found {found}) in query {self.text!r}")

    def parse(self) -> Node:
        if not self.toks:
            raise ValueError("empty query")
        node = self.expr()
        if self.peek() is not None:
            self.error("unexpected token")
        return node

    def expr(self) -> Node:
        parts = [self.and_expr()]
        while (t := self.peek()) is not None and t[:2] == ("KW", "OR"):
            self.i += 1
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_expr(self) -> Node:
        parts = [self.unary()]
        while (t := self.peek()) is not None and t[0] != ")" and t[:2] != ("KW", "OR"):
            if t[:2] == ("KW", "AND"):
                self.i += 1
                parts.append(self.unary())
            elif t[:2] == ("KW", "NOT"):
                self.i += 1
                parts.append(Not(self.unary()))
            else:  # juxtaposition: implicit AND
                parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Node:
        t = self.peek()
        if t is None:
            self.error("expected a token or '('")
        kind, value, pos = t
        if (kind == "KW" and value == "NOT") or kind == "(":
            if self.depth >= MAX_DEPTH:
                raise ValueError(f"query nested deeper than {MAX_DEPTH} levels of '(' or NOT at position {pos}")
            self.depth += 1
            self.i += 1
            if kind == "(":
                node = self.expr()
                if self.peek() is None or self.peek()[0] != ")":
                    self.error(f"'(' at position {pos} is not closed: expected ')'")
                self.i += 1
            else:
                node = Not(self.unary())
            self.depth -= 1
            return node
        if kind == "WORD":
            self.i += 1
            return _resolve(value, pos, self.vocab, self.text)
        self.error("expected a token or '('")


def parse_query(text: str, vocab) -> Node:
    """Parse a boolean query string into a tree of Term/And/Or/Not over the vocabulary's dims."""
    if vocab is None:
        raise ValueError("parse_query needs a Vocabulary to resolve tokens")
    return _Parser(text, vocab).parse()
