"""A BERT encoder in plain torch, for loading a saved model without importing transformers.

Importing ``transformers`` to build ``BertForMaskedLM`` costs about two seconds (its model base class
pulls in torch.distributed, dynamo, scipy.optimize and the generation utilities), while the release
model's text side is a two-layer, 128-wide BERT whose weights take milliseconds to read. A saved
folder's bert-mlm tower is built from its config alone (the weights arrive with the outer
model.safetensors), so nothing of transformers is needed to rebuild it: this module does it with the
same parameter names (``embeddings.word_embeddings.weight``, ``encoder.layer.0.attention.self.query
.weight``, ...), so the same state dict loads into either, and the same arithmetic (post-LN blocks,
absolute positions, token type 0, scaled dot-product attention with padded keys masked).

``LightBertModel.config`` returns a real ``transformers.BertConfig`` on demand (importing it then), for
the code that hands the weights back to transformers (save_pretrained's portable config, export-st).
Configs this module does not cover (another position embedding type, an activation it does not know)
are refused by ``supported``; the tower then builds transformers' model instead.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # transformers' "gelu" is the exact (erf) form
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}
# BertConfig's defaults for the fields a tokenspace config may leave out
DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
            "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
            "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
            "position_embedding_type": "absolute"}
# keys of a BertConfig dict that change nothing in the encoder's arithmetic at inference
_NEUTRAL = {"architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
            "classifier_dropout", "gradient_checkpointing", "is_decoder", "add_cross_attention",
            "bos_token_id", "eos_token_id", "tie_word_embeddings", "_name_or_path", "chunk_size_feed_forward"}


def supported(config: dict) -> bool:
    """Whether this module reproduces transformers' BertModel for ``config`` (else build transformers')."""
    unknown = set(config) - set(DEFAULTS) - _NEUTRAL
    cfg = {**DEFAULTS, **config}
    return (not unknown and cfg["hidden_act"] in _ACTIVATIONS and cfg["position_embedding_type"] == "absolute"
            and not cfg.get("is_decoder") and not cfg.get("add_cross_attention")
            and cfg["hidden_size"] % cfg["num_attention_heads"] == 0)


class _Embeddings(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"], padding_idx=c["pad_token_id"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        L = input_ids.shape[1]
        if not torch.jit.is_tracing() and L > self.position_embeddings.num_embeddings:
            raise ValueError(f"{L} tokens exceed the model's {self.position_embeddings.num_embeddings} positions")
        positions = torch.arange(L, device=input_ids.device)
        # transformers' order of the sums (float addition is not associative); every token is of type 0
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(torch.zeros_like(input_ids))
        x = x + self.position_embeddings(positions)[None]
        return self.dropout(self.LayerNorm(x))


class _SelfAttention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        h = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.head_dim = h // self.heads  # a Python int: a traced graph keeps the scale as a constant
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.dropout_p = c["attention_probs_dropout_prob"]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, L, H = x.shape
        d = self.head_dim
        split = lambda t: t.view(B, L, self.heads, d).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        # the scale as transformers passes it (d ** -0.5, not sdpa's own 1 / sqrt(d)): the same last bit
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=d ** -0.5,
                                             dropout_p=self.dropout_p if self.training else 0.0)
        return out.transpose(1, 2).reshape(B, L, H)


class _DenseNorm(nn.Module):
    """dense -> dropout -> LayerNorm(. + residual): BertSelfOutput and BertOutput."""

    def __init__(self, c: dict, d_in: int):
        super().__init__()
        self.dense = nn.Linear(d_in, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        self.dropout = nn.Dropout(c["hidden_dropout_prob"])

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.self = _SelfAttention(c)  # transformers' parameter name: attention.self.query
        self.output = _DenseNorm(c, c["hidden_size"])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class _Intermediate(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])
        self.act = _ACTIVATIONS[c["hidden_act"]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c, c["intermediate_size"])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class _Encoder(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.layer = nn.ModuleList([_Layer(c) for _ in range(c["num_hidden_layers"])])


class LightBertOutput:
    """What transformers' BertModel returns, as far as the towers read it."""

    def __init__(self, last_hidden_state: torch.Tensor):
        self.last_hidden_state = last_hidden_state


class LightBertModel(nn.Module):
    """transformers' ``BertModel(config, add_pooling_layer=False)`` (as inside ``BertForMaskedLM``)."""

    def __init__(self, config: dict):
        super().__init__()
        if not supported(config):
            raise ValueError(f"LightBertModel does not cover this BERT config: {sorted(config)}")
        self._config = {**DEFAULTS, **config}
        self.embeddings = _Embeddings(self._config)
        self.encoder = _Encoder(self._config)
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        # transformers' initialisation, so a random tower from a config trains as theirs would
        std = self._config["initializer_range"]
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    @property
    def config(self):
        """A transformers BertConfig of this encoder (imports transformers: only exports need it)."""
        from transformers import BertConfig  # start-up: transformers takes seconds; only exports ask for it

        return BertConfig(**self._config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> LightBertOutput:
        x = self.embeddings(input_ids)
        mask = None
        # as transformers does: no mask when nothing is padded (sdpa's kernel without a mask), else a
        # boolean [B, 1, L, L] mask of the keys to attend to. A traced or compiled graph always takes the
        # mask: a branch on the values would be frozen into the graph with the example input's answer.
        tracing = torch.jit.is_tracing() or torch.compiler.is_compiling()
        if attention_mask is not None and (tracing or not bool(attention_mask.bool().all())):
            B, L = input_ids.shape
            mask = attention_mask.bool()[:, None, None, :].expand(B, 1, L, L)
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return LightBertOutput(x)


class LightPredictionTransform(nn.Module):
    """transformers' ``BertPredictionHeadTransform``: dense -> activation -> LayerNorm."""

    def __init__(self, config: dict):
        super().__init__()
        c = {**DEFAULTS, **config}
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.transform_act_fn = _Activation(c["hidden_act"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])
        nn.init.normal_(self.dense.weight, std=c["initializer_range"])
        nn.init.zeros_(self.dense.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class _Activation(nn.Module):
    def __init__(self, name: str):
        super().__init__()
        self.name = name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ACTIVATIONS[self.name](x)

    def extra_repr(self) -> str:
        return self.name

