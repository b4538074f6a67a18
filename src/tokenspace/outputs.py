"""The one rule for where a command writes: a new folder, an empty one, or one holding this command's own
state (a run it resumes, its encoded parts, the index it extends or replaces), never a folder holding
anything else: another command's index, run, parts or shards, or the user's own files.

Every command that writes a folder (`train`, `sparsify`, `shards`, `encode` and its `--work`,
`index build` and its parts, the exports) calls ``check_output`` before it loads a model or reads data,
so a refusal costs a second and writes nothing. What a folder holds is told by the names tokenspace
writes there (``KINDS``; tests/test_outputs.py checks each name against the module that writes it), so
this module imports nothing of the package: every layer may call it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

INDEX = "an index"
PARTS = "encoded parts"
RUN = "a training run"
SHARDS = "shards"
MODEL = "a model"
EXPORT = "an export"
FILES = "files of its own"  # anything else: the user's

# (kind, the entries that mark it), in the order asked: an index folder also holds a collection.json,
# a run folder a model/, an export a config.json, so the more specific kind comes first
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (INDEX, ("MANIFEST.json", "ids.json")),  # index/storage.py; a DenseIndex (index/folder.py)
    (PARTS, ("encode.json", "part-*.npz", "part-*.ids")),  # encode.py's work folder
    (RUN, ("recipe.json", "log.jsonl", "checkpoint", "checkpoint.tmp", "checkpoint.old", "model")),  # train/
    (SHARDS, ("*.tar",)),  # data/webdataset.py, `tokenspace shards`
    (EXPORT, ("tokenspace_export.json", "mapping.json", "collection.json")),  # export-st/-onnx; opensearch; qdrant
    (MODEL, ("config.json",)),  # models/config.py (save_pretrained); an export holds one too
)


class OutputRefused(ValueError):
    """The output path would mix this command's files with something else's; the message is one line."""


def holds(folder: str | os.PathLike) -> tuple[str, str] | None:
    """(kind, the entry that tells it) of what ``folder`` holds; None for a folder that is missing or empty."""
    p = Path(folder)
    try:
        names = {e.name for e in p.iterdir()}
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not names:
        return None
    for kind, marks in KINDS:
        for mark in marks:
            hit = next(iter(sorted(p.glob(mark))), None) if "*" in mark else (mark if mark in names else None)
            if hit is not None:
                return kind, Path(hit).name
    return FILES, sorted(names)[0]


def index_above(path: str | os.PathLike) -> Path | None:
    """The nearest folder holding ``path`` (not ``path`` itself) that holds an index: everything inside an
    index folder is the index's (a save removes segment-like names it does not list). Told strictly (a
    tokenspace manifest, or a dense index's two files), so a MANIFEST.json of another tool in a folder
    far above does not close the whole tree."""
    for folder in Path(path).absolute().parents:
        if _is_index(folder):
            return folder
    return None


def _is_index(folder: Path) -> bool:
    if (folder / "ids.json").is_file() and any(folder.glob("flat*.faiss")):  # flat.faiss, flat-NNNNNN.faiss
        return True
    try:
        with open(folder / "MANIFEST.json", "rb") as f:
            return b'"tokenspace-inverted"' in f.read(1 << 16)
    except OSError:
        return False


def check_output(path: str | os.PathLike, option: str, own: Sequence[str] = (), *, what: str = "output of this command",
                 refused: dict[str, str] | None = None) -> str | None:
    """Refuse ``path`` as ``option``'s output folder unless it is new, empty or holds one of ``own`` (the
    kinds that are this command's own resumable state here); return the kind found (None: new or empty).
    ``what`` names the command's own state in the message for a folder of other files; ``refused``: kind ->
    what to do instead, for the kinds a command has its own advice for (an index without --overwrite).
    Raises OutputRefused: one line naming the option, the folder and what it holds."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputRefused(f"{option} {path} is a file: give a folder (new, or empty)")
    above = index_above(p)
    if above is not None:
        raise OutputRefused(f"{option} {path} is in the index folder {above}: write it somewhere else")
    found = holds(p)
    if found is None or found[0] in own:
        return None if found is None else found[0]
    kind, mark = found  # mark: the entry that tells the kind, named for a folder of the user's files
    advice = (refused or {}).get(kind, "choose a new or empty folder")
    if kind == FILES:
        raise OutputRefused(f"{option} {path} is a folder that is not empty and holds no {what} (such as "
                            f"{mark}): {advice}")
    raise OutputRefused(f"{option} {path} already holds {kind}: {advice}")
