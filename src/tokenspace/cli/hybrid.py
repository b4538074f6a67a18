"""The dense half of a hybrid search: `index build` with a dense model writes a DenseIndex folder, and
`search --dense-index DIR` opens it with its model and fuses its hits with the sparse index's
(index/hybrid.py). Loaded by the run modules of `index` and `search`; the arguments are in cli/search.py."""
from __future__ import annotations

from pathlib import Path

from tokenspace import pipeline
from tokenspace.cli.common import CLIError, UsageError, one_line
from tokenspace.cli.model_loading import load_model, model_reference
from tokenspace.index.dense import DenseIndex  # faiss itself loads only when an index is opened
from tokenspace.index.hybrid import DEPTH, hybrid_search
from tokenspace.index.storage import MANIFEST

DENSE_IDS = "ids.json"  # what a DenseIndex folder holds beside flat.faiss (index/dense.py)


class DenseHalf:
    """A dense index, the dense model that encodes its queries, and how to fuse its hits with the sparse
    index's."""

    def __init__(self, index, model, fusion: str, weight: float):
        self.index, self.model, self.fusion, self.weight = index, model, fusion, weight

    @classmethod
    def from_args(cls, args) -> DenseHalf | None:
        """--dense-index / --dense-model / --fusion / --weight; None without --dense-index (and then the
        other three are refused rather than ignored)."""
        if args.dense_index is None:
            given = [f for f, v in (("--dense-model", args.dense_model), ("--fusion", args.fusion),
                                    ("--weight", args.weight)) if v is not None]
            if given:
                raise UsageError(f"{', '.join(given)}: only with --dense-index (hybrid search)")
            return None
        given = [f for f, v in (("--where", args.where), ("--filter", getattr(args, "filter", None)),
                                ("--must", getattr(args, "must", None)), ("--must-not", getattr(args, "must_not", None)))
                 if v]
        if given:
            raise UsageError(f"{', '.join(given)} filters on the sparse index's tokens or metadata, which a dense "
                             "index lacks: not with --dense-index")
        model, index = open_dense(args.dense_index, args.dense_model)
        return cls(index, model, args.fusion or "rrf", 0.5 if args.weight is None else args.weight)

    def check_collection(self, sparse_index, where: str) -> None:
        check_same_collection(self.index, sparse_index, where)

    def encode(self, texts=None, image=None):
        """Dense query rows [n, d] of texts or of one image file."""
        return self.model.encode_image([image]) if image is not None else self.model.encode_text(texts)

    def search(self, sparse_index, sparse_queries, dense_queries, k: int):
        return hybrid_search(sparse_index, sparse_queries, self.index, dense_queries, k, fusion=self.fusion,
                             weight=self.weight, depth=DEPTH)


def open_dense(index_dir: str, model_ref: str | None = None, device: str = "cpu"):
    """(dense model, DenseIndex) of --dense-index and --dense-model (default: the model the dense index
    was built with)."""
    index = load_dense_index(index_dir)
    ref = model_ref or pipeline.read_collection_meta(index_dir).get("model")
    if not ref:
        raise CLIError(f"no --dense-model given and the dense index at {index_dir} does not name one")
    model = load_model(ref, device)
    if getattr(model, "sparse", True):
        raise CLIError(f"--dense-model {ref}: a sparse model ({model.family}); the dense index needs its dense model")
    return model, index


def check_same_collection(dense_index, sparse_index, where: str) -> None:
    """Both indexes must hold the same images (fusion adds up two rankings of one collection)."""
    if len(dense_index) != len(sparse_index):
        raise CLIError(f"--dense-index holds {len(dense_index)} images and {where} {len(sparse_index)}: "
                       "index the same collection with the sparse and the dense model")


def load_dense_index(path: str):
    """The DenseIndex saved at ``path`` (by `tokenspace index build --model DENSE_MODEL`)."""
    p = Path(path)
    if not (p / DENSE_IDS).exists():
        what = "no dense index in the folder" if p.is_dir() else "a file, not a folder" if p.exists() else "no such folder"
        raise CLIError(f"no dense index at {path} ({what}; build one with `tokenspace index build --model DENSE_MODEL`)")
    try:
        return DenseIndex.load(p)
    except (ImportError, ValueError, RuntimeError) as e:
        raise CLIError(f"--dense-index {path}: {one_line(e)}") from None


def build_dense_index(args, model) -> int:
    """`index build --model DENSE_MODEL`: a DenseIndex of the collection, with its collection.json (the
    model that encodes its queries), for `search --dense-index`."""
    out = Path(args.out)
    given = [f for f, v in (("--top-n", args.top_n), ("--metadata", getattr(args, "metadata", None)),
                            ("--reorder", getattr(args, "reorder", False)),
                            ("--no-impact-heads", not getattr(args, "impact_heads", True))) if v]
    if given:
        raise UsageError(f"{', '.join(given)}: a dense model's rows have no tokens to cut, filter or cluster; "
                         "not with a dense model")
    if (out / MANIFEST).exists():
        raise CLIError(f"--out {out} holds a sparse index: write the dense index to its own folder")
    vectors, ids, records = pipeline.encode_collection(model, args.data, home=args.home)
    if not ids:
        raise CLIError(f"no readable images in {' '.join(args.data)}: nothing to index")
    DenseIndex.build(vectors, ids).save(out)
    pipeline.write_collection_meta(out, records, model_reference(args.model))
    print(f"indexed {len(ids)} images into {out} (dense: search it with --dense-index beside a sparse --index)")
    return 0
