"""What a model or tower can do beyond the DualEncoder basics, named in one place.

The trainer, the loss and the explainers ask ``isinstance(model, Capability)`` (``typing.Protocol``,
runtime-checkable) instead of probing with ``hasattr`` for a method name, and ``require`` turns a
missing capability into an error saying what needs it and which family lacks it. A family gains a
capability by defining its members; nothing registers.

    capability          members                                   who has it
    RestrictsText       token_mask, text_embed(restrict_to_input)  stair (STAIR stage 1, eq. 8)
    LowPrecisionHeads   compute_dtype                             stair, visualsparta (bf16 recipes)
    OwnObjective        contrastive_objective(logits, cols, ...)  visualsparta (eq. 13: text -> image)
    Regularized         regularization(image_emb, text_emb)       sparse-clip (the L1 arm of Fig. 2b)
    CellScores          image_scores(grid)                        stair, visualsparta, tagger (heatmaps)
    GradCheckpointing   set_grad_checkpointing(enable)            towers: vit, hf-clip-*, open-clip-*, transformer-mlm

Plain Python (no torch at import): the explainers ask without loading a model family.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import torch


@runtime_checkable
class RestrictsText(Protocol):
    """can restrict a text to its own tokens (STAIR stage 1, eq. 8)"""

    def token_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor: ...

    def text_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   restrict_to_input: bool = False) -> torch.Tensor: ...


@runtime_checkable
class LowPrecisionHeads(Protocol):
    """can run its products into the vocabulary in bf16 (``compute_dtype``; the trainer sets it for
    bf16 recipes and puts float32 back for inference)"""

    compute_dtype: torch.dtype


@runtime_checkable
class OwnObjective(Protocol):
    """defines its own contrastive objective over the [images, texts] logit matrix"""

    def contrastive_objective(self, logits: torch.Tensor, cols: torch.Tensor | None = None,
                              offset: int = 0) -> torch.Tensor: ...


@runtime_checkable
class Regularized(Protocol):
    """adds its own named loss parts (penalties on the embeddings)"""

    def regularization(self, image_emb: torch.Tensor, text_emb: torch.Tensor) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class CellScores(Protocol):
    """scores every grid cell against the vocabulary (localisation heatmaps)"""

    def image_scores(self, grid: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class GradCheckpointing(Protocol):
    """can recompute its activations in the backward pass (a tower's own switch)"""

    def set_grad_checkpointing(self, enable: bool = True) -> None: ...


class MissingCapability(ValueError, TypeError):
    """A model lacks what a requested feature needs (a recipe stage, a heatmap...). Both a ValueError
    (the recipe asks for what the model cannot do: the trainer raised that before) and a TypeError
    (the model is the wrong kind: the explainers raised that)."""


def require(model: Any, capability: type, needed_by: str) -> None:
    """Raise MissingCapability unless ``model`` has ``capability``: "<needed_by> needs a model that
    <what the capability does>; <family> models cannot"."""
    if isinstance(model, capability):
        return
    who = getattr(model, "family", "") or type(model).__name__
    what = " ".join(capability.__doc__.split())  # the docstring says what the capability does
    raise MissingCapability(f"{needed_by} needs a model that {what}; {who!r} models cannot")


def require_vectors(model: Any, sparse: bool, who: str = "the model", hint: str = "") -> None:
    """Raise MissingCapability unless ``model`` gives the kind of vectors asked for: token vectors
    (``sparse``: what an inverted index holds and a token search encodes queries with) or dense ones
    (the dense half of a hybrid search). The one refusal every command, the search session and the
    service give: "<who>: a <family> model gives dense vectors, not the token vectors an index holds".
    ``who`` names the model as the caller's user gave it (``--model M``); ``hint`` says what to do."""
    if bool(getattr(model, "sparse", True)) == sparse:
        return
    family = getattr(model, "family", "") or type(model).__name__
    why = (f"a {family} model gives dense vectors, not the token vectors an index holds" if sparse
           else f"a sparse model ({family}); a dense index needs its dense model")
    raise MissingCapability(f"{who}: {why}" + (f": {hint}" if hint else ""))
