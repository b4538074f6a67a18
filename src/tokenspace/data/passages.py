"""Passages of real English from offline Debian text, for the real learned-sparse corpus (benchmarks/real_corpus.py).

Sources and how each is cut:
    dictd databases (``dict-gcide``, ``dict-foldoc``, ``dict-jargon``: ``NAME.index`` + ``NAME.dict.dz``)
        ``dictd_entries`` reads every entry through the index (offsets in dictd's base64); GCIDE is cut
        per sense (``gcide_passages``: numbered senses, sub-entries in braces, each its own passage),
        FOLDOC and the Jargon File per paragraph (``paragraph_passages``).
    WordNet (``wordnet-base``: ``data.noun`` ...)
        ``wordnet_passages``: one passage per synset gloss ("lemmas: definition") and one per example
        sentence; ``wordnet_lemmas`` gives the lemma phrases that queries are drawn from.
    manual pages (``/usr/share/man/man*``)
        ``man_passages``: roff source with the requests and font escapes stripped, per paragraph.
    documentation (reStructuredText sources and plain text: the Linux kernel's, Python's; HTML manuals)
        ``text_passages`` per paragraph, directives, section rules and literal blocks dropped;
        ``html_passages`` per paragraph, list item and definition, ``<pre>`` blocks dropped.
Every passage is one line of text (whitespace collapsed) of at most ``max_words`` words: longer
paragraphs are cut into consecutive pieces. ``hold_out_queries`` draws the short queries, which are
never passages themselves.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser

from tokenspace.data.splits import subsample

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_WS = re.compile(r"\s+")
_SOURCE_TAG = re.compile(r"^\s*\[[^\]]*\]\s*$")  # GCIDE's "[1913 Webster]" / "[PJC]" lines: provenance, not text
_PRON = re.compile(r"\\[^\\]*\\")  # GCIDE pronunciation between backslashes
_SENSE = re.compile(r"^\s*\d+\.\s")  # a numbered sense starts a new passage
_MAX_WORDS = 120


def dictd_number(code: str) -> int:
    """dictd's index numbers: big-endian base64 digits (``"Fz"`` -> 371)."""
    n = 0
    for ch in code:
        d = _B64.find(ch)
        if d < 0:
            raise ValueError(f"not a dictd base64 number: {code!r}")
        n = n * 64 + d
    return n


def dictd_entries(index_text: str, dict_text: str) -> Iterator[tuple[str, str]]:
    """(headword, entry text) for every entry of a dictd database, each entry once (several headwords can
    point at one entry: the first wins), skipping the database's own ``00-database-*`` entries."""
    seen: set[int] = set()
    data = dict_text.encode("utf-8") if isinstance(dict_text, str) else dict_text
    for line in index_text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0].startswith("00-database") or parts[0].startswith("00database"):
            continue
        start, length = dictd_number(parts[1]), dictd_number(parts[2])
        if start in seen:
            continue
        seen.add(start)
        yield parts[0], data[start : start + length].decode("utf-8", errors="replace")


def clean(text: str) -> str:
    """One line: whitespace collapsed, GCIDE's cross-reference braces dropped."""
    return _WS.sub(" ", text.replace("{", "").replace("}", "")).strip()


def cut(text: str, max_words: int = _MAX_WORDS) -> list[str]:
    """``text`` as consecutive pieces of at most ``max_words`` words (none when it is empty)."""
    words = text.split()
    return [" ".join(words[i : i + max_words]) for i in range(0, len(words), max_words)]


def _titled(title: str, paragraphs: Iterable[str], min_words: int, max_words: int) -> list[str]:
    """Each paragraph cleaned, dropped under ``min_words`` words, cut at ``max_words`` and prefixed
    "title: " (the one shape every source's passages take)."""
    out = []
    for par in paragraphs:
        text = clean(par)
        if len(text.split()) >= min_words:
            out.extend(f"{title}: {piece}" for piece in cut(text, max_words))
    return out


def _blocks(text: str) -> list[list[str]]:
    """Blank-line separated blocks of lines, provenance lines removed."""
    out, cur = [], []
    for line in text.splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
            cur = []
        elif not _SOURCE_TAG.match(line):
            cur.append(line)
    if cur:
        out.append(cur)
    return out


def _strip_header(lines: list[str]) -> list[str]:
    """Drop GCIDE's header ("Word \\pron\\, n. [etymology]") from an entry's first block; the etymology
    bracket may run over several lines."""
    depth, i = 0, 0
    for i, line in enumerate(lines):
        depth += line.count("[") - line.count("]")
        if depth <= 0:
            break
    rest = lines[i + 1 :]
    return rest


def gcide_passages(headword: str, entry: str, max_words: int = _MAX_WORDS) -> list[str]:
    """An entry of the GCIDE as passages, one per sense: "Headword: text of the sense"."""
    blocks = _blocks(entry)
    if not blocks:
        return []
    # the entry's own headword: the index's first name for an entry can be a sub-entry ("Angle of elevation")
    own = blocks[0][0].split("\\")[0].strip(" ,")
    headword = own if own and len(own.split()) <= 4 else headword
    blocks[0] = _strip_header(blocks[0])
    senses: list[str] = []
    for block in blocks:
        for line in block:
            if _SENSE.match(line) or not senses:
                senses.append(line)
            else:
                senses[-1] += " " + line
        if block:
            senses.append("")  # a blank line also ends a sense
    return _titled(headword, (_PRON.sub("", _SENSE.sub("", sense, count=1)) for sense in senses), 2, max_words)


def paragraph_passages(headword: str, entry: str, max_words: int = _MAX_WORDS,
                       skip_first_line: bool = True) -> list[str]:
    """A FOLDOC / Jargon File entry as passages, one per paragraph: "Headword: paragraph". The entry's
    first line repeats the headword (dictd's format) and is dropped."""
    lines = entry.splitlines()
    if skip_first_line and lines:
        lines = lines[1:]
    return _titled(headword, (" ".join(block) for block in _blocks("\n".join(lines))), 3, max_words)


def _wordnet_records(data_text: str) -> Iterator[tuple[list[str], str]]:
    """(lemmas, gloss) per synset of a WordNet ``data.*`` file (license lines start with spaces)."""
    for line in data_text.splitlines():
        if not line or line.startswith(" ") or "|" not in line:
            continue
        head, gloss = line.split("|", 1)
        f = head.split()
        n_words = int(f[3], 16)
        lemmas = [re.sub(r"\(.*\)$", "", f[4 + 2 * k]).replace("_", " ") for k in range(n_words)]
        yield lemmas, gloss.strip()


def wordnet_passages(data_text: str, max_words: int = _MAX_WORDS) -> list[str]:
    """Per synset: "lemma, lemma: definition", then each quoted example sentence as its own passage."""
    out = []
    for lemmas, gloss in _wordnet_records(data_text):
        examples = re.findall(r'"([^"]+)"', gloss)
        definition = clean(re.sub(r'"[^"]*"', "", gloss).strip(" ;"))
        if definition:
            out.extend(f"{', '.join(lemmas)}: {p}" for p in cut(definition, max_words))
        for ex in examples:
            ex = clean(ex)
            if len(ex.split()) >= 3:
                out.extend(cut(ex, max_words))
    return out


def wordnet_lemmas(data_text: str) -> list[str]:
    """Every lemma phrase of a WordNet ``data.*`` file (underscores as spaces), in file order."""
    return [lemma for lemmas, _ in _wordnet_records(data_text) for lemma in lemmas]


_CODE_BLOCKS = {"Vb": "Ve", "EX": "EE", "nf": "fi"}  # request opening a block -> the one closing it
_ROFF_ESCAPE = re.compile(r"\\f(\[[^\]]*\]|\(..|.)|\\s[+-]?\d|\\\*(\[[^\]]*\]|\(..|.)|\\\(..|\\[&|^~%:e\-]")


def man_passages(title: str, roff: str, max_words: int = _MAX_WORDS) -> list[str]:
    """A manual page's roff source as passages, one per paragraph: "title: paragraph". Requests
    (lines starting with ``.`` or ``'``) end a paragraph; macro arguments of ``.B``/``.I``/``.SH`` lines
    are kept as text; font and size escapes are removed; code and unfilled blocks (``.Vb``..``.Ve`` of
    pod2man, ``.EX``..``.EE``, ``.nf``..``.fi``) are dropped, being examples and synopses rather than
    prose. Not a roff renderer: enough for prose."""
    paragraphs, cur, code_until = [], [], None
    for line in roff.splitlines():
        if code_until is not None:
            if line.startswith((".", "'")) and line[1:].split(" ", 1)[0] == code_until:
                code_until = None
            continue
        if line.startswith((".", "'")):
            req, _, arg = line[1:].partition(" ")
            if req in _CODE_BLOCKS:
                code_until = _CODE_BLOCKS[req]
                if cur:
                    paragraphs.append(cur)
                cur = []
                continue
            if req in ("B", "I", "BI", "IB", "BR", "RB", "IR", "RI") and arg:
                cur.append(arg.replace('"', ""))
                continue
            if cur:
                paragraphs.append(cur)
            cur = []
        elif line.strip():
            cur.append(line)
    if cur:
        paragraphs.append(cur)
    return _titled(title, (_ROFF_ESCAPE.sub("", " ".join(par).replace("\\-", "-")).replace("\\", "")
                           for par in paragraphs), 5, max_words)


_RST_RULE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}$")  # a section title's over/underline, a table's border
_RST_ROLE = re.compile(r":[\w:+-]+:`~?([^`<]*?)\s*(?:<[^>]*>)?`")  # :func:`name <target>` -> name
_RST_MARKUP = re.compile(r"``|`_{0,2}|\*\*|\|(?=\w)|(?<=\w)\|")


def text_passages(title: str, text: str, max_words: int = _MAX_WORDS, min_words: int = 5) -> list[str]:
    """reStructuredText or plain-text documentation as passages, one per paragraph: "title: paragraph".
    Dropped: directives (``.. x::`` and their indented body), literal blocks (the indented lines after a
    paragraph ending in ``::``), section rules, grid tables and doctest lines; roles and inline markup
    are reduced to their text. Not a reST parser: enough for prose."""
    paragraphs: list[str] = []
    cur: list[str] = []
    skip_indented = False

    def flush():
        if cur:
            paragraphs.append(" ".join(cur))
        cur.clear()

    for line in text.splitlines():
        s = line.strip()
        if not s:
            flush()
            continue
        if skip_indented and line[:1].isspace():
            continue  # the body of a directive or a literal block
        skip_indented = False
        if s.startswith((".. ", "+-", "|", ">>>", "...")) or _RST_RULE.match(s):  # "|": a grid table's row
            flush()
            skip_indented = s.startswith(".. ")
            continue
        cur.append(s[:-1] if s.endswith("::") else s)
        if s.endswith("::"):
            flush()
            skip_indented = True
    flush()
    return _titled(title, (_RST_MARKUP.sub("", _RST_ROLE.sub(r"\1", p)) for p in paragraphs), min_words, max_words)


class _HtmlParagraphs(HTMLParser):
    """Text of each <p>, <li>, <dt>, <dd> and <td> (the outermost one), <pre>/<script>/<style> dropped."""
    _BLOCKS = frozenset({"p", "li", "dt", "dd", "td"})
    _SKIP = frozenset({"pre", "script", "style"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._cur: list[str] | None = None
        self._open: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self._SKIP:
            self._skip += 1
        elif tag in self._BLOCKS:
            if self._cur is None:
                self._cur = []
            self._open.append(tag)

    def handle_endtag(self, tag):
        if tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self._BLOCKS and tag in self._open:
            while self._open and self._open.pop() != tag:
                pass
            if not self._open and self._cur is not None:
                self.paragraphs.append(" ".join(self._cur))
                self._cur = None

    def handle_data(self, data):
        if self._cur is not None and not self._skip:
            self._cur.append(data)


def html_passages(title: str, html: str, max_words: int = _MAX_WORDS, min_words: int = 5) -> list[str]:
    """An HTML manual page as passages, one per paragraph, list item, definition or table cell (nested
    blocks belong to the outermost): "title: paragraph". Code in ``<pre>`` is dropped."""
    parser = _HtmlParagraphs()
    parser.feed(html)
    parser.close()
    return _titled(title, parser.paragraphs, min_words, max_words)


def hold_out_queries(candidates: Iterable[str], n: int, passages: Iterable[str] = (), seed: int = 0,
                     max_words: int = 4) -> list[str]:
    """``n`` distinct short queries (lower-cased phrases of 1..max_words words of letters, spaces and
    hyphens) drawn deterministically from ``candidates``; none equals a passage. Sorted."""
    word = re.compile(r"^[a-z][a-z' -]*$")
    exclude = {p.lower() for p in passages}
    pool = {clean(c).lower() for c in candidates}
    pool = {q for q in pool if word.match(q) and len(q.split()) <= max_words and q not in exclude}
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} distinct query candidates, {n} asked for")
    return sorted(subsample(pool, n, seed))
