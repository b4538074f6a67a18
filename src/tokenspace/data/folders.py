"""Reader for an image folder with one subfolder per class (``root/<label>/<image>``)."""
from __future__ import annotations

import os
from pathlib import Path

from tokenspace.data.manifest import Record

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".svg")


def read_image_folder(root: str | os.PathLike, split: str = "train", text_template: str = "{label}",
                      extensions: tuple[str, ...] = IMAGE_EXTENSIONS, source: str | None = None) -> list[Record]:
    """One Record per image file under ``root/<label>/`` (nested folders count toward their top label).

    The text is ``text_template`` filled with the label, underscores read as spaces (so "a photo of a
    {label}" gives CLIP-style prompts). Files are listed in sorted order so ids are stable.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist")
    source = source or root.name
    records = []
    for class_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        label = class_dir.name
        text = text_template.format(label=label.replace("_", " "))
        for f in sorted(class_dir.rglob("*")):
            if f.is_file() and f.suffix.lower() in extensions:
                rel = f.relative_to(root).as_posix()
                records.append(Record(id=f"{source}:{rel}", image=str(f), text=text, split=split,
                                      label=label, source=source))
    return records
