"""Vocabulary (dimension id <-> name) and the WordPiece tokenizer that shares its ids.

A vocabulary names the dimensions of a SparseBatch: WordPiece tokens for STAIR and VisualSparta,
stable feature names (``f00012``) for Sparse CLIP's learned features. Numpy and `tokenizers` only (no
torch: the index uses it too).

One tokenizer: ``Vocabulary.tokenizer()`` is the `tokenizers.Tokenizer` of the vocabulary: the shipped
``tokenizer.json`` (``Tokenizer.from_file``) when the vocabulary was read from one, else BERT's uncased
pipeline built over the tokens (``bert_tokenizer``: the same normalizer, pre-tokenizer and WordPiece
model as bert-base-uncased's tokenizer.json). The model's text encoder, the ``where=`` query parser
and the CLI all tokenize through it, so a word gets the same ids everywhere.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def bert_tokenizer(tokens: Sequence[str], lowercase: bool = True):
    """BERT's WordPiece pipeline over ``tokens`` (ids = positions), without special-token templates:
    BertNormalizer (clean text, CJK split, lowercase + strip accents), BertPreTokenizer, WordPiece
    (``##`` continuations, [UNK], at most 100 characters a word), special tokens matched as wholes."""
    # start-up: the index side reads vocab.txt without it
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece  # start-up: as above

    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(tokens)}, unk_token="[UNK]",
                              max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    present = set(tokens)
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS if t in present])
    return tok


class Vocabulary:
    def __init__(self, tokens: Sequence[str], name: str = "custom", special: Iterable[str] = SPECIAL_TOKENS,
                 tokenizer_file: str | os.PathLike | None = None):
        self.tokens = list(tokens)
        self.name = name
        self.tokenizer_file = Path(tokenizer_file) if tokenizer_file is not None else None
        self._tokenizer = None
        self._ids = {t: i for i, t in enumerate(self.tokens)}
        if len(self._ids) != len(self.tokens):
            raise ValueError("vocabulary tokens must be unique")
        self.special_ids = np.array(sorted(self._ids[t] for t in special if t in self._ids), dtype=np.int64)

    # ----------------------------------------------------------------- lookup
    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._ids

    def id(self, token: str) -> int:
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"unknown token {token!r} (not in the {len(self)}-entry vocabulary {self.name!r})") from None

    def token(self, i: int) -> str:
        if not 0 <= i < len(self.tokens):
            raise IndexError(f"dimension {i} out of range for vocabulary {self.name!r} of {len(self)}")
        return self.tokens[i]

    def decode(self, batch, top_k: int | None = 20) -> list[list[tuple[str, float]]]:
        """Top (token, weight) pairs per row, heaviest first. Always one list per row of the batch."""
        out = []
        for i in range(len(batch)):
            idx, val = batch.row(i)
            order = np.argsort(-val, kind="stable")
            if top_k is not None:
                order = order[:top_k]
            out.append([(self.tokens[int(idx[j])], float(val[j])) for j in order])
        return out

    def tokenizer(self):
        """The shared `tokenizers.Tokenizer` (built once): the shipped tokenizer.json, or ``bert_tokenizer``.
        Callers that add templates or truncation take a copy (``Tokenizer.from_str(t.to_str())``)."""
        if self._tokenizer is None:
            if self.tokenizer_file is not None:
                from tokenizers import Tokenizer  # start-up: the index side reads vocab.txt without it

                tok = Tokenizer.from_file(str(self.tokenizer_file))
                tok.no_padding()  # a shipped file may pad and truncate: ids of one text are its own
                tok.no_truncation()
                if tok.get_vocab_size(with_added_tokens=False) != len(self.tokens):
                    raise ValueError(f"{self.tokenizer_file}: {tok.get_vocab_size()} tokens, the vocabulary "
                                     f"{len(self.tokens)}")
            else:
                tok = bert_tokenizer(self.tokens)
            self._tokenizer = tok
        return self._tokenizer

    def token_ids(self, text: str) -> list[int]:
        """Ids of one text's word pieces (no [CLS]/[SEP], no truncation)."""
        return self.tokenizer().encode(text, add_special_tokens=False).ids

    def word_ids(self, word: str) -> list[int] | None:
        """A typed word's ids through this vocabulary's tokenizer (the one the model encodes text with);
        None when a piece is unknown, nothing is left (e.g. only control characters), the word is not
        text a tokenizer takes (a lone surrogate, which JSON can carry), or the vocabulary is not
        WordPiece (Sparse CLIP's f00012 features: names only). How a boolean query and must / steer
        read words."""
        if "[UNK]" not in self:
            return None
        try:
            ids = self.token_ids(word)
        except TypeError:  # the tokenizer refuses a lone surrogate with a TypeError
            return None
        return ids if ids and self.id("[UNK]") not in ids else None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tokenizer"] = None  # rebuilt on demand (a Tokenizer is not always picklable)
        return state

    # ----------------------------------------------------------------- construction
    @classmethod
    def latent(cls, n: int, name: str | None = None) -> "Vocabulary":
        """Names for learned features (Sparse CLIP): f00000 ... , stable across runs."""
        width = max(5, len(str(n - 1)))
        return cls([f"f{i:0{width}d}" for i in range(n)], name=name or f"latent-{n}", special=())

    @classmethod
    def from_file(cls, path: str | os.PathLike, name: str | None = None) -> "Vocabulary":
        """A vocab.txt (one token per line) or a tokenizers tokenizer.json with a WordPiece model."""
        path = Path(path)
        if path.suffix == ".json":
            model = json.loads(path.read_text())["model"]
            vocab = model["vocab"]
            tokens = [None] * len(vocab)
            for tok, i in vocab.items():
                tokens[i] = tok
            tokenizer_file = path  # its own pipeline (normalizer, pre-tokenizer) is the tokenizer
        else:
            tokens = path.read_text(encoding="utf-8").splitlines()
            tokenizer_file = None
        # name by size: 30,522 WordPiece entries are the bert-base-uncased vocabulary
        return cls(tokens, name=name or f"wordpiece-{len(tokens)}", tokenizer_file=tokenizer_file)

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text("\n".join(self.tokens) + "\n", encoding="utf-8")

    def __repr__(self) -> str:
        return f"Vocabulary(name={self.name!r}, size={len(self)})"


class WordPieceTokenizer:
    """The model's text encoding: ``Vocabulary.tokenizer()`` with [CLS] ... [SEP] and truncation."""

    def __init__(self, vocab: Vocabulary, lowercase: bool = True, max_length: int = 32):
        from tokenizers import Tokenizer, processors  # start-up: the index side reads vocab.txt without it

        self.vocab = vocab
        self.max_length = max_length
        base = vocab.tokenizer() if lowercase else bert_tokenizer(vocab.tokens, lowercase=False)
        tok = Tokenizer.from_str(base.to_str())  # a copy: the template and truncation are the model's
        cls_id, sep_id = vocab.id("[CLS]"), vocab.id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
        )
        tok.enable_truncation(max_length)
        self._base = base
        self._tok = tok
        self.pad_id = vocab.id("[PAD]")

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both int64 [batch, longest] padded with [PAD]."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of texts (batches in, batches out)")
        encs = self._tok.encode_batch(list(texts))
        n = max((len(e.ids) for e in encs), default=0)
        ids = np.full((len(encs), n), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encs), n), dtype=np.int64)
        for i, e in enumerate(encs):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        return ids, mask

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of one text, without [CLS]/[SEP] (not truncated)."""
        return self._base.encode(text, add_special_tokens=False).tokens

    def token_ids(self, text: str) -> list[int]:
        return self._base.encode(text, add_special_tokens=False).ids
