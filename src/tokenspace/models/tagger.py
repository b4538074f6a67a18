"""Tagger: a training-free sparse model from the backbone's own ImageNet classifier.

    p_j   = softmax(W_fc h_j + b_fc)              class probabilities of grid cell j (EfficientNet-Lite0's
                                                  classifier head, applied per cell; [B, cells, 1000])
    e_j   = top_k(p_j) @ T                        token evidence: T[c, u] = decay^level of token u among the
                                                  WordPieces of class c's WordNet lemmas and hypernyms
    image = log(1 + scale * max_j e_j)            [B, V]; ``pool: image`` uses the whole-image classifier
                                                  (the mean of the cells, as the network was trained),
                                                  ``both`` the elementwise max of the two

Text side (``extra.text``): ``splade`` = SPLADE-tiny's own MLM expansion, log(1 + ReLU(max_j MLM_j))
(the text tower STAIR starts from), or ``bag`` = the bag of the query's tokens (no text encoder).
Both rows are L2-normalised, so the index's dot product is the cosine. Nothing here is trained: the
model is a photo baseline needing no image-text pairs. It is not a paper model; see docs/results.md.

Config ``extra`` (``TaggerOptions``, models/options.py):
    classes: "asset:imagenet-classes"   wnids in classifier order (None in a saved folder)
    wordnet: "asset:wordnet" | None     WordNet dict folder (hypernyms); None: level 0 only, from
                                        the lemma list beside the wnids
    classifier: "asset:efficientnet-lite0"  where the classifier head (`_fc`) is read from
    hypernym_levels (2), hypernym_decay (1.0), name_pieces (1.0), hypernym_pieces (1.0), specificity (0.0)
    (classwords.token_table: the weights of words held only as pieces and of words many classes share),
    pool ("cells"), top_classes (5), scale (1.0),
    text ("splade" | "bag"), table_tokens (set on save: how many tokens the class table covers)
A saved folder holds the classifier head and the class -> token table among its weights, so it
rebuilds from its own files (``from_pretrained``) with neither asset installed.
"""
from __future__ import annotations

import torch
from torch import nn

from tokenspace.models.classwords import (
    NounGraph,
    class_words,
    emitted_mask,
    read_lemma_file,
    read_wnids,
    token_table,
)
from tokenspace.models.dual import DualEncoder
from tokenspace.models.maxproj import max_projection
from tokenspace.models.options import TaggerOptions
from tokenspace.models.pooling import grid_to_cells
from tokenspace.models.towers import TEXT_TOWERS, TextTower, register, resolve_weights


@register(TEXT_TOWERS, "bag-of-tokens")
class BagOfTokensTower(TextTower):
    """No network: the query is its set of tokens (the tagger's text-encoder-free side)."""

    def __init__(self, vocab_size: int = 30522):
        super().__init__()
        self.vocab_size = int(vocab_size)
        self.hidden_size = 0

    def forward(self, input_ids, attention_mask):
        raise TypeError("the bag-of-tokens tower has no hidden states: its text vector is the token set")


def load_classifier_head(ref: str, n_classes: int, n_features: int) -> dict[str, torch.Tensor]:
    """The ImageNet classifier (``_fc``) of an EfficientNet .pth (a file or an asset folder holding one)."""
    path = resolve_weights(ref)
    if path.is_dir():
        found = sorted(path.glob("**/*.pth"))
        if not found:
            raise FileNotFoundError(f"no .pth weights under {path}")
        path = found[0]
    sd = torch.load(path, map_location="cpu", weights_only=True)
    if "_fc.weight" not in sd:
        raise ValueError(f"{path} has no classifier head (_fc.weight)")
    w, b = sd["_fc.weight"], sd["_fc.bias"]
    if w.shape != (n_classes, n_features):
        raise ValueError(f"{path}: classifier is {tuple(w.shape)}, expected ({n_classes}, {n_features}): "
                         "the class list and the classifier must match")
    return {"weight": w.float(), "bias": b.float()}


def build_class_table(tokenizer, classes_ref: str, wordnet_ref: str | None, levels: int, decay: float,
                      name_pieces: float = 1.0, hypernym_pieces: float = 1.0, specificity: float = 0.0):
    """(token_ids [U], table [classes, U]) from the class list and (optionally) WordNet
    (classwords.token_table: the rules for word pieces and for words many classes share)."""
    if levels < 0:
        raise ValueError(f"hypernym_levels must be >= 0, not {levels}")
    folder = resolve_weights(classes_ref)
    wnids = read_wnids(folder)
    graph = NounGraph.from_dict_dir(resolve_weights(wordnet_ref)) if wordnet_ref else None
    lemma_file = None if graph is not None else read_lemma_file(folder)
    return token_table(class_words(wnids, levels, graph, lemma_file), tokenizer, decay, name_pieces,
                       hypernym_pieces, specificity)


class TaggerModel(DualEncoder):
    family = "tagger"
    similarity_fn_name = "cosine"
    Options = TaggerOptions

    def __init__(self, config, vocab, tokenizer_vocab=None):
        super().__init__(config, vocab, tokenizer_vocab)
        opts = config.options  # TaggerOptions (models/options.py): unknown keys and bad values refused
        self.pool, self.text_side, self.top_classes, self.scale = opts.pool, opts.text, opts.top_classes, opts.scale
        if self.text_tower.vocab_size != len(vocab):
            raise ValueError(f"text tower has {self.text_tower.vocab_size} tokens but the vocabulary {len(vocab)}")
        if (self.text_side == "bag") != isinstance(self.text_tower, BagOfTokensTower):
            raise ValueError(f"tagger text {self.text_side!r} needs text_tower type "
                             f"{'bag-of-tokens' if self.text_side == 'bag' else 'bert-mlm'}")
        if opts.classes:
            ids, table = build_class_table(self.tokenizer, opts.classes, opts.wordnet, opts.hypernym_levels,
                                           opts.hypernym_decay, opts.name_pieces, opts.hypernym_pieces,
                                           opts.specificity)
            ids, table = torch.from_numpy(ids), torch.from_numpy(table)
        elif opts.table_tokens:  # a saved folder: the table's values come with the weights
            n = opts.table_tokens
            ids, table = torch.zeros(n, dtype=torch.long), torch.zeros(opts.n_classes, n)
        else:
            raise ValueError("tagger config needs extra.classes (e.g. asset:imagenet-classes)")
        c, n_classes = self.image_tower.out_channels, table.shape[0]
        self.classifier = nn.Linear(c, n_classes)  # the backbone's ImageNet head, applied per cell
        if opts.classifier:
            self.classifier.load_state_dict(load_classifier_head(opts.classifier, n_classes, c))
        self.register_buffer("token_ids", ids)  # [U] vocabulary ids of the table's columns
        self.register_buffer("class_tokens", table)  # [classes, U]
        # which vocabulary entries the text side may emit (specials, punctuation, function words: no)
        keep = torch.tensor(emitted_mask(tuple(vocab.tokens)))
        self.register_buffer("output_mask", keep.float(), persistent=False)

    # ------------------------------------------------------------------ image side
    def _sparse_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax, then only each row's ``top_classes`` most probable classes keep their probability."""
        p = logits.softmax(-1)
        if self.top_classes < p.shape[-1]:
            top = p.topk(self.top_classes, dim=-1)
            p = torch.zeros_like(p).scatter(-1, top.indices, top.values)
        return p

    def class_evidence(self, grid: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> per-cell token evidence over the table's tokens [B, h*w, U] (cells pool)."""
        return self._sparse_probs(self.classifier(grid_to_cells(grid))) @ self.class_tokens

    def _evidence(self, grid: torch.Tensor) -> torch.Tensor:  # [B, U] before the log
        parts = []
        if self.pool in ("cells", "both"):
            parts.append(self.class_evidence(grid).amax(dim=1))
        if self.pool in ("image", "both"):
            whole = self.classifier(grid_to_cells(grid).mean(dim=1))  # = the network's own logits
            parts.append(self._sparse_probs(whole) @ self.class_tokens)
        return parts[0] if len(parts) == 1 else torch.maximum(*parts)

    def confidence(self, grid: torch.Tensor) -> torch.Tensor:
        """[B]: the whole-image classifier's top class probability (high on photos of its classes, low on
        drawings, icons and other pictures it was not trained on): what a fused model's gate reads."""
        return self.classifier(grid_to_cells(grid).mean(dim=1)).softmax(-1).amax(dim=-1)

    def _scatter(self, x: torch.Tensor) -> torch.Tensor:  # [..., U] -> [..., V]
        out = x.new_zeros(*x.shape[:-1], len(self.vocab))
        # a scatter, not out[..., ids] = x: that index_put exports to an ONNX graph the runtime rejects
        return out.scatter(-1, self.token_ids.expand_as(x), x)

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:
        return self._scatter(torch.log1p(self.scale * self._evidence(grid)))  # [B, V]

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor:
        """Per-cell scores [B, h*w, V] with log(1 + ReLU(score)) = the cell's token weight (heatmaps)."""
        return self._scatter(self.scale * self.class_evidence(grid))

    # ------------------------------------------------------------------ text side
    def text_embed(self, input_ids, attention_mask) -> torch.Tensor:
        if self.text_side == "bag":
            valid = attention_mask.float()
            out = torch.zeros(input_ids.shape[0], len(self.vocab), device=input_ids.device)
            return out.scatter_reduce(1, input_ids, valid, reduce="amax", include_self=True) * self.output_mask
        t = self.text_tower
        h = t.mlm_transform(t(input_ids, attention_mask))  # [B, L, H]
        best = max_projection(h, t.word_embeddings, t.mlm_bias, attention_mask, torch.float32)  # [B, V]
        return torch.log1p(torch.relu(best)) * self.output_mask

    # ------------------------------------------------------------------ persistence
    def portable_config(self):
        cfg = super().portable_config()
        cfg.extra = {**cfg.extra, "classes": None, "wordnet": None, "classifier": None,
                     "table_tokens": int(self.token_ids.numel()), "n_classes": int(self.class_tokens.shape[0])}
        return cfg

    def class_tokens_of(self, c: int) -> list[str]:
        """The tokens class ``c`` emits (heaviest first): what the tagger says for that class."""
        row = self.class_tokens[c]
        nz = row.nonzero().flatten()
        order = nz[row[nz].argsort(descending=True, stable=True)]
        return [self.vocab.tokens[int(self.token_ids[j])] for j in order]

