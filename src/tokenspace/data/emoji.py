"""Emoji builder: every installed artist's drawings of the same concepts, with CLDR text, split by concept.

Inputs (installed by ``tokenspace.assets``; the ``sources`` mapping is asset name -> folder):
  emoji-datasource-{google,twitter,apple,facebook}: ``emoji.json`` (``unified`` like "0023-FE0F-20E3",
      ``image``, ``has_img_<artist>``; skin tones only under ``skin_variations``) + ``img/<artist>/64/``.
  emojibase-data: ``en/data.json`` (``hexcode``, ``label``, ``tags``, ``group``): the text of every emoji.
  openmoji: ``data/openmoji.json`` (``hexcode``, ``skintone``) and ``color/svg/<hexcode>.svg``.
  Iconify sets (noto, twemoji, fluent-emoji-flat, fluent-emoji-high-contrast: ``chars.json`` maps
      codepoints to icon names; emojione and fluent-emoji (3D) have none, see ``name_index``).

The join key is the hexcode without FE0F variation selectors. Text = "<CLDR label> — <tag>, ...".
Skin-tone variants are left out (near-identical pictures that would multiply the feature cache by six
for the people emoji); gender variants are separate CLDR concepts and kept, grouped with their base
for the split (``concept_hex``).

Dedupe: ``noto`` redraws nothing new over ``emoji-datasource-google`` (both are Google's Noto Emoji)
and ``twemoji`` nothing over ``emoji-datasource-twitter``; per (family, emoji) one drawing is kept, the
datasource PNG first, the Iconify SVG only for emoji the PNG set lacks. The report counts the overlap.

Splits (concept groups shared with every other dataset, ``splits.assign``):
  train          Google + Twitter drawings of training concepts (the two artists of earlier releases)
  train-extra    every other training artist (Apple, Facebook, Fluent flat / 3D, EmojiOne) on training concepts
  val            Google drawings of validation concepts (for tuning)
  test           OpenMoji drawings of test concepts (unseen concepts by an unseen artist)
  test-hc        Fluent high-contrast drawings of test concepts (unseen concepts, unseen line-art artist)
  test-concepts  Google drawings of test concepts (unseen concepts, seen artist)
  test-artists   OpenMoji drawings of training concepts (seen concepts, unseen artist)
  test-artists-hc  Fluent high-contrast drawings of training concepts
OpenMoji and Fluent high-contrast are never in a training split.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tokenspace.data.iconify import IconSet, read_iconify
from tokenspace.data.manifest import Record
from tokenspace.data.render import finish
from tokenspace.data.splits import Candidate, assign, caption_key

SKIN_TONES = {"1F3FB", "1F3FC", "1F3FD", "1F3FE", "1F3FF"}
GENDER_SIGNS = {"2640", "2642"}
# man / woman / person, boy / girl / child, old man / old woman / older person: one concept each
PEOPLE = {"1F468": "P", "1F469": "P", "1F9D1": "P", "1F466": "C", "1F467": "C", "1F9D2": "C",
          "1F474": "O", "1F475": "O", "1F9D3": "O"}
COMPONENT_GROUP = 2  # emojibase group of the bare skin-tone and hair swatches: not concepts
GROUP_NAMES = ["Smileys & Emotion", "People & Body", "Component", "Animals & Nature", "Food & Drink",
               "Travel & Places", "Activities", "Objects", "Symbols", "Flags"]


@dataclass(frozen=True)
class Artist:
    name: str  # record source is "emoji-<name>"
    asset: str  # asset the drawings come from
    family: str  # artists of one family draw the same artwork: one copy per emoji is kept
    roles: tuple  # record split when the concept group is train / val / test (None: not used)


ARTISTS = [
    Artist("google", "emoji-google", "google", ("train", "val", "test-concepts")),
    Artist("noto", "iconify-noto", "google", ("train", "val", "test-concepts")),
    Artist("twitter", "emoji-twitter", "twitter", ("train", None, None)),
    Artist("twemoji", "iconify-twemoji", "twitter", ("train", None, None)),
    Artist("apple", "emoji-apple", "apple", ("train-extra", None, None)),
    Artist("facebook", "emoji-facebook", "facebook", ("train-extra", None, None)),
    Artist("fluent-flat", "iconify-fluent-emoji-flat", "fluent-flat", ("train-extra", None, None)),
    Artist("fluent-3d", "iconify-fluent-emoji", "fluent-3d", ("train-extra", None, None)),
    Artist("emojione", "iconify-emojione", "emojione", ("train-extra", None, None)),
    Artist("openmoji", "openmoji", "openmoji", ("test-artists", None, "test")),
    Artist("fluent-hc", "iconify-fluent-emoji-high-contrast", "fluent-hc", ("test-artists-hc", None, "test-hc")),
]
REQUIRED = ("emoji-google", "emoji-twitter", "emojibase", "openmoji")


def norm_hex(code: str) -> str:
    """Join key: uppercase, without FE0F variation selectors ("0023-fe0f-20e3" -> "0023-20E3")."""
    return "-".join(p for p in code.upper().split("-") if p and p != "FE0F")


def concept_hex(key: str) -> str:
    """The codepoints with skin tones and gender removed: "man golfing: dark skin tone"
    (1F3CC-1F3FF-200D-2642) and "person golfing" (1F3CC) give the same "1F3CC"."""
    out: list[str] = []
    for p in key.split("-"):
        if p in SKIN_TONES:
            continue
        if p in GENDER_SIGNS:
            if out and out[-1] == "200D":
                out.pop()
            continue
        out.append(PEOPLE.get(p, p))
    while out and out[-1] == "200D":
        out.pop()
    return "-".join(out)


def has_skin_tone(key: str) -> bool:
    return any(p in SKIN_TONES for p in key.split("-"))


def slug(label: str) -> str:
    """An Iconify-style name: "flag: Fiji" -> "flag-fiji", "Woman Golfing" -> "woman-golfing"."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower().replace("’", "").replace("'", "")).strip("-")


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


# ----------------------------------------------------------------------------- per-source drawings
def datasource_images(folder: Path, artist: str, skipped: Counter) -> dict[str, Path]:
    """emoji key -> 64 px PNG of one emoji-datasource artist (base emoji only)."""
    out = {}
    for e in _load_json(folder / "emoji.json"):
        key = norm_hex(e["unified"])
        img = folder / "img" / artist / "64" / e["image"]
        if not e.get(f"has_img_{artist}", True) or not img.is_file() or img.stat().st_size == 0:
            skipped["no_image"] += 1
            continue
        out.setdefault(key, img)
        skipped["skin_tone_variant"] += len(e.get("skin_variations") or {})
    return out


def name_index(sets: dict[str, IconSet], cldr: list[dict]) -> dict[str, str | None]:
    """Icon name -> emoji key, for sets without chars.json: the names other sets' chars.json give to
    codepoints, plus the CLDR labels (and skin-tone labels) written as Iconify names. A name two
    sources give different codepoints is ambiguous (None): skipped, never guessed."""
    index: dict[str, str | None] = {}

    def put(name, key):
        if name in index and index[name] != key:
            index[name] = None
        else:
            index[name] = key

    for s in sets.values():
        for code, name in s.chars.items():
            put(name, norm_hex(code))
    for e in cldr:
        put(slug(e.get("label", "")), norm_hex(e["hexcode"]))
        for sk in e.get("skins") or []:
            put(slug(sk.get("label", "")), norm_hex(sk["hexcode"]))
    return index


def iconify_images(iconset: IconSet, index: dict[str, str | None], skipped: Counter) -> dict[str, str]:
    """emoji key -> icon name. Joined through the set's own chars.json when it has one, else through
    ``name_index``; every icon that does not join is counted."""
    if iconset.chars:
        by_name: dict[str, set] = {}
        for code, name in iconset.chars.items():
            by_name.setdefault(name, set()).add(norm_hex(code))
        lookup = {n: (next(iter(k)) if len(k) == 1 else None) for n, k in by_name.items()}
    else:
        lookup = index
    out = {}
    for name in sorted(iconset.icons):
        if name not in lookup:
            skipped["no_join"] += 1
            continue
        if lookup[name] is None:
            skipped["ambiguous_join"] += 1
            continue
        skipped["joined"] += 1
        if has_skin_tone(lookup[name]):
            skipped["skin_tone_variant"] += 1
        else:
            out.setdefault(lookup[name], name)
    skipped["alias"] += iconset.aliases
    skipped["hidden"] += iconset.hidden
    return out


def openmoji_images(folder: Path, skipped: Counter) -> dict[str, Path]:
    out = {}
    for e in _load_json(folder / "data" / "openmoji.json"):
        key = norm_hex(e["hexcode"])
        if e.get("skintone") or has_skin_tone(key):
            skipped["skin_tone_variant"] += 1
            continue
        img = folder / "color" / "svg" / f"{e['hexcode']}.svg"
        if not img.is_file() or img.stat().st_size == 0:
            skipped["no_image"] += 1
            continue
        out.setdefault(key, img)
    return out


# ----------------------------------------------------------------------------- candidates
def emoji_candidates(sources: dict[str, Path], render_root: Path) -> tuple[list[Candidate], dict, dict]:
    """Candidates (every artist's drawing of every CLDR emoji, one per family), the report so far, and
    the SVGs to render: ``{png path: (IconSet, icon name)}``."""
    missing = [n for n in REQUIRED if n not in sources]
    if missing:
        raise FileNotFoundError(f"emoji builder needs the assets {missing}")
    cldr = _load_json(Path(sources["emojibase"]) / "en" / "data.json")
    concepts: dict[str, dict] = {}
    components: set[str] = set()
    text_skipped: Counter = Counter()
    for e in cldr:
        key = norm_hex(e["hexcode"])
        if e.get("group") == COMPONENT_GROUP:
            text_skipped["component"] += 1
            components.add(key)
            continue
        text = emoji_text(e.get("label", ""), e.get("tags"))
        if not text.strip():
            text_skipped["no_text"] += 1
            continue
        group = e.get("group")
        concepts.setdefault(key, {
            "text": text, "label": GROUP_NAMES[group] if isinstance(group, int) and group < len(GROUP_NAMES) else None,
            "keys": tuple(k for k in (f"emoji:{concept_hex(key)}", "cap:" + caption_key(e.get("label", "")))
                          if not k.endswith(":")),
        })

    iconsets = {a.asset: read_iconify(sources[a.asset]) for a in ARTISTS
                if a.asset.startswith("iconify-") and a.asset in sources}
    index = name_index(iconsets, cldr)
    per_artist: dict[str, dict] = {}
    skipped: dict[str, Counter] = {}
    jobs: dict[str, tuple[IconSet, str]] = {}
    for a in ARTISTS:
        if a.asset not in sources:
            continue
        sk = skipped.setdefault(a.name, Counter())
        folder = Path(sources[a.asset])
        if a.asset.startswith("emoji-"):
            per_artist[a.name] = datasource_images(folder, a.name, sk)
        elif a.asset == "openmoji":
            per_artist[a.name] = openmoji_images(folder, sk)
        else:
            s = iconsets[a.asset]
            names = iconify_images(s, index, sk)
            out_dir = Path(render_root) / a.name
            per_artist[a.name] = {k: out_dir / f"{n}.png" for k, n in names.items()}
            for k, n in names.items():
                jobs[str(out_dir / f"{n}.png")] = (s, n)

    candidates: list[Candidate] = []
    kept_family: dict[tuple[str, str], str] = {}
    overlap: Counter = Counter()
    for a in ARTISTS:
        for key, img in sorted(per_artist.get(a.name, {}).items()):
            sk = skipped[a.name]
            if key not in concepts:
                sk["component" if key in components else "no_cldr_text"] += 1
                continue
            first = kept_family.setdefault((a.family, key), a.name)
            if first != a.name:
                sk[f"same_drawing_as_{first}"] += 1
                overlap[f"{first}+{a.name}"] += 1
                continue
            c = concepts[key]
            rec = Record(id=f"emoji-{a.name}:{key}", image=str(img), text=c["text"], split="",
                         label=c["label"], source=f"emoji-{a.name}")
            candidates.append(Candidate(rec, c["keys"], a.roles))
    for a in ARTISTS:  # drawings of a family-mate that the first artist lacks
        if a.family != a.name and a.name in per_artist:
            only = sum(1 for (fam, key), who in kept_family.items() if fam == a.family and who == a.name)
            overlap[f"{a.name}_only"] = only
    report = {
        "concepts": len(concepts),
        "cldr_skipped": dict(text_skipped),
        "artists": {a.name: {"drawings": len(per_artist[a.name]), "skipped": {k: v for k, v in skipped[a.name].items() if v}}
                    for a in ARTISTS if a.name in per_artist},
        "missing_artists": [a.asset for a in ARTISTS if a.asset not in sources],
        "family_overlap": dict(overlap),
    }
    for a in ARTISTS:
        if a.asset.startswith("iconify-") and a.name in per_artist:
            s = iconsets[a.asset]
            total = len(s.icons)
            report["artists"][a.name]["icons"] = total
            joined = report["artists"][a.name]["skipped"].pop("joined", 0)
            report["artists"][a.name]["joined"] = joined  # icons with a codepoint (skin tones included)
            report["artists"][a.name]["joined_by"] = "chars.json" if s.chars else "name (name_index)"
            report["artists"][a.name]["join_rate"] = round(joined / total, 4) if total else 0.0
    return candidates, report, jobs


def build_emoji(sources: dict[str, Path], render_root: Path, fractions: dict | None = None, seed: int = 0,
                render: bool = True) -> tuple[list[Record], dict]:
    """Emoji records alone (concept groups from emoji keys only); ``build_manifests`` groups across
    every dataset instead."""
    fractions = fractions or {"test": 0.2, "val": 0.1}
    cands, report, jobs = emoji_candidates(sources, render_root)
    records, dropped, _ = assign(cands, fractions, seed)
    return finish(records, report, dropped, jobs, render)
