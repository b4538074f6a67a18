"""tokenspace.data.passages on small fixture text in each source's own format (no Debian package needed)."""
from __future__ import annotations

import pytest

from tokenspace.data import passages as P

GCIDE_ENTRY = """Abdomen \\Ab*do"men\\, n. [L. abdomen (a word of uncertain
   etymol.): cf. F. abdomen.]
   1. (Anat.) The belly, or that part of the body between the
      thorax and the pelvis.
      [1913 Webster]

   2. (Zool.) The posterior section of the body, behind the
      thorax, in insects.
      [1913 Webster]

   {Abdominal ring} (Anat.), a fancied ringlike opening.
      [1913 Webster]
"""

FOLDOC_ENTRY = """tilde

   <character> "~" ASCII character 126.

   Used in Unix csh to stand for the home directory.

   (1995-01-01)
"""

WORDNET_DATA = """  1 This software and database is being provided to you, the LICENSEE, by
00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived or known or inferred to have its own distinct existence (living or nonliving)
02084071 05 n 02 dog 0 domestic_dog 0 000 | a member of the genus Canis; "the dog barked all night"; "ok"
00045250 43 v 01 gallop 0 000 | ride at a galloping pace; "He was galloping down the road"
"""

MAN_PAGE = """.TH LS 1
.SH NAME
ls \\- list directory contents
.SH DESCRIPTION
List information about the FILEs (the current directory by default).
Sort entries alphabetically if none of
.B \\-cftuvSUX
nor \\fB\\-\\-sort\\fR is specified.
.PP
Mandatory arguments to long options are mandatory for short options too.
"""


def _dictd_db(entries: list[tuple[str, str]]) -> tuple[str, bytes]:
    """A dictd database in memory: the .dict text and its index (base64 offsets, as dictfmt writes)."""
    def b64(n: int) -> str:
        digits = ""
        while True:
            digits = P._B64[n % 64] + digits
            n //= 64
            if n == 0:
                return digits

    data, index = b"", []
    for head, body in entries:
        raw = body.encode()
        index.append(f"{head}\t{b64(len(data))}\t{b64(len(raw))}")
        data += raw
    return "\n".join(["00-database-info\tA\tB", *index]) + "\n", data


def test_dictd_numbers_are_base64_digits():
    assert P.dictd_number("A") == 0
    assert P.dictd_number("Fz") == 5 * 64 + 51
    with pytest.raises(ValueError, match="base64"):
        P.dictd_number("F!")


def test_dictd_entries_read_each_entry_once_and_skip_the_database_info():
    index, data = _dictd_db([("Abdomen", GCIDE_ENTRY), ("tilde", FOLDOC_ENTRY)])
    index += "Abdomens\tA\t" + index.splitlines()[1].split("\t")[2] + "\n"  # a second name for entry 1
    got = list(P.dictd_entries(index, data))
    assert [h for h, _ in got] == ["Abdomen", "tilde"]
    assert got[0][1] == GCIDE_ENTRY and got[1][1] == FOLDOC_ENTRY


def test_gcide_is_cut_per_sense_without_header_or_provenance():
    got = P.gcide_passages("Angle", GCIDE_ENTRY)  # the index's name is not the entry's own headword
    assert got == [
        "Abdomen: (Anat.) The belly, or that part of the body between the thorax and the pelvis.",
        "Abdomen: (Zool.) The posterior section of the body, behind the thorax, in insects.",
        "Abdomen: Abdominal ring (Anat.), a fancied ringlike opening.",
    ]


def test_long_text_is_cut_into_pieces_of_max_words():
    entry = "Word \\Word\\, n.\n   " + " ".join(f"w{i}" for i in range(25)) + "\n"
    got = P.gcide_passages("Word", entry, max_words=10)
    assert [len(p.split(": ", 1)[1].split()) for p in got] == [10, 10, 5]


def test_paragraph_passages_drop_the_headword_line_and_short_paragraphs():
    got = P.paragraph_passages("tilde", FOLDOC_ENTRY)
    assert got == ['tilde: <character> "~" ASCII character 126.',
                   "tilde: Used in Unix csh to stand for the home directory."]


def test_wordnet_gives_definitions_and_examples_apart():
    got = P.wordnet_passages(WORDNET_DATA)
    assert got == [
        "entity: that which is perceived or known or inferred to have its own distinct existence "
        "(living or nonliving)",
        "dog, domestic dog: a member of the genus Canis",
        "the dog barked all night",  # "ok" is too short to be a passage
        "gallop: ride at a galloping pace",
        "He was galloping down the road",
    ]
    assert P.wordnet_lemmas(WORDNET_DATA) == ["entity", "dog", "domestic dog", "gallop"]


def test_man_pages_keep_prose_and_drop_roff():
    got = P.man_passages("ls", MAN_PAGE)
    assert got == [
        "ls: ls - list directory contents",
        "ls: List information about the FILEs (the current directory by default). Sort entries "
        "alphabetically if none of -cftuvSUX nor --sort is specified.",
        "ls: Mandatory arguments to long options are mandatory for short options too.",
    ]


def test_man_pages_drop_code_examples_and_unfilled_blocks():
    roff = (MAN_PAGE + ".Vb 2\n\\&    my $x = Foo->new(bar => 1, baz => 2);\n\\&    print $x->quux;\n.Ve\n"
            ".PP\nThe constructor takes named arguments and returns a new object.\n"
            ".EX\nfoo --bar --baz qux quux corge\n.EE\n.nf\nint main(int argc, char **argv);\n.fi\n"
            "Prose after the blocks is kept again.\n")
    got = P.man_passages("ls", roff)
    assert got[:3] == P.man_passages("ls", MAN_PAGE)
    assert got[3:] == ["ls: The constructor takes named arguments and returns a new object.",
                       "ls: Prose after the blocks is kept again."]


RST = """Sorting HOW TO
==============

Python lists have a built-in :meth:`list.sort` method that modifies the list in-place.
There is also a :func:`sorted <builtins.sorted>` built-in function that builds a **new** sorted list.

A simple ascending sort is very easy; just call it::

    >>> sorted([5, 2, 3, 1, 4])
    [1, 2, 3, 4, 5]

.. note::
   This is a note body that is dropped with its directive.

+------+------+
| a    | b    |
+------+------+

You can also use the ``key`` parameter to specify a function.
"""


def test_rest_documentation_keeps_prose_and_drops_markup_code_and_directives():
    assert P.text_passages("sorting", RST) == [
        "sorting: Python lists have a built-in list.sort method that modifies the list in-place. There is "
        "also a sorted built-in function that builds a new sorted list.",
        "sorting: A simple ascending sort is very easy; just call it:",
        "sorting: You can also use the key parameter to specify a function.",
    ]


HTML = ("<html><head><style>p { color: red; width: 100px; }</style></head><body><h1>SELECT</h1>"
        "<p>The <code>SELECT</code> command retrieves rows from zero or more tables.</p>"
        "<pre>SELECT * FROM t WHERE a = 1 AND b = 2;</pre>"
        "<ul><li><p>An item with a paragraph inside it,</p><p>and a second paragraph in the same item.</p></li>"
        "<li>too short</li></ul>"
        "<dl><dt>table_name</dt><dd>The name (optionally schema-qualified) of a table.</dd></dl>"
        "<script>var x = 1 + 2 + 3 + 4 + 5;</script></body></html>")


def test_html_documentation_gives_outermost_blocks_without_code():
    assert P.html_passages("sql-select", HTML) == [
        "sql-select: The SELECT command retrieves rows from zero or more tables.",
        "sql-select: An item with a paragraph inside it, and a second paragraph in the same item.",
        "sql-select: The name (optionally schema-qualified) of a table.",
    ]


def test_long_documentation_paragraphs_are_cut():
    text = " ".join(f"w{i}" for i in range(250))
    got = P.text_passages("t", text, max_words=100)
    assert [len(g.split()) - 1 for g in got] == [100, 100, 50]
    assert P.html_passages("t", f"<p>{text}</p>", max_words=100) == got


def test_queries_are_held_apart_short_distinct_and_deterministic():
    cands = ["Dog", "dog", "domestic dog", "a b c d e", "x-ray", "C++", "gallop", "the dog barked all night"]
    q = P.hold_out_queries(cands, 3, passages=["gallop"], seed=0)
    assert q == P.hold_out_queries(list(reversed(cands)), 3, passages=["gallop"], seed=0)
    assert len(q) == len(set(q)) == 3
    assert set(q) <= {"dog", "domestic dog", "x-ray"}  # 5 words, symbols and passages are excluded
    with pytest.raises(ValueError, match="distinct query candidates"):
        P.hold_out_queries(cands, 10)
