"""The library's end-to-end steps, shared by the CLI, the demo and the benchmarks.

Data is named by specs ``DATASET:SPLIT[:LIMIT]`` (e.g. ``emoji:train``, ``openclipart:test:300``) over
the manifests built from the offline assets, or ``path/to/manifest.jsonl:SPLIT``. A LIMIT takes a
deterministic subsample (by a hash of the record id), so every run and every model sees the same one.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from tokenspace import atomic
from tokenspace.data.manifest import Record, drop_empty_texts, read_manifest
from tokenspace.sparse import SparseBatch

BUILT_DATASETS = ("emoji", "icons", "openclipart", "fashion-mnist", "mnist", "photos")  # tokenspace.data.build


def _log(msg: str) -> None:
    print(f"[tokenspace] {msg}", file=sys.stderr, flush=True)


def home_dir(home=None) -> Path:
    from tokenspace import assets

    return Path(home).expanduser() if home is not None else assets.default_home()


# ---------------------------------------------------------------------------------------------- data
def load_split(spec: str, home=None) -> list[Record]:
    """Records for one spec, empty texts dropped (and counted in the log)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ValueError(f"data spec {spec!r} is not DATASET:SPLIT[:LIMIT]")
    name, split = parts[0], parts[1]
    limit = int(parts[2]) if len(parts) == 3 else None
    if name.endswith(".jsonl"):
        path = Path(name)
    elif name in BUILT_DATASETS:
        from tokenspace.data.build import build_manifests

        path = build_manifests(home_dir(home), progress=False, names=[name])[name]
    else:
        raise ValueError(f"unknown dataset {name!r}: use one of {BUILT_DATASETS} or a .jsonl manifest path")
    records, dropped = drop_empty_texts(read_manifest(path, split=split))
    if dropped:
        _log(f"{spec}: skipped {len(dropped)} records with empty text")
    if not records:
        raise ValueError(f"{spec}: no records in split {split!r} of {path}")
    if limit is not None and limit < len(records):
        key = lambda r: hashlib.sha1(r.id.encode()).hexdigest()  # noqa: E731 - stable across runs
        keep = {r.id for r in sorted(records, key=key)[:limit]}
        records = [r for r in records if r.id in keep]
    return records


def load_data(specs: Sequence[str] | str, home=None) -> list[Record]:
    specs = [specs] if isinstance(specs, str) else list(specs)
    return [r for s in specs for r in load_split(s, home)]


@dataclass
class Encoded:
    """A collection's image grids with the records whose images could be read."""

    grids: np.ndarray  # [N, C, h, w]
    records: list[Record]
    skipped: dict[str, str]  # record id -> reason


def image_grids(model, records: Sequence[Record], home=None, progress: bool = True, at: int | None = None) -> Encoded:
    """Backbone grids of the records' images from the feature cache (computed once, resumable);
    unreadable images are skipped and counted, never a crash. ``at=k``: the activations at the input
    of the tower's block k instead (for training the tower's top, recipe.train_image_from)."""
    from tokenspace.train.features import cache_image_grids

    cache = cache_image_grids(model, [r.image for r in records], home_dir(home) / "features", progress=progress, at=at)
    keep = np.flatnonzero(cache.ok)
    skipped = {records[i].id: cache.errors.get(i, "unreadable") for i in np.flatnonzero(~cache.ok)}
    if skipped:
        _log(f"skipped {len(skipped)} unreadable images (e.g. {next(iter(skipped.items()))})")
    return Encoded(np.asarray(cache.grids[keep]), [records[i] for i in keep], skipped)


# ---------------------------------------------------------------------------------------------- train
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
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

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


def caption_pairs(grids, records: Sequence[Record]):
    """PairData with one pair per (image, caption): every caption of a COCO-style record is used.

    Each record contributes ``record.texts`` (empty captions skipped); pairs of one image never share
    a batch and each epoch of the sampler draws one caption per image at random (as the usual COCO
    caption loaders do, one random caption per image per pass), so over training every caption is seen."""
    from tokenspace.train.trainer import PairData

    if len(grids) != len(records):
        raise ValueError(f"{len(grids)} grids for {len(records)} records")
    image_of, texts = [], []
    for i, r in enumerate(records):
        for t in r.texts:
            if t and t.strip():
                image_of.append(i)
                texts.append(t)
    image_of = np.asarray(image_of, np.int64)
    rows = grids if len(image_of) == len(grids) and np.array_equal(image_of, np.arange(len(grids))) \
        else RowsOf(grids, image_of)
    return PairData(rows, texts, caption_groups(image_of, texts))


def trunk_block(recipe, model) -> int | None:
    """The block whose input activations to cache when the recipe trains the tower's top from it."""
    f = recipe.train_image_from
    return model.image_tower.split_index(f) if f not in (None, "all") else None


def _with_final_grids(model, enc: Encoded, at: int | None) -> Encoded:
    """``enc`` with final grids from the model's current tower top when it holds block-``at`` activations."""
    if at is None:
        return enc
    from tokenspace.train.features import grids_from_trunk

    return Encoded(grids_from_trunk(model, enc.grids, at), enc.records, enc.skipped)


def build_seeded(recipe):
    """The recipe's model with its new layers (heads, projections) drawn from ``recipe.seed``.

    The Trainer seeds only the training loop; without this, two runs of one recipe start from
    different random heads."""
    import torch

    from tokenspace.models.registry import build_model

    torch.manual_seed(recipe.seed)
    return build_model(recipe.model)


def train(recipe, out_dir, home=None, resume: bool = False, progress: bool = True, **overrides):
    """Train a model from a recipe (name, path or Recipe) on its data; returns the trained model."""
    from tokenspace.train.recipe import Recipe
    from tokenspace.train.trainer import Trainer

    if not isinstance(recipe, Recipe):
        recipe = Recipe.load(recipe, **overrides)
    if "train" not in recipe.data:
        raise ValueError(f"recipe {recipe.name!r} has no data.train")
    model = build_seeded(recipe)
    at = trunk_block(recipe, model)
    enc = image_grids(model, load_data(recipe.data["train"], home), home, progress, at=at)
    data = caption_pairs(enc.grids, enc.records)
    _log(f"training {recipe.name}: {len(data)} pairs ({len(enc.records)} images), {recipe.total_steps} steps")
    evaluate = None
    if recipe.data.get("eval"):
        eval_enc = image_grids(model, load_data(recipe.data["eval"], home), home, progress, at=at)
        evaluate = lambda m: evaluate_retrieval(m, _with_final_grids(m, eval_enc, at))  # noqa: E731
    return Trainer(model, recipe, data, out_dir, evaluate=evaluate, progress=progress).fit(resume=resume)


# ---------------------------------------------------------------------------------------------- eval
def texts_and_targets(records: Sequence[Record]) -> tuple[list[str], np.ndarray]:
    """Every caption with the index of its image (several captions per image, COCO style)."""
    texts, target = [], []
    for i, r in enumerate(records):
        for t in r.texts:
            if t and t.strip():
                texts.append(t)
                target.append(i)
    return texts, np.asarray(target, dtype=np.int64)


def evaluate_retrieval(model, enc: Encoded, folds: int | None = None) -> dict[str, float]:
    """R@1/5/10 both directions plus sparsity on one encoded split; ``folds=5`` adds the COCO-1K
    protocol (5 folds of the images, ``folds5/...`` keys) beside the whole-split numbers (COCO-5K)."""
    from tokenspace.eval import RetrievalEvaluator, SparsityEvaluator

    texts, target = texts_and_targets(enc.records)
    img = model.encode_image_grids(enc.grids)
    txt = model.encode_texts(texts)
    out = RetrievalEvaluator(target, folds=folds)(img, txt)
    if isinstance(img, SparseBatch):
        out.update(SparsityEvaluator()(img, txt))
    out["n_images"], out["n_texts"] = float(len(enc.records)), float(len(texts))
    return out


def vocabulary_embeddings(model, batch_size: int = 2048) -> np.ndarray:
    """(V, D) float32: each tokenizer-vocabulary token alone (``[CLS] token [SEP]``) through the model's
    text side, in the form the model scores with (unit rows for cosine models).

    A dense model's lexicon scores (STAIR Sec. 5.1, Table 5's CLIP arm): image i's score for token v is
    image_emb[i] . out[v]. Token ids go in directly, so a sub-word (``##fish``) is that one token, not
    the pieces its spelling would tokenize into."""
    import torch

    vocab = model.tokenizer.vocab
    cls_id, sep_id = vocab.id("[CLS]"), vocab.id("[SEP]")
    model.eval()
    outs = []
    with torch.no_grad():
        for s in range(0, len(vocab), batch_size):
            ids = torch.arange(s, min(s + batch_size, len(vocab)), dtype=torch.int64, device=model.device)[:, None]
            ids = torch.cat([torch.full_like(ids, cls_id), ids, torch.full_like(ids, sep_id)], dim=1)  # [b, 3]
            emb = model.normalize(model.text_embed(ids, torch.ones_like(ids))).float()
            outs.append(emb.cpu().numpy())
    return np.concatenate(outs) if outs else np.zeros((0, model.config.embed_dim), np.float32)


def evaluate(model, specs: Sequence[str] | str, home=None, progress: bool = True,
             folds: int | None = None) -> dict[str, dict]:
    """Retrieval metrics per data spec (``folds``: see evaluate_retrieval)."""
    specs = [specs] if isinstance(specs, str) else list(specs)
    return {s: evaluate_retrieval(model, image_grids(model, load_split(s, home), home, progress), folds)
            for s in specs}


# ---------------------------------------------------------------------------------------------- index
def encode_collection(model, specs: Sequence[str] | str, home=None, progress: bool = True):
    """(SparseBatch of image vectors, ids, records) for a collection, ready for an index."""
    enc = image_grids(model, load_data(specs, home), home, progress)
    vectors = model.encode_image_grids(enc.grids)
    if not isinstance(vectors, SparseBatch):
        raise TypeError(f"{model.family} produces dense vectors; index them with tokenspace.index.dense")
    return vectors, [r.id for r in enc.records], enc.records


def write_collection_meta(index_dir, records: Sequence[Record], model_path=None) -> None:
    """Beside an index: id -> image path and text, for showing and explaining hits."""
    meta = {r.id: {"image": r.image, "text": r.text, "label": r.label, "source": r.source} for r in records}
    doc = {"model": str(model_path) if model_path else None, "items": meta}
    atomic.write_text(Path(index_dir) / "collection.json", json.dumps(doc))


def read_collection_meta(index_dir) -> dict:
    path = Path(index_dir) / "collection.json"
    return json.loads(path.read_text()) if path.exists() else {"model": None, "items": {}}
