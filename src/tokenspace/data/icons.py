"""Named icon sets (Iconify JSON) as extra concepts: the icon's name is the caption.

Text = the name's words plus the set's categories where it has them: mdi ``account-heart`` in
"Account / User" -> "account heart — account / user". One drawing per concept: a set that ships style
variants (ph ``dog-bold`` / ``dog-duotone`` / ``dog-fill``, material-symbols ``-rounded`` / ``-sharp`` /
``-outline``, tabler ``-filled``, mdi ``-outline``) keeps the plain one, so a concept is not counted
once per style. Semantic variants (``-off``, numbered alternates ``-2``, mdi ``-variant``, icon-park
``-one``) are dropped only when their base icon exists.

Splits come from the concept groups shared with every dataset (the normalised name is the key, so
"heart" in five sets is one concept): train / val / test by group; in val and test each caption
appears once (the first set in ``ICON_SETS`` order), so a held-out text has one matching image.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from tokenspace.data.iconify import IconSet, read_iconify
from tokenspace.data.manifest import Record
from tokenspace.data.render import finish
from tokenspace.data.splits import Candidate, assign, caption_key

ICON_SETS = ["game-icons", "mdi", "material-symbols", "tabler", "ph", "lucide", "healthicons", "icon-park",
             "flat-color-icons"]
_DIGITS = {str(d) for d in range(2, 10)}
# prefix -> (style suffixes, always stripped; alternate suffixes, stripped when the base icon exists)
VARIANTS: dict[str, tuple[set, set]] = {
    "ph": ({"thin", "light", "bold", "fill", "duotone"}, set()),
    "material-symbols": ({"rounded", "sharp", "outline"}, {"off"} | _DIGITS),
    "healthicons": ({"24px", "outline", "negative"}, {"alt"}),
    "mdi": ({"outline"}, {"off", "variant"} | _DIGITS),
    "tabler": ({"filled"}, {"off"} | _DIGITS),
    "lucide": (set(), {"off"} | _DIGITS),
    "icon-park": (set(), {"one", "two", "three", "four", "five"}),
    "game-icons": (set(), set()),
    "flat-color-icons": (set(), set()),
}
HELD_OUT_ROLES = ("train", "val", "test")


def _strip(name: str, suffixes: set) -> str:
    changed = True
    while changed:
        changed = False
        for s in suffixes:
            if name.endswith("-" + s) and len(name) > len(s) + 1:
                name, changed = name[: -len(s) - 1], True
    return name


def concept_names(names, prefix: str) -> tuple[dict[str, str], Counter]:
    """``{concept: icon name}`` with one icon per concept, and the counts of variants dropped."""
    style, alt = VARIANTS.get(prefix, (set(), set()))
    names = sorted(names)
    base = {n: _strip(n, style) for n in names}
    bases = set(base.values())
    concept = {}
    for n in names:
        b = base[n]
        a = _strip(b, alt)
        concept[n] = a if a != b and a in bases else b
    chosen: dict[str, str] = {}
    dropped: Counter = Counter()
    # the plain drawing first (its name is the concept), then the shortest name
    for n in sorted(names, key=lambda n: (n != concept[n], len(n), n)):
        c = concept[n]
        if c in chosen:
            dropped["style_variant" if base[n] == base[chosen[c]] else "alternate_variant"] += 1
        else:
            chosen[c] = n
    return chosen, dropped


def icon_text(concept: str, categories) -> str:
    words = " ".join(concept.replace("_", " ").split("-"))
    cats = [c.lower() for c in categories or [] if c.lower() != words]
    return f"{words} — {', '.join(cats)}" if cats else words


def icon_candidates(sources: dict[str, Path], render_root: Path) -> tuple[list[Candidate], dict, dict]:
    """Candidates of every installed set (``sources``: asset name -> folder), the report, the SVG jobs."""
    candidates, jobs, report = [], {}, {"sets": {}, "missing_sets": []}
    for prefix in ICON_SETS:
        folder = sources.get(f"iconify-{prefix}")
        if folder is None:
            report["missing_sets"].append(f"iconify-{prefix}")
            continue
        s: IconSet = read_iconify(folder)
        chosen, dropped = concept_names(s.icons, prefix)
        skipped = Counter(dropped, hidden=s.hidden, alias=s.aliases)
        out_dir = Path(render_root) / prefix
        n = 0
        for concept, name in sorted(chosen.items()):
            key = caption_key(concept.replace("-", " "))
            if not key:
                skipped["no_words"] += 1
                continue
            png = out_dir / f"{name}.png"
            cats = s.categories.get(name) or s.categories.get(concept)
            rec = Record(id=f"icon-{prefix}:{concept}", image=str(png), text=icon_text(concept, cats), split="",
                         label=(cats[0] if cats else prefix), source=f"icons-{prefix}")
            candidates.append(Candidate(rec, (f"cap:{key}",), HELD_OUT_ROLES, unique=key))
            jobs[str(png)] = (s, name)
            n += 1
        report["sets"][prefix] = {"icons": len(s.icons), "concepts": n, "license": s.license,
                                  "categories": bool(s.categories), "skipped": dict(skipped)}
    return candidates, report, jobs


def build_icons(sources: dict[str, Path], render_root: Path, fractions: dict | None = None, seed: int = 0,
                render: bool = True) -> tuple[list[Record], dict]:
    """Icon records alone (groups from icon names only); ``build_manifests`` groups across datasets."""
    cands, report, jobs = icon_candidates(sources, render_root)
    records, dropped, _ = assign(cands, fractions or {"test": 0.2, "val": 0.1}, seed)
    return finish(records, report, dropped, jobs, render)
