"""A sentence-transformers module for a fused model's text side: copied as it is into the
`tokenspace export-st` folder of a fused model (models/export_st.py), after SpladePooling, so the folder's
vectors are ``model.encode_text``'s (models/fused.py)::

    text = text_weight * n(splade(ids)) + anchor * n(bag(ids))          n = L2 normalisation

``bag(ids)`` is 1 for each content word piece of the text (the lexical anchor: the query's own words,
without stop words, specials or punctuation; ``non_content_ids`` lists the pieces that are not content).
It reads ``input_ids`` and ``attention_mask``, which the MLM module leaves in the features. A TopN
(st_top_n.py) and a Normalize may follow, as in ``encode_text``: cut, then normalise.

This file is self-contained (torch and sentence-transformers only): a reader loads the folder with
``SparseEncoder(folder, trust_remote_code=True)``.
"""
from __future__ import annotations

import torch
from sentence_transformers.base.modules.module import Module


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class LexicalAnchor(Module):
    """``sentence_embedding`` [B, V] (the MLM part's SPLADE vector) -> ``text_weight`` x its unit vector
    + ``anchor`` x the unit vector of the text's content word pieces."""

    config_keys: list[str] = ["vocab_size", "anchor", "text_weight", "non_content_ids"]

    def __init__(self, vocab_size: int, anchor: float, text_weight: float, non_content_ids: list[int]) -> None:
        super().__init__()
        self.vocab_size, self.anchor, self.text_weight = int(vocab_size), float(anchor), float(text_weight)
        self.non_content_ids = sorted(int(i) for i in non_content_ids)
        content = torch.ones(self.vocab_size, dtype=torch.bool)
        content[self.non_content_ids] = False
        self.register_buffer("content", content, persistent=False)  # rebuilt from the config, not stored

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        x, ids, mask = features["sentence_embedding"], features["input_ids"], features["attention_mask"]
        valid = (mask.bool() & self.content[ids]).to(x.dtype)
        bag = torch.zeros(ids.shape[0], self.vocab_size, dtype=x.dtype, device=x.device)
        bag = bag.scatter_reduce(1, ids, valid, reduce="amax", include_self=True)
        # the fused model's order of the two terms (anchor first), so the sums round alike
        features["sentence_embedding"] = self.anchor * _unit(bag) + self.text_weight * _unit(x)
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str = "", subfolder: str = "", token=None, cache_folder=None,
             revision=None, local_files_only: bool = False, **kwargs) -> LexicalAnchor:
        config = cls.load_config(model_name_or_path=model_name_or_path, subfolder=subfolder, token=token,
                                 cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        return cls(**{k: v for k, v in config.items() if k in cls.config_keys})
