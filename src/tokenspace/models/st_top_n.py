"""A sentence-transformers module that keeps each row's n heaviest entries: copied as it is into the
`tokenspace export-st` folder of a model with a text top-n (models/export_st.py), between SpladePooling
and Normalize, so the folder's vectors are ``model.encode_text``'s: cut, then normalised.

SparseEncoder's own ``max_active_dims`` cuts after the last module, that is after Normalize: its rows
would keep the norm of the uncut vector. This file is self-contained (torch and sentence-transformers
only): a reader loads the folder with ``SparseEncoder(folder, trust_remote_code=True)``.
"""
from __future__ import annotations

import torch
from sentence_transformers.base.modules.module import Module


class TopN(Module):
    """``sentence_embedding`` [B, V] -> the same with all but each row's ``top_n`` largest entries zeroed
    (tokenspace.models.pooling.keep_top)."""

    config_keys: list[str] = ["top_n"]

    def __init__(self, top_n: int) -> None:
        super().__init__()
        self.top_n = int(top_n)

    def forward(self, features: dict[str, torch.Tensor], **kwargs) -> dict[str, torch.Tensor]:
        x = features["sentence_embedding"]
        if self.top_n < x.shape[-1]:  # equal entries at the cut: lower index first, as keep_top
            idx = x.sort(dim=-1, descending=True, stable=True).indices[..., :self.top_n]
            features["sentence_embedding"] = torch.zeros_like(x).scatter(-1, idx, x.gather(-1, idx))
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)

    @classmethod
    def load(cls, model_name_or_path: str = "", subfolder: str = "", token=None, cache_folder=None,
             revision=None, local_files_only: bool = False, **kwargs) -> TopN:
        config = cls.load_config(model_name_or_path=model_name_or_path, subfolder=subfolder, token=token,
                                 cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        return cls(**{k: v for k, v in config.items() if k in cls.config_keys})
