"""What a search tells about its query text (explain/notes.py): the notes from the text's word pieces, read
once for query_notes and has_content together."""
from __future__ import annotations

from types import SimpleNamespace

from tokenspace.explain import notes
from tokenspace.vocab import WordPieceTokenizer


def test_notes_and_content_come_from_the_texts_own_pieces_asked_twice_or_not(tiny_vocab):
    model = SimpleNamespace(tokenizer=WordPieceTokenizer(tiny_vocab, max_length=6))
    long, stop = "red dog red dog red dog", "the a"
    for _ in range(2):  # the second time from the kept pieces: the same answers
        assert notes._pieces(model.tokenizer, long) == tuple(model.tokenizer.tokenize(long))
        assert len(notes.query_notes(model, long)) == 1 and "6 word pieces long" in notes.query_notes(model, long)[0]
        assert notes.has_content(model, long) and notes.query_notes(model, "red dog") == []
        assert not notes.has_content(model, stop) and "no word that names" in notes.query_notes(model, stop)[0]
    other = SimpleNamespace(tokenizer=WordPieceTokenizer(tiny_vocab, max_length=32))  # pieces kept per tokenizer
    assert notes.query_notes(other, long) == []
