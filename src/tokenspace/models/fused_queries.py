"""The text side of a fused model (the release model) or a STAIR model in numpy: its queries without torch.

A search spends its time encoding the query: the release model's text side is a two-layer, 128-wide BERT,
its MLM head tied to the 30,522 word embeddings, the lexical anchor and the query filter
(models/fused.py, models/stair.py, models/query_filter.py). In torch one query's text side took 25 ms of
the service's CPU (benchmarks/serve_load.py), much of it per call: module calls, the eval() walk of every
submodule, the filter's float16 table converted to float32 on every call, torch's thread pool. The same
arithmetic in numpy, the float16 tables converted once at load, the vocabulary product over the real
(unpadded) positions only and the filter over the ~50-100 tokens the expansion adds, is the same vector to
1e-5 (tests/models/test_fused_queries.py) for 40% of that CPU alone and a tenth in batches of 15, and a
search with the release model then needs no torch at all (query_table.py does the same for an
inference-free model).

    q = FusedQueries.from_folder("models/tokenspace-stair-drawings").encode_text(["a red car"])

``FusedQueries.from_model(model)`` reads a loaded model's weights instead (a search session given a
model in code). What this module does not reproduce (another text tower, a tagger's text side with a
weight, an option it does not know) is refused with ``Unsupported``: the caller keeps the torch model.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tokenspace.models.classwords import emitted
from tokenspace.models.texts import as_texts
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary, WordPieceTokenizer

# the options of models/options.py whose effect on the text side this module reproduces; a config with
# any other key is refused rather than encoded differently
FUSED_KEYS = frozenset({"parts", "anchor", "image_top_n", "text_top_n", "related_min", "related_dim", "gate"})
STAIR_KEYS = frozenset({"image_head_mid", "image_bias_init", "image_revive_grad", "image_top_n", "text_top_n"})
BERT_KEYS = frozenset({"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id",
                       "hidden_dropout_prob", "attention_probs_dropout_prob", "position_embedding_type",
                       "initializer_range"})


VOCAB_BLOCK = 2048  # tokens per block of the vocabulary product (see _StairText.__call__)


def one_blas_thread() -> None:
    """numpy's BLAS on one thread, for a process that encodes queries with this numpy text side (the
    service, and a text search from the command line). Why: its products are small, and OpenBLAS's pool
    spins on the cores between calls: serving distinct queries of the release model with 2 BLAS threads
    spent more CPU spinning than encoding (benchmarks/serve_load.py's "pools" column), and on a busy 2-core
    machine one query took 0.12 s with two threads and 0.01 s with one (2026-11-28). Needs threadpoolctl
    (scikit-learn's, so the models extra has it); without it, as is."""
    try:
        from threadpoolctl import threadpool_limits  # optional: models (scikit-learn brings it)
    except ImportError:
        return
    threadpool_limits(1, user_api="blas")


class Unsupported(ValueError):
    """A model whose text side this module does not reproduce (the caller keeps the torch model)."""


def _gelu(x: np.ndarray) -> np.ndarray:  # the exact (erf) form, transformers' "gelu"
    # scipy.special on first use: its import (0.1-0.2 s) is paid by a search whose model runs this
    # activation, not by every importer of this module (an inference-free model's search is one)
    from scipy.special import erf

    return (x * np.float32(0.5) * (np.float32(1.0) + erf(x * np.float32(1 / np.sqrt(2))))).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(np.sqrt(2 / np.pi))
    return (np.float32(0.5) * x * (np.float32(1) + np.tanh(c * (x + np.float32(0.044715) * x ** 3)))).astype(np.float32)


ACTIVATIONS = {"gelu": _gelu, "gelu_new": _gelu_tanh, "gelu_pytorch_tanh": _gelu_tanh,
               "relu": lambda x: np.maximum(x, np.float32(0))}


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    d = x - mean
    var = (d * d).mean(-1, keepdims=True)
    return d / np.sqrt(var + np.float32(eps)) * w + b


def _unit(w: np.ndarray) -> np.ndarray:
    """A row's weights / their L2 norm (at least 1e-12), as models/fused.py's ``_unit``."""
    return w / np.float32(max(float(np.sqrt(np.dot(w, w))), 1e-12))


def _weighted_sum(rows: list[tuple[float, tuple[np.ndarray, np.ndarray]]]) -> tuple[np.ndarray, np.ndarray]:
    """sum_k w_k x unit(row_k) of sparse rows (sorted dims, weights), in the parts' order (as torch adds)."""
    dims = np.unique(np.concatenate([r[0] for _, r in rows]))
    out = np.zeros(len(dims), np.float32)
    for w, (d, v) in rows:
        out[np.searchsorted(dims, d)] += np.float32(w) * _unit(v)
    return dims, out


class _StairText:
    """A STAIR part's text side: BERT -> MLM transform -> max over positions of h . e + b -> log(1 + ReLU),
    bracketed tokens never emitted (models/stair.py ``text_embed``, without ``restrict_to_input``)."""

    def __init__(self, get, prefix: str, bert: Mapping, vocab: Vocabulary):
        cfg = dict(bert)
        unknown = set(cfg) - BERT_KEYS
        if unknown or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise Unsupported(f"a BERT config this module does not reproduce: {sorted(unknown) or cfg}")
        act = cfg.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise Unsupported(f"BERT activation {act!r}")
        self.act = ACTIVATIONS[act]
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.heads = int(cfg.get("num_attention_heads", 12))
        t = prefix + "text_tower."
        b = t + "bert."
        self.word = get(b + "embeddings.word_embeddings.weight")  # [V, H]
        self.hidden = self.word.shape[1]
        if self.hidden % self.heads:
            raise Unsupported(f"hidden size {self.hidden} is not a multiple of {self.heads} heads")
        # word + token type 0, then + position: transformers' order of the sums
        self.type0 = get(b + "embeddings.token_type_embeddings.weight")[0]
        self.position = get(b + "embeddings.position_embeddings.weight")
        self.emb_ln = (get(b + "embeddings.LayerNorm.weight"), get(b + "embeddings.LayerNorm.bias"))
        self.layers = []
        n_layers = int(cfg.get("num_hidden_layers", 12))
        for i in range(n_layers):
            p = f"{b}encoder.layer.{i}."
            lin = lambda name: (np.ascontiguousarray(get(p + name + ".weight").T), get(p + name + ".bias"))  # noqa: E731
            self.layers.append({
                "q": lin("attention.self.query"), "k": lin("attention.self.key"), "v": lin("attention.self.value"),
                "o": lin("attention.output.dense"),
                "o_ln": (get(p + "attention.output.LayerNorm.weight"), get(p + "attention.output.LayerNorm.bias")),
                "i": lin("intermediate.dense"), "out": lin("output.dense"),
                "out_ln": (get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias")),
            })
        self.mlm = (np.ascontiguousarray(get(t + "mlm_transform.dense.weight").T), get(t + "mlm_transform.dense.bias"))
        self.mlm_ln = (get(t + "mlm_transform.LayerNorm.weight"), get(t + "mlm_transform.LayerNorm.bias"))
        self.mlm_bias = get(t + "mlm_bias")
        word_t = self.word.T  # [H, V]: the tied head's product, in contiguous blocks of tokens
        self.word_blocks = [np.ascontiguousarray(word_t[:, a:a + VOCAB_BLOCK])
                            for a in range(0, word_t.shape[1], VOCAB_BLOCK)]
        # bracketed tokens ([CLS], [unused0], ...) are never emitted (STAIR's output mask)
        self.keep = np.array([not (tok.startswith("[") and tok.endswith("]")) for tok in vocab.tokens])

    def hidden_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """[B, L] -> [B, L, H] (padded keys masked out of attention, as the torch tower does)."""
        B, L = ids.shape
        if L > len(self.position):
            raise ValueError(f"{L} tokens exceed the model's {len(self.position)} positions")
        x = (self.word[ids] + self.type0) + self.position[:L][None]
        x = _layer_norm(x, *self.emb_ln, self.eps)
        H, h = self.hidden, self.heads
        d = H // h
        scale = np.float32(d ** -0.5)
        # padded keys get -inf: exp() makes their weight exactly 0, as sdpa's boolean mask does
        key_bias = np.where(mask.astype(bool), np.float32(0), np.float32(-np.inf))[:, None, None, :]  # [B,1,1,L]
        for layer in self.layers:
            flat = x.reshape(B * L, H)
            split = lambda w: (flat @ w[0] + w[1]).reshape(B, L, h, d).transpose(0, 2, 1, 3)  # noqa: E731
            q, k, v = split(layer["q"]), split(layer["k"]), split(layer["v"])
            s = (q @ k.transpose(0, 1, 3, 2)) * scale + key_bias  # [B, h, L, L]
            s = np.exp(s - s.max(-1, keepdims=True))
            a = (s / s.sum(-1, keepdims=True)) @ v  # [B, h, L, d]
            a = a.transpose(0, 2, 1, 3).reshape(B * L, H)
            a = _layer_norm(a @ layer["o"][0] + layer["o"][1] + flat, *layer["o_ln"], self.eps)
            f = self.act(a @ layer["i"][0] + layer["i"][1])
            x = _layer_norm(f @ layer["out"][0] + layer["out"][1] + a, *layer["out_ln"], self.eps).reshape(B, L, H)
        return x

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """[B, L] -> each row's non-zeros as (sorted token ids, float32 weights)."""
        x = self.hidden_states(ids, mask)
        valid = mask.astype(bool)
        h = x[valid]  # [n, H]: the real positions of every row, row after row (padding never wins a max)
        h = _layer_norm(self.act(h @ self.mlm[0] + self.mlm[1]), *self.mlm_ln, self.eps)
        counts = valid.sum(1)
        ends = np.cumsum(counts)
        B = len(ids)
        best = np.empty((B, len(self.mlm_bias)), np.float32)
        buf = np.empty((len(h), VOCAB_BLOCK), np.float32)
        # h . e for every position and token, a block of tokens at a time: a [n, V] product would be
        # 13.7 MB for 16 queries (new pages to fault in on every call) and read back for the max; a block
        # stays in cache. One product per block for the whole batch: the embeddings are read once per call
        for a, block in zip(range(0, len(self.mlm_bias), VOCAB_BLOCK), self.word_blocks):
            out = np.matmul(h, block, out=buf[:, :block.shape[1]])
            for r in range(B):
                np.max(out[ends[r] - counts[r]:ends[r]], axis=0, out=best[r, a:a + block.shape[1]])
        best += self.mlm_bias
        rows = []
        for r in range(B):
            dims = np.flatnonzero((best[r] > 0) & self.keep)  # log(1 + ReLU) is 0 elsewhere
            rows.append((dims, np.log1p(best[r, dims])))
        return rows


class FusedQueries:
    """A fused (or STAIR) model's query side: ``vocab``, ``tokenizer``, ``encode_text`` / ``encode_query``
    (-> SparseBatch, the rows ``model.encode_text`` returns), what a search session asks of a model for
    text queries. Build one with ``from_folder`` or ``from_model``."""

    sparse = True

    def __init__(self, config: Mapping, state, vocab: Vocabulary, tokenizer: WordPieceTokenizer | None = None):
        """``config``: the model's portable config (config.json); ``state``: name -> array (a safetensors
        file or a state dict), read for the text side's weights only."""
        def get(name):
            try:
                return np.asarray(state[name], dtype=np.float32)
            except KeyError:
                raise Unsupported(f"the weights hold no {name}") from None

        self.family = config.get("family")
        self.vocab = vocab
        self.tokenizer = tokenizer or WordPieceTokenizer(vocab, max_length=int(config.get("max_text_len", 32)))
        self.similarity_fn_name = "cosine"
        extra = dict(config.get("extra") or {})
        self.config = config
        if self.family == "stair":
            _known(extra, STAIR_KEYS, "stair")
            self.parts = [(1.0, _stair_text(config, get, "", vocab))]
            self.anchor, self.related_min, self.fused = 0.0, None, False
        elif self.family == "fused":
            _known(extra, FUSED_KEYS, "fused")
            self.parts = []
            for i, part in enumerate(extra.get("parts") or ()):
                w = float(part.get("text", 0.0))
                model = part.get("model")
                if not w:
                    continue  # a part with text weight 0 adds nothing to the text side
                if not isinstance(model, Mapping) or model.get("family") != "stair":
                    raise Unsupported(f"fused part {i}: only a STAIR part's text side is reproduced here")
                _known(dict(model.get("extra") or {}), STAIR_KEYS, "stair")
                self.parts.append((w, _stair_text(model, get, f"parts.{i}.", vocab)))
            self.anchor = float(extra.get("anchor", 0.0))
            self.related_min = extra.get("related_min")
            self._content: dict[int, bool] = {}  # token id -> emitted(token), filled as queries ask (is_content)
            if self.related_min is not None:
                self.related_min = float(self.related_min)
                self.drop = get("expansion_drop") != 0  # [V]: query hubs and lone word pieces
                self.related = get("related")  # [V, d], stored in float16: converted once, here
            self.fused = True
        else:
            raise Unsupported(f"a {self.family} model's text side is not reproduced here")
        self.text_top_n = extra.get("text_top_n")

    # ------------------------------------------------------------------ building
    @classmethod
    def from_folder(cls, folder) -> FusedQueries:
        """From a saved model folder (config.json, model.safetensors, vocab.txt): numpy and safetensors."""
        from safetensors import safe_open  # start-up: read once, here

        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("family") not in ("fused", "stair"):
            raise Unsupported(f"a {config.get('family')} model's text side is not reproduced here")
        vocab = Vocabulary.from_file(folder / (config.get("vocab") or "vocab.txt"))
        with safe_open(str(folder / "model.safetensors"), "np") as f:
            keys = set(f.keys())
            state = {k: f.get_tensor(k) for k in keys if _text_side(k)}
        return cls(config, state, vocab)

    @classmethod
    def from_model(cls, model) -> FusedQueries:
        """From a loaded model (its weights as they are now; a later change to the model is not seen)."""
        state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items() if _text_side(k)}
        return cls(model.portable_config().to_dict(), state, model.vocab, model.tokenizer)

    # ------------------------------------------------------------------ encoding
    def expansion(self, ids: np.ndarray, mask: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """[B, L] ids -> each row's expansion as (sorted dims, weights): the parts' weighted unit text
        vectors before the query filter (a STAIR model: its text vector)."""
        if not self.fused:
            return self.parts[0][1](ids, mask)
        per_part = [(w, part(ids, mask)) for w, part in self.parts]
        return [_weighted_sum([(w, rows[r]) for w, rows in per_part]) for r in range(len(ids))]

    def encode_ids(self, ids: np.ndarray, mask: np.ndarray) -> SparseBatch:
        """[B, L] ids -> the rows ``encode_text`` returns: the model's ``text_embed``, each row's
        ``text_top_n`` heaviest (ties: lower id first, as models/pooling.keep_top), L2-normalised.

        A fused row is finished on its non-zeros: the anchor's tokens (the text's own content pieces)
        and the ~50-100 tokens the parts add, so the query filter compares only those with the text's
        words instead of all 30,522 (models/query_filter.on_topic: the same test, token by token)."""
        expansion = self.expansion(ids, mask) if self.parts else None
        indptr, indices, values = [0], [], []
        for r in range(len(ids)):
            if self.fused:
                dims, w = self._fused_row(ids[r], mask[r], None if expansion is None else expansion[r])
            else:
                dims, w = expansion[r]
            if self.text_top_n and len(w) > self.text_top_n:
                keep = np.sort(np.argsort(-w, kind="stable")[: self.text_top_n])
                dims, w = dims[keep], w[keep]
            w = _unit(w).astype(np.float32)
            indices.append(dims)
            values.append(w)
            indptr.append(indptr[-1] + len(dims))
        return SparseBatch(np.asarray(indptr), np.concatenate(indices), np.concatenate(values), len(self.vocab),
                           self.vocab)

    def _fused_row(self, ids: np.ndarray, mask: np.ndarray, expansion: tuple[np.ndarray, np.ndarray] | None):
        """One text's fused vector as (sorted dims, weights): anchor x unit(own) + expansion x on_topic."""
        real = ids[mask.astype(bool)]
        content = real[self.is_content(real)]  # the text's own content word pieces, with repeats
        own = np.unique(content)
        if self.anchor and len(own):
            # unit(own): 1 / sqrt(n) on each of its n tokens, in float32 as torch divides
            own_w = np.full(len(own), np.float32(self.anchor) * (np.float32(1) / np.sqrt(np.float32(len(own)))),
                            np.float32)
        else:
            own_w = np.zeros(len(own), np.float32)
        if expansion is None:
            keep_own = own_w > 0
            return own[keep_own], own_w[keep_own]
        cand, cand_w = expansion
        keep = cand_w > 0
        cand, cand_w = cand[keep], cand_w[keep]
        if self.related_min is not None:
            is_own = np.isin(cand, own, assume_unique=True)
            ok = is_own.copy()
            test = np.flatnonzero(~is_own & ~self.drop[cand])
            if len(test) and len(content):
                sims = self.related[cand[test]] @ self.related[content].T  # [n, content positions]
                ok[test] = sims.max(1) >= np.float32(self.related_min)
            cand, cand_w = cand[ok], cand_w[ok]
        dims = np.union1d(own, cand)
        w = np.zeros(len(dims), np.float32)
        w[np.searchsorted(dims, own)] = own_w
        w[np.searchsorted(dims, cand)] += cand_w
        keep = w > 0
        return dims[keep], w[keep]

    def is_content(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id's token is a content word piece (classwords.emitted, the lexical anchor's
        test), remembered per token: a query asks about its own dozen tokens, and the mask of all 30,522
        at load (classwords.emitted_mask) cost a one-query search 0.05-0.1 s."""
        tokens, known = self.tokenizer.vocab.tokens, self._content
        out = np.empty(len(ids), bool)
        for j, i in enumerate(ids.tolist()):
            hit = known.get(i)
            if hit is None:
                hit = known[i] = emitted(tokens[i])
            out[j] = hit
        return out

    def encode_text(self, texts: str | Sequence[str], batch_size: int = 256, **_) -> SparseBatch:
        """One text or a list -> one row each (models/dual.py ``encode_text``; the same errors)."""
        texts, _ = as_texts(texts)
        if not texts:
            return SparseBatch.empty(0, len(self.vocab), self.vocab)
        outs = []
        for s in range(0, len(texts), batch_size):
            outs.append(self.encode_ids(*self.tokenizer.encode(texts[s:s + batch_size])))
        return outs[0] if len(outs) == 1 else SparseBatch.concat(outs)

    encode_query = encode_text

    def to(self, device):  # a search session moves its model; numpy has nowhere to go
        return self


def _text_side(key: str) -> bool:
    """Whether a weight's name is read by the text side (the image tower's hundreds are not)."""
    return ".text_tower." in f".{key}" or key in ("related", "expansion_drop")


def _known(extra: Mapping, keys: frozenset, family: str) -> None:
    unknown = sorted(set(extra) - keys)
    if unknown:
        raise Unsupported(f"{family} option {unknown[0]!r} is not reproduced here")


def _stair_text(config: Mapping, get, prefix: str, vocab: Vocabulary) -> _StairText:
    tower = config.get("text_tower") or {}
    if tower.get("type") != "bert-mlm" or not isinstance(tower.get("config"), Mapping):
        raise Unsupported(f"text tower {tower.get('type')!r} (only a bert-mlm tower from its config)")
    return _StairText(get, prefix, tower["config"], vocab)
