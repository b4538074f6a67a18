"""Teacher scores for distillation into the student (SPLADE++ / D2S style; a labelled deviation from STAIR).

    loss: {distill: 1.0, distill_teacher: runs/demo/dense/model, distill_scale: null}

Before training, the teacher (a trained model folder or release name, sparse or dense) encodes every
training pair's image (through its own backbone grid cache) and caption, once. Per batch of pair rows
``idx`` the trainer asks for

    teacher_logits = scale * T_img[idx] @ T_txt[idx].T          [B, B], image x text

(``scale``: the recipe's ``distill_scale``, else the teacher's own logit scale) and
``losses.distillation_loss`` pulls the student's in-batch softmax toward it, both directions.
Sparse teachers stay sparse (CSR rows over their vocabulary): a dense copy of 30,522 dims per pair
would not fit in memory for a large collection; only the batch's [B, B] product is dense.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from tokenspace.data.manifest import Record
from tokenspace.data.specs import image_grids
from tokenspace.data.specs import note as _log
from tokenspace.models.registry import load
from tokenspace.sparse import SparseBatch
from tokenspace.train.pairs import pair_layout


def _rows(encoded) -> np.ndarray | sp.csr_matrix:
    """A model's encoded rows (SparseBatch or a dense array) as what ``logits`` multiplies."""
    if isinstance(encoded, SparseBatch):
        return encoded.to_scipy().astype(np.float32)
    return np.asarray(encoded, np.float32)


class TeacherScores:
    """A teacher's vectors of the training pairs: ``image`` [N_img, D] (one row per image), ``text``
    [P, D] (one row per pair), ``image_of`` [P] (pair -> its image row; None: pair i is image i) and
    the logit ``scale``. Dense arrays or scipy CSR matrices."""

    def __init__(self, image, text, scale: float, image_of: np.ndarray | None = None):
        self.image, self.text, self.scale = _rows(image), _rows(text), float(scale)
        self.image_of = np.arange(self.image.shape[0]) if image_of is None else np.asarray(image_of, np.int64)
        if len(self.image_of) != self.text.shape[0]:
            raise ValueError(f"{self.text.shape[0]} teacher text rows for {len(self.image_of)} pairs")
        if self.image.shape[1] != self.text.shape[1]:
            raise ValueError(f"teacher image rows have {self.image.shape[1]} dims, "
                             f"text rows {self.text.shape[1]}")
        if len(self.image_of) and not 0 <= self.image_of.min() <= self.image_of.max() < self.image.shape[0]:
            raise ValueError("a pair points at a teacher image row that does not exist")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"the teacher's logit scale must be a positive number, not {self.scale}")

    def __len__(self) -> int:
        return len(self.image_of)

    def logits(self, idx: np.ndarray) -> np.ndarray:
        """[B, B] float32 teacher logits of the pairs ``idx``: row = image of pair idx[i], column = text
        of pair idx[j] (the orientation of the student's logits)."""
        idx = np.asarray(idx, np.int64)
        s = self.image[self.image_of[idx]] @ self.text[idx].T  # [B, B]
        s = s.toarray() if sp.issparse(s) else np.asarray(s)
        return (self.scale * s).astype(np.float32)

    @classmethod
    def from_model(cls, teacher, records: Sequence[Record], home=None, progress: bool = True,
                   scale: float | None = None) -> TeacherScores:
        """Encode the training pairs of ``records`` (pairs.pair_layout: the student's pair order) with
        ``teacher``; ``scale`` None takes the teacher's own logit scale."""
        enc = image_grids(teacher, records, home, progress)
        if len(enc.records) != len(records):  # the student read these images: its rows must all be here
            raise ValueError(f"the distillation teacher could not read {len(enc.skipped)} training images "
                             f"(e.g. {next(iter(enc.skipped.items()), None)})")
        image_of, texts = pair_layout(records)
        image = teacher.encode_image_grids(enc.grids)
        text = teacher.encode_text(texts)
        if scale is None:
            scale = float(teacher.logit_scale.detach())
        return cls(image, text, scale, image_of)


def load_teacher(ref: str):
    """The teacher model (a trained folder or release name); a failure is a one-line ValueError."""
    try:
        return load(ref)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        text = " ".join(str(e).split())
        raise ValueError(f"recipe loss.distill_teacher {ref!r} does not load: {text[:300]}") from None


def teacher_scores(recipe, records: Sequence[Record], home=None,
                   progress: bool = True) -> TeacherScores | None:
    """The recipe's teacher scores over the training ``records``; None when it does not distill."""
    if not recipe.distill:
        return None
    teacher = load_teacher(recipe.distill_teacher)
    _log(f"distillation: encoding {len(records)} training images and their captions with the teacher "
         f"{recipe.distill_teacher} ({teacher.family})")
    return TeacherScores.from_model(teacher, records, home, progress, scale=recipe.distill_scale)
