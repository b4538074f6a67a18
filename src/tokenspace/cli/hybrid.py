"""The dense half of a hybrid search on the command line: `index build` with a dense model writes a
DenseIndex folder; `search` / `serve --dense-index DIR` hand the folder to Searcher.open (searcher.py's
DenseHalf.open opens it with its model), which fuses its hits with the sparse index's
(index/hybrid.py). The arguments are in cli/search.py and cli/serve.py."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tokenspace.cli.common import CLIError, UsageError
from tokenspace.cli.model_loading import model_reference
from tokenspace.index.folder import DENSE_IDS, MANIFEST

if TYPE_CHECKING:
    from tokenspace.encode import FileCollection

__all__ = ["DENSE_IDS", "build_dense_index", "check_dense_args"]


def check_dense_args(args) -> None:
    """--dense-model / --fusion / --weight only with --dense-index, and no token or metadata filter with
    it (a dense index has neither): refused rather than ignored, before anything loads."""
    if args.dense_index is None:
        given = [f for f, v in (("--dense-model", args.dense_model), ("--fusion", getattr(args, "fusion", None)),
                                ("--weight", getattr(args, "weight", None))) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: only with --dense-index (hybrid search)")
        return
    given = [f for f, v in (("--where", getattr(args, "where", None)), ("--filter", getattr(args, "filter", None)),
                            ("--must", getattr(args, "must", None)), ("--must-not", getattr(args, "must_not", None)))
             if v]
    if given:
        raise UsageError(f"{', '.join(given)} filters on the sparse index's tokens or metadata, which a dense "
                         "index lacks: not with --dense-index")


def build_dense_index(args, model, collection: FileCollection | None = None) -> int:
    """`index build --model DENSE_MODEL`: a DenseIndex of the collection, through the road every index
    takes (encode.build_index: resumable parts), with the collection.json that names its model, for
    `search --dense-index`."""
    out = Path(args.out)
    given = [f for f, v in (("--top-n", args.top_n), ("--metadata", getattr(args, "metadata", None)),
                            ("--reorder", getattr(args, "reorder", False)),
                            ("--no-impact-heads", not getattr(args, "impact_heads", True))) if v]
    if given:
        raise UsageError(f"{', '.join(given)}: a dense model's rows have no tokens to cut, filter or cluster; "
                         "not with a dense model")
    if (out / MANIFEST).exists():
        raise CLIError(f"--out {out} holds a sparse index: write the dense index to its own folder")
    work = Path(f"{args.out}.parts")
    from tokenspace.encode import FileCollection, build_index  # start-up: torch, which a search never needs

    try:
        collection = collection if collection is not None else FileCollection.from_specs(args.data, args.home)
        index = build_index(model, collection, out, work, args.part_size,
                            args.batch_size, workers=args.workers, tower=args.tower, progress=True,
                            info={"model": model_reference(args.model)})
    except KeyboardInterrupt:  # the parts on disk stay: a rerun encodes only what is missing
        print(f"tokenspace index build: interrupted; rerun the same command to go on (parts in {work})",
              file=sys.stderr)
        return 130
    if index is None:
        named = getattr(args, "images", None) or getattr(args, "manifest", None) or " ".join(args.data)
        raise CLIError(f"no readable images in {named}: nothing to index")
    print(f"indexed {len(index)} images into {out} (dense: search it with --dense-index beside a sparse --index)")
    return 0
