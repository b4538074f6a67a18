"""One tokenizer: the model's text encoding and the ``where=`` query parser give the same ids.

Both go through ``Vocabulary.tokenizer()`` (a shipped tokenizer.json via ``Tokenizer.from_file``, or
BERT's uncased pipeline built over the tokens). A hand-written greedy WordPiece that only lowercased
disagreed with it on accents ("Café" -> "cafe"), punctuation and control characters; the property
tests below check random unicode words and texts.
"""
from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tokenspace.index import And, Term, parse_query
from tokenspace.index.query import KEYWORDS
from tokenspace.vocab import SPECIAL_TOKENS, Vocabulary, WordPieceTokenizer, bert_tokenizer

# letters, continuations, digits, punctuation, a few accented and CJK characters and words: most random
# words split into known pieces, the rest hit [UNK]
TOKENS = (list(SPECIAL_TOKENS) + list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
          + list(string.digits) + ["##" + c for c in string.digits] + list(string.punctuation)
          + ["é", "ß", "東", "京", "ü", "dog", "cat", "skate", "##board", "##ing", "and", "the", "[unused0]"])


def _flatten(node) -> list[int]:
    if isinstance(node, Term):
        return [node.dim]
    assert isinstance(node, And), node  # a word and a text of words are ANDs of their pieces
    return [d for c in node.children for d in _flatten(c)]


_TOKENIZERS: dict = {}


def _model_tokenizer(vocab: Vocabulary, max_length: int) -> WordPieceTokenizer:
    key = (id(vocab), max_length)  # built once per vocabulary: a 30K-entry copy is not free
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = WordPieceTokenizer(vocab, max_length=max_length)
    return _TOKENIZERS[key]


def _model_ids(tok: WordPieceTokenizer, text: str) -> list[int]:
    ids, mask = tok.encode([text])  # what the model's text tower receives: [CLS] ... [SEP]
    ids = ids[0][mask[0] == 1].tolist()
    assert ids[0] == tok.vocab.id("[CLS]") and ids[-1] == tok.vocab.id("[SEP]")
    return ids[1:-1]


def _plain(word: str) -> bool:
    """A word the parser reads as one WORD that is not typed verbatim (##piece, [bracketed])."""
    return (word not in KEYWORDS and not any(c.isspace() or c in '()"' for c in word)
            and not word.startswith("##") and not (word.startswith("[") and word.endswith("]")))


WORD = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)
ASCII_WORD = st.text(st.sampled_from(string.ascii_letters + string.digits + string.punctuation + "éÉüÜß東京\u0301"),
                     min_size=1, max_size=12)


CHARS = Vocabulary(TOKENS, name="chars")


def _vocabularies():
    vocabs = [CHARS]
    try:
        from tokenspace import assets

        vocabs.append(Vocabulary.from_file(Path(assets.path("splade-tiny")) / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - the asset cache is optional in tests
        pass
    return vocabs


@pytest.mark.parametrize("vocab", _vocabularies(), ids=lambda v: v.name)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(word=st.one_of(WORD, ASCII_WORD))
def test_query_word_gets_the_model_ids(vocab, word):
    assume(_plain(word))
    ids = _model_ids(_model_tokenizer(vocab, 64), word)
    if not ids or vocab.id("[UNK]") in ids:
        with pytest.raises(ValueError, match="unknown token"):
            parse_query(word, vocab)
    else:
        assert _flatten(parse_query(word, vocab)) == ids


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.one_of(WORD, ASCII_WORD), min_size=1, max_size=5))
def test_query_text_gets_the_model_ids(words):
    vocab = CHARS
    assume(all(_plain(w) for w in words))
    text = " ".join(words)  # the parser ANDs the words; the model reads the same text
    ids = _model_ids(_model_tokenizer(vocab, 128), text)
    per_word = [vocab.token_ids(w) for w in words]
    assume(all(p and vocab.id("[UNK]") not in p for p in per_word))
    assert _flatten(parse_query(text, vocab)) == ids


def test_examples_the_hand_written_wordpiece_got_wrong():
    vocab = Vocabulary(TOKENS)
    V = {t: i for i, t in enumerate(TOKENS)}
    assert parse_query("É", vocab) == Term(V["e"], "e")  # accents stripped, as the model does
    assert parse_query("Dog's", vocab) == And((Term(V["dog"], "dog"), Term(V["'"], "'"), Term(V["s"], "s")))
    assert parse_query("##ing", vocab) == Term(V["##ing"], "##ing")  # typed verbatim
    assert parse_query("[unused0]", vocab) == Term(V["[unused0]"], "[unused0]")
    latent = Vocabulary.latent(20)
    assert parse_query("f00012", latent) == Term(12, "f00012")  # feature names, no tokenizer


def test_model_uses_the_vocabulary_tokenizer(make_model, tmp_path):
    model = make_model("stair")
    assert model.tokenizer.vocab is model.vocab
    # a shipped tokenizer.json is read with Tokenizer.from_file and gives the built pipeline's ids
    path = tmp_path / "tokenizer.json"
    bert_tokenizer(model.vocab.tokens).save(str(path))
    shipped = Vocabulary.from_file(path)
    assert shipped.tokenizer_file == path and shipped.tokens == model.vocab.tokens
    for text in ["A red DOG and the cats", "skateboarding é 東京", "dog's hat!"]:
        assert shipped.token_ids(text) == model.vocab.token_ids(text) == model.tokenizer.token_ids(text)


def test_the_index_side_stays_torch_free():
    import subprocess
    import sys

    code = ("import sys; from tokenspace.vocab import Vocabulary; from tokenspace.index import parse_query; "
            "parse_query('Dog AND cat', Vocabulary(['[PAD]', '[UNK]', 'dog', 'cat'])); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
