"""The query side of an inference-free model folder (`tokenspace sparsify --inference-free`) read without
torch: what a lean install (`pip install tokenspace`, no `[models]` extra) searches with.

An inference-free query is the text's distinct word pieces, each at the weight the folder stores for it
(``query_weights`` in model.safetensors), its ``text_top_n`` heaviest kept, L2-normalised when the base
model scores by cosine: numpy and the tokenizer, no network (models/inference_free.py's ``encode_text``,
which the full install runs and tests/test_lean_install.py compares this with). Image queries and
heatmaps need the base model's image tower, so they need the models extra: ``encode_image`` says so."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokenspace.models.classwords import emitted
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary, WordPieceTokenizer

FAMILY = "inference-free"
DOT_FAMILIES = frozenset({"visualsparta"})  # bases whose rows are scored by the plain dot product
MODELS_EXTRA = "pip install 'tokenspace[models]'"


class NeedsModelsExtra(ValueError):
    """What only the full model can do (torch and the encoders), asked of a lean install."""


def is_table_model(folder) -> bool:
    """Whether ``folder`` is a saved inference-free model (its queries need no network)."""
    cfg = Path(folder) / "config.json"
    try:
        return json.loads(cfg.read_text(encoding="utf-8")).get("family") == FAMILY
    except (OSError, ValueError):
        return False


class TableQueries:
    """An inference-free model's query side: ``vocab``, ``tokenizer``, ``encode_text`` / ``encode_query``
    (-> SparseBatch), what a search session asks of a model for text queries."""

    family = FAMILY
    sparse = True

    def __init__(self, folder):
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("family") != FAMILY:
            raise NeedsModelsExtra(f"the model at {folder} is a {config.get('family')} model, whose queries run a "
                                   f"text network: that needs torch ({MODELS_EXTRA}); without it, search with an "
                                   "inference-free model (tokenspace sparsify --inference-free)")
        extra = config.get("extra", {})
        base = extra.get("base") or {}
        self.folder = folder
        self.config = config
        self.vocab = Vocabulary.from_file(folder / (config.get("vocab") or "vocab.txt"))
        self.tokenizer = WordPieceTokenizer(self.vocab, max_length=int(config.get("max_text_len", 32)))
        self.similarity_fn_name = "dot" if base.get("family") in DOT_FAMILIES else "cosine"
        self.text_top_n = extra.get("text_top_n")
        from safetensors import safe_open  # start-up: read once, here

        # the table alone: the folder also holds the base model's weights (48 MB for the release model)
        with safe_open(str(folder / "model.safetensors"), "np") as f:
            table = f.get_tensor("query_weights") if "query_weights" in f.keys() else None
        if table is None or table.shape != (len(self.vocab),):
            raise ValueError(f"{folder}/model.safetensors holds no query_weights table over its {len(self.vocab)} "
                             "tokens: not an inference-free model folder")
        self._set_table(table)

    @classmethod
    def from_model(cls, model) -> "TableQueries":
        """The same query side of an inference-free model already loaded (the full install's, torch and
        all): its table copied once into numpy. A service's text queries then skip the model's own
        encode_text, whose argument checks, batches and progress bar cost a distinct query ~0.3 ms."""
        self = cls.__new__(cls)
        self.folder, self.config = None, None
        self.vocab, self.tokenizer = model.vocab, model.tokenizer
        self.similarity_fn_name, self.text_top_n = model.similarity_fn_name, model.text_top_n
        self._set_table(model.query_weights.detach().cpu().numpy())
        return self

    def _set_table(self, table: np.ndarray) -> None:
        keep = np.fromiter((emitted(t) for t in self.vocab.tokens), bool, count=len(self.vocab))
        self.table = np.where(keep, table.astype(np.float32), np.float32(0))

    def encode_text(self, texts: str | Sequence[str], **_) -> SparseBatch:
        """One text or a list -> one row each: its distinct tokens at their stored weights."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        empty = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
        if empty:
            raise ValueError(f"empty text at positions {empty[:10]}")
        ids, mask = self.tokenizer.encode(texts)
        indptr, indices, values = [0], [], []
        for row, m in zip(ids, mask):
            dims = np.unique(row[m > 0])
            w = self.table[dims]
            dims, w = dims[w > 0], w[w > 0]
            if self.text_top_n and len(w) > self.text_top_n:  # heaviest first; equal: lower id first
                top = np.sort(np.argsort(-w, kind="stable")[: self.text_top_n])
                dims, w = dims[top], w[top]
            if self.similarity_fn_name == "cosine" and len(w):
                w = w / np.float32(max(float(np.sqrt(np.dot(w, w))), 1e-12))
            indices.append(dims)
            values.append(w)
            indptr.append(indptr[-1] + len(dims))
        return SparseBatch(np.asarray(indptr), np.concatenate(indices), np.concatenate(values), len(self.vocab),
                           self.vocab)

    encode_query = encode_text

    def encode_image(self, *_, **__):
        raise NeedsModelsExtra(f"searching by an image runs the image tower: that needs torch ({MODELS_EXTRA})")

    def to(self, device):  # a search session moves its model; a table has nowhere to go
        return self
