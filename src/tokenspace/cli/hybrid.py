"""The dense half of a hybrid search on the command line: `index build` with a dense model writes a
DenseIndex folder (cli/run/index_build.py: build_dense_index); `search` / `serve --dense-index DIR` hand the folder to Searcher.open (searcher.py's
DenseHalf.open opens it with its model), which fuses its hits with the sparse index's
(index/hybrid.py). The arguments are in cli/search.py and cli/serve.py."""
from __future__ import annotations

from tokenspace.cli.common import UsageError
from tokenspace.index.folder import DENSE_IDS

__all__ = ["DENSE_IDS", "check_dense_args"]


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
