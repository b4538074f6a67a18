"""Deterministic, order-free split assignment, and concept groups shared across every dataset.

A key's bucket is a hash of (seed, key) mapped to [0, 1). ``holdout_set`` takes the exact fraction of
keys with the smallest buckets: unlike a shuffled list, adding or removing a few items elsewhere only
moves keys at the margin, and unlike a per-key threshold the held-out size is exact.

Concept groups (``ConceptGroups``, ``assign``): every candidate record carries concept keys (an emoji's
base codepoints, its normalised CLDR name, an icon's normalised name, a clip-art title). Candidates
sharing a key are one group (union-find, so the relation is transitive), and a whole group goes to
train, val or test together. "heart" drawn in five icon sets, "man golfing" / "woman golfing" / their
skin tones, and "Chemistry Flask" 01 / 02 each land on one side of the split only.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tokenspace.data.manifest import Record

GROUP_SPLITS = ("train", "val", "test")


def bucket(key: str, seed: int | str = 0) -> float:
    """A uniform number in [0, 1) fixed by ``seed`` and ``key``."""
    h = hashlib.sha1(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


def holdout_set(keys, fraction: float, seed: int | str = 0) -> set:
    """The ``round(fraction * len(keys))`` keys with the smallest buckets."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"hold-out fraction must be in [0, 1], got {fraction}")
    keys = sorted(set(keys))
    n = round(fraction * len(keys))
    return set(sorted(keys, key=lambda k: (bucket(k, seed), k))[:n])


def subsample(keys, n: int | None, seed: int | str = 0) -> set:
    """A deterministic subset of ``n`` keys (all of them when n is None or larger)."""
    keys = list(keys)
    if n is None or n >= len(keys):
        return set(keys)
    return set(sorted(keys, key=lambda k: (bucket(k, f"sub-{seed}"), k))[:n])


# ----------------------------------------------------------------------------- caption keys
# Words that say who or how, not what: "man golfing", "woman golfing" and "person golfing" are one
# concept; so are "heart", "hearts" and "the heart".
_STOP = {"a", "an", "the", "of", "with", "and", "in", "on", "for", "to", "at", "by", "or"}
_PEOPLE = {"man", "men", "woman", "women", "person", "people", "boy", "girl", "child", "adult",
           "male", "female", "two"}
_TONE = {"skin", "tone", "light", "medium", "dark"}  # only after the ":" of an emoji label (see below)
_WORD = re.compile(r"[a-z0-9]+")


def _stem(w: str) -> str:
    """Crude plural folding, applied the same way everywhere (a key, not a word for display)."""
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def caption_key(name: str) -> str:
    """A concept name reduced to its sorted content words: "Woman Golfing: dark skin tone" ->
    "golfing", "red-hearts" -> "heart red", "the Heart" -> "heart", "Woman" -> "woman"."""
    name = name.lower()
    if ":" in name:  # CLDR "waving hand: medium skin tone" -> drop the tone qualifier only
        head, _, tail = name.partition(":")
        tail_words = [w for w in _WORD.findall(tail) if w not in _TONE]
        name = head + " " + " ".join(tail_words)
    words = [w for w in _WORD.findall(name.replace("_", " ")) if w not in _STOP]
    content = {_stem(w) for w in words if w not in _PEOPLE}
    # "man", "women": nothing but people words; then they are the concept
    return " ".join(sorted(content or {_stem(w) for w in words}))


# ----------------------------------------------------------------------------- concept groups
class ConceptGroups:
    """Union-find over keys: ``add(keys)`` joins every key of one item into one group."""

    def __init__(self):
        self._parent: dict[str, str] = {}

    def _find(self, k: str) -> str:
        root = k
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[k] != root:  # path compression
            self._parent[k], k = root, self._parent[k]
        return root

    def add(self, keys: Iterable[str]) -> None:
        keys = [k for k in keys if k]
        for k in keys:
            self._parent.setdefault(k, k)
        for k in keys[1:]:
            a, b = self._find(keys[0]), self._find(k)
            if a != b:
                # the smaller key becomes the root, so a group's name (its smallest key) is order-free
                lo, hi = (a, b) if a < b else (b, a)
                self._parent[hi] = lo

    def group(self, keys: Sequence[str]) -> str:
        """Name of the group of an item already added (its smallest key)."""
        return self._find(next(k for k in keys if k))

    def sizes(self) -> Counter:
        return Counter(self._find(k) for k in self._parent)


def group_split(group: str, fractions: dict[str, float], seed: int | str = 0) -> str:
    """"test" / "val" / "train" for a group from its bucket: [0, test) -> test, [test, test+val) -> val."""
    b = bucket(group, f"concept-{seed}")
    test, val = fractions.get("test", 0.0), fractions.get("val", 0.0)
    if b < test:
        return "test"
    if b < test + val:
        return "val"
    return "train"


@dataclass(frozen=True)
class Candidate:
    """A record before its split is known.

    ``keys``: concept keys (items sharing a key share a split). ``roles``: the record's split when its
    concept group is train / val / test (None drops it, e.g. a second artist's drawing of a
    validation concept). ``unique``: within one held-out split only the first candidate with a given
    ``unique`` value is kept, so a held-out text has one matching image.
    """

    record: Record
    keys: tuple[str, ...]
    roles: tuple[str | None, str | None, str | None]
    unique: str | None = None


def assign(candidates: Sequence[Candidate], fractions: dict[str, float], seed: int | str = 0,
           groups: ConceptGroups | None = None) -> tuple[list[Record], Counter, dict[str, str]]:
    """Records with their splits, the dropped counts by reason, and each group's split.

    ``groups``: a union-find already holding other datasets' keys (so groups span datasets); the
    candidates' keys are added to it. A candidate without keys is a group of its own (its id).
    """
    groups = groups if groups is not None else ConceptGroups()
    keyed = [(c, c.keys or (f"id:{c.record.id}",)) for c in candidates]
    for _, keys in keyed:
        groups.add(keys)
    records, dropped, seen_unique = [], Counter(), set()
    split_of: dict[str, str] = {}
    for c, keys in keyed:
        g = groups.group(keys)
        gs = split_of.setdefault(g, group_split(g, fractions, seed))
        split = c.roles[GROUP_SPLITS.index(gs)]
        if split is None:
            dropped[f"{c.record.source}_in_{gs}_concept_unused"] += 1
            continue
        if gs != "train" and c.unique is not None:
            if (split, c.unique) in seen_unique:
                dropped[f"{split}_duplicate_caption"] += 1
                continue
            seen_unique.add((split, c.unique))
        records.append(replace(c.record, split=split))
    return records, dropped, split_of


def leaks(records_keys: Iterable[tuple[str, Sequence[str]]], heldout_splits: Iterable[str],
          train_splits: Iterable[str] = ("train", "train-extra")) -> set:
    """Concept groups found both in a training split and in a held-out-concept split (should be
    empty). ``records_keys``: (split, keys) per record; groups are recomputed from the keys alone."""
    pairs = [(s, tuple(k for k in keys if k)) for s, keys in records_keys]
    groups = ConceptGroups()
    for _, keys in pairs:
        groups.add(keys)
    train_splits, heldout_splits = set(train_splits), set(heldout_splits)
    sides = defaultdict(set)
    for split, keys in pairs:
        if keys and (split in train_splits or split in heldout_splits):
            sides[groups.group(keys)].add(split in train_splits)
    return {g for g, s in sides.items() if len(s) == 2}
