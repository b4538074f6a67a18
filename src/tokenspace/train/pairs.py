"""Training pairs for a recipe: records and their cached grids (data/specs.py) -> caption pairs.

The steps the single-process trainer (pipeline.train) and the scale trainer (train/scale.py) share.
Importing this module stays light, without torch or scipy (the pipeline imports it, and the trainer
takes ``PairData`` from here): the heavy pieces are imported where they are used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tokenspace.data.manifest import Record


@dataclass
class PairData:
    """Training pairs. Pairs of one group (same caption or concept) never share a batch: two drawings of
    one emoji with one caption would otherwise be each other's false negatives.

    ``inputs`` is the image side of each pair as the trainer feeds the model, row i for pair i: cached
    backbone grids [N, C, h, w] (the default: the tower is frozen), cached activations at block k's
    input (``train_image_from: k``: the tower's top trains), or pixels [N, 3, S, S] (``train_image_from:
    all``; a lazy reader such as train/scale.py's LazyPixels for webdataset shards). Anything indexable
    by an array of rows with a length: an array, a memmap, pairs.RowsOf."""

    inputs: np.ndarray  # [N, ...] grids, block activations or pixels (see above)
    texts: list[str]
    groups: np.ndarray  # [N] int

    def __post_init__(self):
        if not (len(self.inputs) == len(self.texts) == len(self.groups)):
            raise ValueError("inputs, texts and groups must have one entry per pair")
        empty = [i for i, t in enumerate(self.texts) if not t or not t.strip()]
        if empty:
            raise ValueError(f"{len(empty)} empty texts (e.g. rows {empty[:5]}); filter them first")

    @classmethod
    def from_texts(cls, inputs, texts: list[str]) -> PairData:
        _, groups = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        return cls(inputs, list(texts), groups.astype(np.int64))

    def __len__(self) -> int:
        return len(self.texts)



class RowsOf:
    """Rows of ``base`` picked by ``index``, read on demand: pair i's grid is ``base[index[i]]``, so five
    captions of one image share one cached grid instead of five copies (COCO: 113K grids, 566K pairs)."""

    def __init__(self, base, index):
        self.base, self.index = base, np.asarray(index, np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        return self.base[self.index[i]]


def caption_groups(image_of: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """Group id per pair: pairs that share an image or a caption text (transitively) share a group.

    The trainer never puts two pairs of one group in a batch (they would be each other's false
    negatives) and draws one member of each group per epoch. With one caption per image this is the
    old grouping by text exactly (same ids, so single-caption runs train on the same batches)."""
    from scipy.sparse import coo_matrix  # start-up: scipy.sparse is slow to import (see the module doc)
    from scipy.sparse.csgraph import connected_components  # start-up: as above

    image_of = np.asarray(image_of, np.int64)
    _, text_id = np.unique(np.asarray(list(texts), dtype=object), return_inverse=True)
    n_img, n_txt = int(image_of.max()) + 1 if len(image_of) else 0, int(text_id.max()) + 1 if len(texts) else 0
    # bipartite graph: image nodes [0, n_img), text nodes [n_img, n_img + n_txt), one edge per pair
    graph = coo_matrix((np.ones(len(image_of)), (image_of, n_img + text_id)), shape=(n_img + n_txt,) * 2)
    _, comp = connected_components(graph, directed=False)
    # name each component by its smallest text id, renumbered densely in that order: with one caption
    # per image a component is exactly one distinct text, so the ids equal np.unique's
    first_text = np.full(comp.max() + 1 if len(comp) else 0, np.iinfo(np.int64).max)
    np.minimum.at(first_text, comp[n_img + text_id], text_id)
    _, groups = np.unique(first_text[comp[n_img + text_id]], return_inverse=True)
    return groups.astype(np.int64)


def pair_layout(records: Sequence[Record]) -> tuple[np.ndarray, list[str]]:
    """The training pairs of ``records``: (record index of each pair's image [P], each pair's caption),
    one pair per non-empty caption, in record order (caption_pairs; train/distill.py's teacher rows)."""
    image_of, texts = [], []
    for i, r in enumerate(records):
        for t in r.texts:
            if t and t.strip():
                image_of.append(i)
                texts.append(t)
    return np.asarray(image_of, np.int64), texts


def caption_pairs(grids, records: Sequence[Record]):
    """PairData with one pair per (image, caption): every caption of a COCO-style record is used.

    Each record contributes ``record.texts`` (empty captions skipped); pairs of one image never share
    a batch and each epoch of the sampler draws one caption per image at random (as the usual COCO
    caption loaders do, one random caption per image per pass), so over training every caption is seen."""
    if len(grids) != len(records):
        raise ValueError(f"{len(grids)} grids for {len(records)} records")
    image_of, texts = pair_layout(records)
    rows = grids if len(image_of) == len(grids) and np.array_equal(image_of, np.arange(len(grids))) \
        else RowsOf(grids, image_of)
    return PairData(rows, texts, caption_groups(image_of, texts))


def trunk_block(recipe, model) -> int | None:
    """The block whose input activations to cache when the recipe trains the tower's top from it."""
    f = recipe.train_image_from
    return model.image_tower.split_index(f) if f not in (None, "all") else None


def build_seeded(recipe):
    """The recipe's model with its new layers (heads, projections) drawn from ``recipe.seed``.

    The Trainer seeds only the training loop; without this, two runs of one recipe start from
    different random heads."""
    import torch  # start-up: torch (see the module doc)

    from tokenspace.models.registry import build_model  # start-up: torch (see the module doc)
    from tokenspace.train.recipe import model_config  # start-up: recipe imports train.precision (torch)

    torch.manual_seed(recipe.seed)
    return build_model(model_config(recipe.model))
