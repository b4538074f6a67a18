"""OpenClipart builder: PNG drawings with text from their SVG twin's metadata.

Layout of the Debian packages (openclipart-png / openclipart-svg 0.18)::
    <root>/png/<category>[/<subfolder>...]/<name>.png
    <root>/svg/<category>[/<subfolder>...]/<name>.svg      (same relative paths)
Some entries are symlinks to a drawing filed under another category (1,221 of 8,121 PNGs); each
drawing is used once, under the category of its real file. The SVG metadata holds ``dc:title``,
``dc:description`` and keyword tags in ``dc:subject/rdf:Bag/rdf:li``; entities are sometimes
escaped twice (``&amp;quot;``).

Text = "<title> — <tag>, <tag>, ..." plus ". <description>" when the description is short.
Label = top-level category folder. Split by concept group (``splits.assign``): the normalised title is
the key, so drawings sharing a title (e.g. "Chemistry Flask" 01 and 02, near-duplicates) never
straddle the split, nor does a title that names an emoji or icon concept held out elsewhere.
"""
from __future__ import annotations

import html
import os
import re
from collections import Counter
from pathlib import Path

from tokenspace.data.manifest import Record
from tokenspace.data.render import finish
from tokenspace.data.splits import Candidate, assign, caption_key, subsample

# Tags that describe the archive, not the picture.
NOISE_TAGS = {"", "hash", "unsorted", "magick"}
MAX_DESCRIPTION = 100  # characters; long descriptions are prose about the author or the licence

_TITLE = re.compile(r"<dc:title>(.*?)</dc:title>", re.DOTALL)
_DESC = re.compile(r"<dc:description>(.*?)</dc:description>", re.DOTALL)
_SUBJECT = re.compile(r"<dc:subject>(.*?)</dc:subject>", re.DOTALL)
_LI = re.compile(r"<rdf:li>(.*?)</rdf:li>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
MAX_PNG_PIXELS = 16_000_000


def _pixels(png: Path) -> int:
    """Pixel count from the PNG header (no decoding); 0 when unreadable (the loader will report it)."""
    try:
        with open(png, "rb") as f:
            head = f.read(24)
        if head[:8] != b"\x89PNG\r\n\x1a\n":
            return 0
        return int.from_bytes(head[16:20], "big") * int.from_bytes(head[20:24], "big")
    except OSError:
        return 0


def _clean(s: str) -> str:
    s = html.unescape(html.unescape(s))  # some files escape entities twice
    return " ".join(_TAG.sub(" ", s).split())


def parse_svg_metadata(svg: str | os.PathLike) -> dict:
    """``{"title", "description", "tags"}`` from an SVG's RDF metadata (regex, not an XML parser:
    several files in the archive are not well-formed XML but their metadata block is fine)."""
    with open(svg, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    end = text.find("</metadata>")
    if end < 0:
        return {"title": "", "description": "", "tags": []}
    meta = text[:end]
    # The first dc:title is the work's; the creator/publisher agents' titles come later.
    title = _TITLE.search(meta)
    desc = _DESC.search(meta)
    subject = _SUBJECT.search(meta)
    tags = [_clean(t) for t in _LI.findall(subject.group(1))] if subject else []
    return {"title": _clean(title.group(1)) if title else "", "description": _clean(desc.group(1)) if desc else "",
            "tags": tags}


def clipart_text(title: str, tags, description: str = "") -> str:
    """'Saturn — astronomy, planet, space. The Planet Saturn' (noise tags and repeats dropped)."""
    seen, keep = {title.lower()}, []
    for t in tags:
        t = t.replace("_", " ").strip()
        if t.lower() not in NOISE_TAGS and t.lower() not in seen:
            seen.add(t.lower())
            keep.append(t)
    text = title
    if keep:
        text = f"{title} — {', '.join(keep)}" if title else ", ".join(keep)
    if description and len(description) <= MAX_DESCRIPTION and description.lower() != title.lower():
        text = f"{text}. {description}" if text else description
    return text.strip()


def name_from_file(rel: str) -> str:
    """'computer/buttons/pulsante_02_architetto_f_01' -> 'pulsante 02 architetto f'."""
    stem = rel.rsplit("/", 1)[-1]
    stem = re.sub(r"[_-]+0?\d?\d$", "", stem)  # the archive's _01/_02 version suffix
    return " ".join(re.split(r"[_\-.]+", stem)).strip()


def openclipart_candidates(root: str | os.PathLike, max_items: int | None = None, seed: int = 0,
                           collection_size: int = 20) -> tuple[list[Candidate], dict, dict]:
    """Candidates (split decided later by concept group), the report so far, and no render jobs.

    ``max_items`` subsamples deterministically (by seed); titles shared by ``collection_size`` or more
    drawings are replaced by the file name. The concept key is the normalised title, so drawings
    sharing a title (and the same name in another dataset) are one group.
    """
    root = Path(root)
    png_root, svg_root = root / "png", root / "svg"
    if not png_root.is_dir() or not svg_root.is_dir():
        raise FileNotFoundError(f"{root} must hold png/ and svg/ (the openclipart-png/-svg packages)")
    skipped: Counter = Counter()
    used_svg = 0
    items = []  # (rel, png path, svg path)
    for dirpath, dirnames, filenames in os.walk(png_root):
        dirnames.sort()
        for name in sorted(filenames):
            png = Path(dirpath) / name
            if not name.lower().endswith(".png"):
                continue
            if png.is_symlink():
                skipped["duplicate_link"] += 1  # the real file is listed under its own category
                continue
            rel = png.relative_to(png_root).as_posix()[: -len(".png")]  # not with_suffix: names hold dots
            svg = svg_root / f"{rel}.svg"
            if not svg.exists():
                skipped["no_svg"] += 1
                continue
            if png.stat().st_size == 0:
                skipped["empty_image"] += 1
                continue
            if _pixels(png) > MAX_PNG_PIXELS:
                # A few PNGs are rendered at poster size (up to 21k x 30k); their SVG renders small.
                used_svg += 1
                png = svg
            items.append((rel, png, svg))

    keep = subsample([rel for rel, _, _ in items], max_items, seed)
    if max_items is not None:
        skipped["not_in_subsample"] = len(items) - len(keep)
    metas = {rel: parse_svg_metadata(svg) for rel, _, svg in items if rel in keep}
    # A title shared by many drawings names a collection ("Lemon SVG theme", "gramastar"), not the
    # picture; the file name ("filesaveas", "cloudy02") says more, so it replaces such titles.
    title_counts = Counter(m["title"].lower() for m in metas.values())
    candidates = []
    for rel, png, svg in items:
        if rel not in keep:
            continue
        meta = metas[rel]
        if meta["title"] and title_counts[meta["title"].lower()] >= collection_size:
            meta = dict(meta, title=name_from_file(rel))
        text = clipart_text(meta["title"], meta["tags"], meta["description"])
        if not text:
            skipped["empty_text"] += 1
            continue
        key = caption_key(meta["title"])
        rec = Record(id=f"openclipart:{rel}", image=str(png), text=text, split="", label=rel.split("/")[0],
                     source="openclipart")
        candidates.append(Candidate(rec, (f"cap:{key}",) if key else (), ("train", "val", "test")))
    report = {"skipped": dict(skipped), "categories": len({c.record.label for c in candidates}),
              "svg_for_huge_png": used_svg}
    return candidates, report, {}


def build_openclipart(root: str | os.PathLike, fractions: dict | None = None, seed: int = 0,
                      max_items: int | None = None, collection_size: int = 20) -> tuple[list[Record], dict]:
    """OpenClipart records alone (title groups only; ``build_manifests`` groups across datasets), and a
    report ``{"splits", "skipped", "categories", "svg_for_huge_png"}``."""
    cands, report, jobs = openclipart_candidates(root, max_items, seed, collection_size)
    records, dropped, _ = assign(cands, fractions or {"test": 0.2, "val": 0.1}, seed)
    return finish(records, report, dropped, jobs, render=False)
