"""Labels from manifest records: the emoji concept, class names as words, class indices, showcase rows."""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from benchmarks.reproduce_sections.plan import SHOWCASE


def concept(record) -> str:
    """The emoji concept name: the part of the text before " — " (e.g. "moose")."""
    return record.text.split(" — ")[0].strip()


def clean_classname(name: str) -> str:
    """A label as words: folder names use underscores, and punctuation ("flag: Germany", quotes) would
    otherwise count as a sub-word of the label in the token top-K accuracy."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s'&-]", " ", name.replace("_", " "))).strip() or name


def class_indices(names: Sequence[str], classes: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """(sorted class list, index of each name in it); ``classes`` fixes the list (e.g. train ∪ test)."""
    classes = sorted(set(names)) if classes is None else list(classes)
    pos = {c: i for i, c in enumerate(classes)}
    return classes, np.array([pos[n] for n in names], np.int64)


def showcase_rows(records, n: int, prefer: Sequence[str] = SHOWCASE) -> list[int]:
    """A fixed set of n record indices: the preferred concepts that are present, then evenly spaced
    records by id, so every run (and every checkpoint) shows the same images."""
    by_concept = {concept(r).lower(): i for i, r in enumerate(records)}
    rows = [by_concept[c] for c in prefer if c in by_concept][:n]
    order = sorted(range(len(records)), key=lambda i: records[i].id)
    step = max(1, len(order) // max(n, 1))
    for i in order[::step]:
        if len(rows) >= n:
            break
        if i not in rows:
            rows.append(i)
    return rows

