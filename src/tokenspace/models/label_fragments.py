"""VisualSparta's label fragments (eqs. 6-7) from the backbone's ImageNet classifier, not a detector.

The paper adds to an image's region fragments the WordPiece tokens of the object labels a Faster-RCNN
predicts, each embedded like a BERT input token:

    o_i = E_tok(o_i) + E_pos(i) + E_seg              (eq. 6)
    E_label = [o_1, ..., o_k]                        (eq. 7), then a = [E_image W + b; E_label]  (eq. 8)

Here EfficientNet-Lite0's own classifier plays the detector: every grid cell gets class probabilities,
a class counts as detected with its best cell's probability, and the label tokens (WordPieces of each
class's first lemma, "golden retriever" -> golden, retriever) of the most confident classes are taken
in that order until exactly ``k`` tokens are filled (a fixed length, so no padding enters the
encoder or the max over fragments). E_tok is the model's word-embedding table (VisualSparta's own,
trainable); E_pos and E_seg are learned. The classifier is frozen: labels are inputs, as a detector's
are. Deviations from the paper: classes of a whole-image classifier read per cell instead of detected
objects; no attribute words; one ranking over the image instead of labels grouped by region.

Config (VisualSparta ``extra.label_fragments``, off unless set; the paper-faithful configs leave it out):
    {"classes": "asset:imagenet-classes", "classifier": "asset:efficientnet-lite0", "k": 16,
     "max_label_tokens": 4}
A saved model replaces the asset references by the table sizes (``portable_spec``); the classifier and
the label table are among its weights.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.classwords import emitted, read_lemma_file, read_wnids
from tokenspace.models.options import LABEL_FRAGMENT_KEYS, check_keys
from tokenspace.models.tagger import load_classifier_head
from tokenspace.models.towers import resolve_weights


def label_token_table(tokenizer, wnids, lemmas, max_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [classes, max_tokens] padded with 0, lengths [classes]): each class's first lemma's pieces."""
    ids = torch.zeros(len(wnids), max_tokens, dtype=torch.long)
    lens = torch.zeros(len(wnids), dtype=torch.long)
    for c, wnid in enumerate(wnids):
        word = lemmas[wnid][0]
        pieces = [i for t, i in zip(tokenizer.tokenize(word), tokenizer.token_ids(word)) if emitted(t)]
        pieces = (pieces or tokenizer.token_ids(word))[:max_tokens]
        if not pieces:
            raise ValueError(f"class {wnid} ({word!r}) has no tokens in the vocabulary")
        ids[c, : len(pieces)] = torch.tensor(pieces)
        lens[c] = len(pieces)
    return ids, lens


class LabelFragments(nn.Module):
    def __init__(self, spec: dict, in_channels: int, width: int, tokenizer):
        super().__init__()
        check_keys(spec, LABEL_FRAGMENT_KEYS, "visualsparta extra.label_fragments")  # a typo is no default
        self.k = int(spec.get("k", 16))
        self.max_label_tokens = int(spec.get("max_label_tokens", 4))
        if self.k < 1 or self.max_label_tokens < 1:
            raise ValueError("label_fragments k and max_label_tokens must be >= 1")
        if spec.get("classes"):
            folder = resolve_weights(spec["classes"])
            ids, lens = label_token_table(tokenizer, read_wnids(folder), read_lemma_file(folder),
                                          self.max_label_tokens)
            if self.k > int(lens.sum()):
                raise ValueError(f"label_fragments k={self.k} exceeds the {int(lens.sum())} label tokens of all classes")
        elif spec.get("n_classes"):  # a saved model: the table comes with the weights
            ids = torch.zeros(int(spec["n_classes"]), self.max_label_tokens, dtype=torch.long)
            lens = torch.ones(int(spec["n_classes"]), dtype=torch.long)
        else:
            raise ValueError("label_fragments needs `classes` (e.g. asset:imagenet-classes)")
        self.register_buffer("label_ids", ids)  # [classes, max_label_tokens]
        self.register_buffer("label_len", lens)  # [classes]
        self.classifier = nn.Linear(in_channels, len(ids))
        if spec.get("classifier"):
            self.classifier.load_state_dict(load_classifier_head(spec["classifier"], len(ids), in_channels))
        self.classifier.requires_grad_(False)  # the "detector": its labels are inputs, not learned
        self.position = nn.Parameter(torch.randn(self.k, width) * 0.02)  # E_pos
        self.segment = nn.Parameter(torch.zeros(width))  # E_seg: "this fragment is a label token"
        self.norm = nn.LayerNorm(width)

    def label_tokens(self, cells: torch.Tensor) -> torch.Tensor:
        """[B, L, C] grid cells -> [B, k] token ids: the labels of the most confident classes, in order."""
        with torch.no_grad():
            best = self.classifier(cells).softmax(-1).amax(dim=1)  # [B, classes]: best cell per class
            top = best.topk(min(self.k, best.shape[-1]), dim=-1).indices  # [B, k]: labels have >= 1 token
            toks = self.label_ids[top]  # [B, k, T]
            valid = torch.arange(toks.shape[-1], device=toks.device) < self.label_len[top][..., None]
            valid = valid.flatten(1)  # [B, k*T]
            keep = valid & (valid.cumsum(1) <= self.k)  # the first k real tokens of the ranking
            return toks.flatten(1)[keep].view(len(cells), self.k)

    def forward(self, cells: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """[B, L, C] -> E_label [B, k, width] (eqs. 6-7)."""
        ids = self.label_tokens(cells)
        return self.norm(word_embeddings[ids] + self.position + self.segment)

    def portable_spec(self) -> dict:
        return {"k": self.k, "max_label_tokens": self.max_label_tokens, "n_classes": len(self.label_ids),
                "classes": None, "classifier": None}
