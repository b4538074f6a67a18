"""Emoji builder: three artists' drawings of the same concepts, with CLDR text, split by concept.

Inputs (installed by ``tokenspace.assets``):
  emoji-datasource-{google,twitter}: ``emoji.json`` (``unified`` like "0023-FE0F-20E3", ``image``,
      ``category``, ``has_img_<artist>``, skin tones only under ``skin_variations``) and
      ``img/<artist>/64/<image>``.
  emojibase-data: ``en/data.json`` (``hexcode``, ``label``, ``tags``).
  openmoji: ``data/openmoji.json`` (``hexcode``, ``skintone``) and ``color/svg/<hexcode>.svg``.

Emoji are joined on the hexcode with the ``FE0F`` variation selectors removed (each package writes
them differently). Text = "<CLDR label> — <tag>, <tag>, ...". Only base emoji: skin-tone variants
would put near-identical pictures of one concept on both sides of the split.

Splits, by concept (``held_out`` fraction, fixed seed):
  train = Google + Twitter drawings of the other concepts;
  val   = Google drawings of the held-out concepts;
  test  = OpenMoji drawings of the held-out concepts (unseen concepts by an unseen artist).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tokenspace.data.manifest import Record
from tokenspace.data.splits import holdout_set

ARTISTS = ("google", "twitter")
SKIP_CATEGORIES = {"Component"}  # the bare skin-tone swatches, not concepts


def norm_hex(code: str) -> str:
    """Join key: uppercase, without FE0F variation selectors ("0023-fe0f-20e3" -> "0023-20E3")."""
    return "-".join(p for p in code.upper().split("-") if p and p != "FE0F")


def emoji_text(label: str, tags) -> str:
    """'dog — animal, animals, dogs, pet' (tags deduplicated, the label itself left out)."""
    label = " ".join((label or "").split())
    seen, keep = {label.lower()}, []
    for t in tags or []:
        t = " ".join(str(t).split())
        if t and t.lower() not in seen:
            seen.add(t.lower())
            keep.append(t)
    if not label:
        return ", ".join(keep)
    return f"{label} — {', '.join(keep)}" if keep else label


def _load_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def build_emoji(google_dir, twitter_dir, emojibase_dir, openmoji_dir, holdout: float = 0.2,
                seed: int = 0) -> tuple[list[Record], dict]:
    """Records for all three splits and a report ``{"splits": {...}, "skipped": {...}, "concepts": {...}}``."""
    dirs = {"google": Path(google_dir), "twitter": Path(twitter_dir)}
    skipped: Counter = Counter()

    texts: dict[str, str] = {}
    for e in _load_json(Path(emojibase_dir) / "en" / "data.json"):
        texts.setdefault(norm_hex(e["hexcode"]), emoji_text(e.get("label", ""), e.get("tags")))

    # Concepts: base emoji of emoji-datasource (both artists share one emoji.json format).
    concepts: dict[str, dict] = {}
    for e in _load_json(dirs["google"] / "emoji.json"):
        key = norm_hex(e["unified"])
        if e.get("category") in SKIP_CATEGORIES or key in concepts:
            continue
        text = texts.get(key, "")
        if not text.strip():
            skipped["no_text"] += 1  # no CLDR text for it: nothing to train the text side on
            continue
        concepts[key] = {"text": text, "label": e.get("category"), "image": e["image"], "entry": e}
    heldout = holdout_set(concepts, holdout, seed)

    records: list[Record] = []
    for key in sorted(concepts):
        c = concepts[key]
        for artist in ARTISTS:
            if key in heldout and artist != "google":
                continue
            img = dirs[artist] / "img" / artist / "64" / c["image"]
            if not c["entry"].get(f"has_img_{artist}", True) or not img.is_file() or img.stat().st_size == 0:
                skipped[f"no_image_{artist}"] += 1
                continue
            records.append(Record(id=f"emoji-{artist}:{key}", image=str(img), text=c["text"],
                                  split="val" if key in heldout else "train", label=c["label"],
                                  source=f"emoji-{artist}"))

    om_dir = Path(openmoji_dir)
    seen = set()
    for e in _load_json(om_dir / "data" / "openmoji.json"):
        key = norm_hex(e["hexcode"])
        if e.get("skintone") or key not in heldout or key in seen:
            continue
        img = om_dir / "color" / "svg" / f"{e['hexcode']}.svg"
        if not img.is_file() or img.stat().st_size == 0:
            skipped["no_image_openmoji"] += 1
            continue
        seen.add(key)
        c = concepts[key]
        records.append(Record(id=f"openmoji:{key}", image=str(img), text=c["text"], split="test",
                              label=c["label"], source="openmoji"))

    splits = Counter(r.split for r in records)
    report = {
        "splits": {s: splits.get(s, 0) for s in ("train", "val", "test")},
        "skipped": dict(skipped),
        "concepts": {"total": len(concepts), "held_out": len(heldout), "held_out_in_openmoji": len(seen)},
    }
    return records, report
