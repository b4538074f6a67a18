"""The index folder argument of `index stats|export` and `search` (numba loads where a job needs the
index's kernels: index/road.py)."""
from __future__ import annotations

from pathlib import Path

from tokenspace.cli.common import CLIError
from tokenspace.index import InvertedIndex
from tokenspace.index.storage import MANIFEST


def load_index(path: str, *, verify: bool = True, nonempty: bool = True) -> InvertedIndex:
    """The InvertedIndex saved at ``path``; a missing or (when ``nonempty``) empty index is an error."""
    if not (Path(path) / MANIFEST).exists():
        p = Path(path)
        what = "the folder holds no index" if p.is_dir() else "a file, not a folder" if p.exists() else "no such folder"
        raise CLIError(f"no index at {path} ({what}; build one with `tokenspace index build`)")
    index = InvertedIndex.load(path, verify=verify)
    if nonempty and len(index) == 0:
        raise CLIError(f"the index at {path} is empty")
    return index
