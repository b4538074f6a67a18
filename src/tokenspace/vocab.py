"""Vocabulary (dimension id <-> name) and the WordPiece tokenizer that shares its ids.

A vocabulary names the dimensions of a SparseBatch: WordPiece tokens for STAIR and VisualSparta,
stable feature names (``f00012``) for Sparse CLIP's learned features. Numpy only (no torch).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class Vocabulary:
    def __init__(self, tokens: Sequence[str], name: str = "custom", special: Iterable[str] = SPECIAL_TOKENS):
        self.tokens = list(tokens)
        self.name = name
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
        else:
            tokens = path.read_text(encoding="utf-8").splitlines()
        # name by size: 30,522 WordPiece entries are the bert-base-uncased vocabulary
        return cls(tokens, name=name or f"wordpiece-{len(tokens)}")

    def save(self, path: str | os.PathLike) -> None:
        Path(path).write_text("\n".join(self.tokens) + "\n", encoding="utf-8")

    def __repr__(self) -> str:
        return f"Vocabulary(name={self.name!r}, size={len(self)})"


class WordPieceTokenizer:
    """BERT WordPiece over a Vocabulary, via the `tokenizers` library (fast, exact bert-base-uncased ids)."""

    def __init__(self, vocab: Vocabulary, lowercase: bool = True, max_length: int = 32):
        from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
        from tokenizers.models import WordPiece

        self.vocab = vocab
        self.max_length = max_length
        tok = Tokenizer(WordPiece({t: i for i, t in enumerate(vocab.tokens)}, unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls_id, sep_id = vocab.id("[CLS]"), vocab.id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
        )
        tok.enable_truncation(max_length)
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
        """Word pieces of one text, without [CLS]/[SEP]."""
        return self._tok.encode(text, add_special_tokens=False).tokens

    def token_ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids
