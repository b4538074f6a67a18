"""DualEncoder: the common shape of every model family (image tower + text tower + heads).

The training loop sees three tensors-in, tensors-out steps:
    image_grid(pixels)   -> [B, C, h, w]   frozen-backbone features (cacheable)
    image_embed(grid)    -> [B, D]         head + pooling
    text_embed(ids, m)   -> [B, D]
Users see batches of images or texts in and a SparseBatch out (``encode_image`` / ``encode_text``),
already in the form the model scores with: for cosine models the rows are L2-normalised, so the
plain dot product that the inverted index computes is the model's similarity.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors.torch import save_model
from torch import nn
from tqdm.auto import tqdm

from tokenspace.atomic import new_file_mode, replace_folder, temp_folder
from tokenspace.data.preprocess import pixels as to_pixels
from tokenspace.models import registry
from tokenspace.models.card import hf_config_keys, render_card, write_tokenizer_files
from tokenspace.models.config import (  # noqa: F401 - the folder file names, re-exported
    CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    ModelConfig,
)
from tokenspace.models.options import FamilyOptions
from tokenspace.models.pooling import keep_top
from tokenspace.models.texts import as_texts
from tokenspace.models.towers import build_image_tower, build_text_tower
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary, WordPieceTokenizer


def _as_matrix(rows) -> torch.Tensor:
    """SparseBatch / torch (dense or sparse) / numpy rows -> a dense float32 [N, D] tensor."""
    if isinstance(rows, SparseBatch):
        return rows.to_torch()
    t = rows.to_dense() if isinstance(rows, torch.Tensor) and rows.is_sparse else torch.as_tensor(rows)
    return (t.unsqueeze(0) if t.dim() == 1 else t).float()


class DualEncoder(nn.Module):
    family: str = ""
    similarity_fn_name: str = "cosine"  # cosine | dot
    sparse: bool = True  # False: encode_* return dense np.ndarray rows (dense baseline only)
    # the typed form of config.extra (models/options.py); the base has none, so any key is refused
    Options: type[FamilyOptions] = FamilyOptions
    # top-n pruning of encoded rows (encode_* only, never training): each row keeps its n heaviest terms
    # before normalising. None keeps every active term; a family sets them from its options
    image_top_n: int | None = None
    text_top_n: int | None = None
    # image sizes whose grid cells image_grid packs side by side (models/fused.py); () = one plain grid.
    # The feature cache keys on it, and the ONNX tower (which runs the plain tower) is not used then
    packed_sizes: tuple[int, ...] = ()

    @classmethod
    def output_vocabulary(cls, config: ModelConfig, tokenizer_vocab: Vocabulary) -> Vocabulary:
        """Names of the output dimensions for a config (registry.build_model asks): the tokenizer's
        vocabulary for token-space models; latent-feature families name their own."""
        return tokenizer_vocab

    def __init__(self, config: ModelConfig, vocab: Vocabulary, tokenizer_vocab: Vocabulary | None = None,
                 build_towers: bool = True):
        """``build_towers=False``: the family provides ``image_tower`` / ``text_tower`` itself instead of
        building them from the config (a sparsified model's are its frozen dense model's)."""
        super().__init__()
        self.config = config
        self.vocab = vocab  # names of the output dimensions
        # the text tokenizer's vocabulary: the same as `vocab` for token-space models
        self.tokenizer = WordPieceTokenizer(tokenizer_vocab or vocab, max_length=config.max_text_len)
        if build_towers:
            self.image_tower = build_image_tower(config.image_tower)
            self.text_tower = build_text_tower(config.text_tower)
        init = torch.tensor(float(np.log(config.logit_scale_init)))
        self.log_logit_scale = nn.Parameter(init)

    # ------------------------------------------------------------------ training-time pieces
    @property
    def logit_scale(self) -> torch.Tensor:
        # the trainer clamps the parameter itself after every step (clamp_logit_scale_); this clamp only
        # guards a parameter set from outside (an old checkpoint). At the cap its gradient still flows
        # (clamp passes it at the boundary), so the scale can come back down
        return self.log_logit_scale.clamp(max=self.config.log_logit_scale_max).exp()

    @torch.no_grad()
    def clamp_logit_scale_(self) -> None:
        """Put the log logit scale back under the cap (Sparse CLIP's sparsity knob) after an optimizer step,
        as open_clip does. A forward clamp alone leaves a parameter that overshot the cap with zero
        gradient for good: it could never come back below the cap."""
        self.log_logit_scale.clamp_(max=self.config.log_logit_scale_max)

    def image_grid(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.image_tower(pixels)

    def image_embed(self, grid: torch.Tensor) -> torch.Tensor:  # [B, C, h, w] -> [B, D]
        raise NotImplementedError

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, L] -> [B, D]. Families with more options declare them (models/capabilities.py:
        RestrictsText adds ``restrict_to_input``); none swallows unknown keywords."""
        raise NotImplementedError

    def normalize(self, emb: torch.Tensor) -> torch.Tensor:
        if self.similarity_fn_name == "cosine":
            return emb / emb.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        return emb

    def score(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
        """[Bi, D] x [Bt, D] -> [Bi, Bt] similarities (before the logit scale)."""
        return self.normalize(image_emb) @ self.normalize(text_emb).T

    def tokenize(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = self.tokenizer.encode(list(texts))
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def preprocess(self, images) -> torch.Tensor:
        t = self.image_tower
        return to_pixels(images, t.image_size, t.pixel_mean, t.pixel_std)

    # ------------------------------------------------------------------ user-facing encoding
    @property
    def device(self) -> torch.device:
        """Where the weights live; ``encode_*`` move their inputs here (``model.to("cuda")``, then encode)."""
        for t in self.parameters():
            return t.device
        return torch.device("cpu")

    @contextmanager
    def _encoding(self, batch_size: int):
        """Inference mode for one encode call, in eval mode (encode leaves the model in eval mode)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.eval()
        with torch.inference_mode():
            yield self.device

    def rows(self, emb: torch.Tensor, top_n: int | None = None) -> torch.Tensor:
        """[B, D] embeddings -> the rows encode_* return, as a float32 tensor: each row's ``top_n``
        heaviest entries (all when None), then normalised (the ONNX graphs end with it too)."""
        if top_n:
            emb = keep_top(emb, top_n)
        return self.normalize(emb).float()

    def _to_output(self, emb: torch.Tensor, top_n: int | None = None):
        emb = self.rows(emb, top_n)
        if self.sparse:
            return SparseBatch.from_torch(emb, vocab=self.vocab)  # the non-zeros alone cross to the CPU
        return emb.cpu().numpy()

    def encode_image(self, images, batch_size: int = 64, progress: bool = False,
                     convert_to_sparse_tensor: bool = False):
        """One image or a list (PIL images or paths) -> SparseBatch, one row per image (open_clip's name).
        ``convert_to_sparse_tensor=True`` returns a torch sparse COO tensor instead, as
        sentence-transformers' SparseEncoder does: [N, D] for a list, [D] for one image. Unreadable files
        raise ImageLoadError; use ``tokenspace.data`` readers to skip and count them over a collection.
        ``model.preprocess``'s [N, 3, H, W] tensor is N images (sliced in batches as a list is); one image's
        [3, H, W] is one."""
        if isinstance(images, torch.Tensor) and images.dim() == 4:
            single = False  # a batch of pixels: its rows are the images, so a sparse tensor keeps all N
        else:
            single = not isinstance(images, (list, tuple))
            images = [images] if single else list(images)
        outs = []
        with self._encoding(batch_size) as device:
            for s in tqdm(range(0, len(images), batch_size), disable=not progress, desc="encode images"):
                pixels = self.preprocess(images[s : s + batch_size]).to(device)  # [b, 3, H, W]
                outs.append(self._to_output(self.image_embed(self.image_grid(pixels)), self.image_top_n))
        return self._finish(outs, len(images), single, convert_to_sparse_tensor)

    def encode_image_grids(self, grids: torch.Tensor | np.ndarray, batch_size: int = 256):
        """Cached backbone features [N, C, h, w] -> encoded rows (the fast path for collections)."""
        outs = []
        with self._encoding(batch_size) as device:
            for s in range(0, len(grids), batch_size):
                g = grids[s : s + batch_size]
                g = g if isinstance(g, torch.Tensor) else torch.from_numpy(np.asarray(g))
                emb = self.image_embed(g.to(device=device, dtype=torch.float32))
                outs.append(self._to_output(emb, self.image_top_n))
        return self._concat(outs, len(grids))

    def encode_text(self, texts: str | Sequence[str], batch_size: int = 256, progress: bool = False,
                    convert_to_sparse_tensor: bool = False):
        """One text or a list -> SparseBatch, one row per text (open_clip's name; ``convert_to_sparse_tensor``
        as in ``encode_image``). Empty texts raise ValueError: an empty caption has no meaning to encode,
        and silently returning a zero row hides data bugs."""
        texts, single = as_texts(texts)
        outs = []
        with self._encoding(batch_size) as device:
            for s in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="encode texts"):
                ids, mask = self.tokenize(texts[s : s + batch_size])  # [b, L] each
                outs.append(self._to_output(self.text_embed(ids.to(device), mask.to(device)), self.text_top_n))
        return self._finish(outs, len(texts), single, convert_to_sparse_tensor)

    def encode_query(self, texts: str | Sequence[str], **kwargs):
        """Search queries -> rows (sentence-transformers' name). Queries are texts, so this is
        ``encode_text``; a family whose query side differs (an inference-free one) overrides it."""
        return self.encode_text(texts, **kwargs)

    def encode_document(self, images, **kwargs):
        """The documents a collection indexes -> rows (sentence-transformers' name): here they are images,
        so this is ``encode_image``."""
        return self.encode_image(images, **kwargs)

    def similarity(self, a, b) -> torch.Tensor:
        """[Na, Nb] similarities of two sets of encoded rows (SparseBatch, torch or numpy), as
        sentence-transformers' ``model.similarity``: the rows ``encode_*`` return are already in the form
        the model scores with (L2-normalised when ``similarity_fn_name`` is "cosine"), so this is their
        dot product, the score the inverted index computes."""
        a, b = _as_matrix(a), _as_matrix(b)
        if a.shape[-1] != b.shape[-1]:
            raise ValueError(f"rows of {a.shape[-1]} and {b.shape[-1]} dimensions cannot be compared")
        return a @ b.T

    def _concat(self, outs, n):
        if self.sparse:
            return SparseBatch.concat(outs) if outs else SparseBatch.empty(0, len(self.vocab), self.vocab)
        return np.concatenate(outs) if outs else np.zeros((0, self.config.embed_dim), np.float32)

    def _finish(self, outs, n: int, single: bool, sparse_tensor: bool):
        out = self._concat(outs, n)
        if sparse_tensor:
            if not self.sparse:
                raise TypeError(f"{self.family} embeddings are dense: there is no sparse tensor to return")
            t = out.to_torch(sparse=True)
            return t[0].coalesce() if single else t
        return out

    def decode(self, rows, top_k: int | None = 20):
        """Top (token, weight) pairs, heaviest first: what the model sees in an image or text. A SparseBatch
        or a 2-D tensor gives one list per row; one vector (a 1-D torch tensor, dense or sparse, as
        ``encode_text("...", convert_to_sparse_tensor=True)`` returns) gives one flat list, as in
        sentence-transformers."""
        if not self.sparse:
            raise TypeError(f"{self.family} embeddings are dense: there are no tokens to decode")
        if isinstance(rows, SparseBatch):
            return self.vocab.decode(rows, top_k=top_k)
        t = rows.to_dense() if isinstance(rows, torch.Tensor) and rows.is_sparse else torch.as_tensor(rows)
        if t.dim() not in (1, 2):
            raise ValueError(f"decode takes a vector or a matrix of rows, got {t.dim()} dimensions")
        decoded = self.vocab.decode(SparseBatch.from_torch(t.reshape(-1, t.shape[-1])), top_k=top_k)
        return decoded[0] if t.dim() == 1 else decoded

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, save_directory: str | os.PathLike, *, push_to_hub: bool = False,
                        card: dict | None = None, dtype=None) -> Path:
        """Write the model folder, atomically (temp + rename): config.json (with ``architectures``; no
        ``model_type``: models/card.py), model.safetensors, vocab.txt, the tokenizer files transformers'
        AutoTokenizer loads, and a README.md model card (``card``: ``models.card.run_info`` of the
        training run, or ``data`` / ``command`` / ``notes``). The keyword names follow transformers';
        ``push_to_hub=True`` is refused: tokenspace never uploads (upload the folder yourself).
        ``dtype`` (e.g. ``torch.float16``) stores the floating-point weights in that type: half the
        bytes for a folder kept in git; ``from_pretrained`` casts them back into the float32 model."""
        if push_to_hub:
            raise ValueError("tokenspace does not upload models: save the folder, then upload it with "
                             "your hub's own client (e.g. `hf upload`)")
        path = Path(save_directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_folder(path)
        try:
            config = {**hf_config_keys(self), **self.portable_config().to_dict()}
            (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
            # a converted copy: the model in memory keeps its own precision
            save_model(self if dtype is None else copy.deepcopy(self).to(dtype), str(tmp / WEIGHTS_FILE))
            os.chmod(tmp / WEIGHTS_FILE, new_file_mode(tmp))  # safetensors writes 0600
            self.tokenizer.vocab.save(tmp / VOCAB_FILE)
            write_tokenizer_files(tmp, self.tokenizer.vocab, self.config.max_text_len)
            (tmp / "README.md").write_text(render_card(self, card), encoding="utf-8")
            (tmp / "tokenspace.json").write_text(json.dumps({"family": self.family, "format": 1}) + "\n")
            replace_folder(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return path

    def portable_config(self) -> ModelConfig:
        """The config with pretrained-weight references replaced by architecture-only specs: a saved
        folder rebuilds itself from its own files, never from the asset cache or a hub."""
        d = self.config.to_dict()
        d["image_tower"] = {**d["image_tower"], **self.image_tower_portable()}
        d["text_tower"] = {**d["text_tower"], **self.text_tower_portable()}
        d["vocab"] = VOCAB_FILE
        return ModelConfig.from_dict(d)

    def image_tower_portable(self) -> dict:
        spec = getattr(self.image_tower, "portable_spec", None)  # ecosystem towers describe themselves
        if spec is not None:
            return spec()
        return {"weights": None} if "weights" in self.config.image_tower else {}

    def text_tower_portable(self) -> dict:
        tower = self.text_tower
        spec = getattr(tower, "portable_spec", None)
        if spec is not None:
            return spec()
        if self.config.text_tower["type"] == "bert-mlm":
            cfg = tower.bert.config.to_dict()
            keep = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
                    "layer_norm_eps", "pad_token_id", "hidden_dropout_prob", "attention_probs_dropout_prob")
            return {"weights": None, "config": {k: cfg[k] for k in keep if k in cfg}}
        return {}

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike) -> "DualEncoder":
        """A saved model folder -> the model of the family its config names (registry.from_pretrained)."""
        return registry.from_pretrained(path)
