"""Reader for Iconify JSON icon sets (npm ``@iconify-json/<prefix>``).

Layout: ``icons.json`` = ``{"prefix", "width", "height", "icons": {name: {"body", "width"?, "height"?,
"left"?, "top"?, "hidden"?}}, "aliases": {name: {"parent", "hFlip"?, ...}}}``; ``chars.json`` maps a
codepoint sequence (lowercase hex, "-" joined, no FE0F) to an icon name (``{}`` in sets without one);
``metadata.json`` may hold ``categories: {category: [names]}``. An icon renders as
``<svg viewBox="left top W H">BODY</svg>``, W/H from the icon or the set's defaults.

Aliases are skipped (they repeat a parent drawing, at most flipped) and so are hidden icons (kept in
the set only for old links).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SVG_NS = 'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"'


@dataclass
class IconSet:
    prefix: str
    icons: dict[str, dict]  # visible, non-alias icons only
    width: int = 16
    height: int = 16
    chars: dict[str, str] = field(default_factory=dict)  # codepoints -> icon name
    categories: dict[str, list[str]] = field(default_factory=dict)  # icon name -> categories
    hidden: int = 0
    aliases: int = 0
    license: str = ""

    def svg(self, name: str) -> str:
        """The standalone SVG document of one icon."""
        icon = self.icons[name]
        w, h = icon.get("width", self.width), icon.get("height", self.height)
        left, top = icon.get("left", 0), icon.get("top", 0)
        return (f'<svg {SVG_NS} viewBox="{left} {top} {w} {h}" width="{w}" height="{h}">'
                f'{icon["body"]}</svg>')


def _json(path: Path, default):
    if not path.is_file():
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_iconify(folder: str | os.PathLike) -> IconSet:
    """Load one installed set (the folder holding ``icons.json``)."""
    folder = Path(folder)
    data = _json(folder / "icons.json", None)
    if not isinstance(data, dict) or "icons" not in data:
        raise ValueError(f"{folder / 'icons.json'} is not an Iconify JSON icon set")
    icons = {n: v for n, v in data["icons"].items() if not v.get("hidden")}
    cats: dict[str, list[str]] = {}
    for cat, names in (_json(folder / "metadata.json", {}).get("categories") or {}).items():
        for n in names:
            cats.setdefault(n, []).append(cat)
    info = _json(folder / "info.json", {})
    return IconSet(
        prefix=data.get("prefix", folder.name), icons=icons,
        width=data.get("width", 16), height=data.get("height", 16),
        chars=_json(folder / "chars.json", {}), categories=cats,
        hidden=len(data["icons"]) - len(icons), aliases=len(data.get("aliases") or {}),
        license=(info.get("license") or {}).get("spdx", ""),
    )
