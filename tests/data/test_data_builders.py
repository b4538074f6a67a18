"""Builders on tiny fake package layouts mirroring the real ones (emoji-datasource, emojibase-data,
openmoji, Debian openclipart-png/-svg)."""
import json
import os

from PIL import Image

from tokenspace.data.build import build_manifests, read_report
from tokenspace.data.emoji import build_emoji, norm_hex
from tokenspace.data.manifest import read_manifest
from tokenspace.data.openclipart import build_openclipart, parse_svg_metadata

# (unified as emoji-datasource writes it, emojibase hexcode, label, category)
CONCEPTS = [(f"1F4{i:02X}", f"1F4{i:02X}", f"thing {i}", "Objects") for i in range(8)] + [
    ("2764-FE0F", "2764", "red heart", "Smileys & Emotion"),  # FE0F only on one side of the join
    ("0023-FE0F-20E3", "0023-FE0F-20E3", "keycap: #", "Symbols"),
]


def _png(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGBA", (4, 4), (255, 0, 0, 255)).save(path)


def fake_emoji(root):
    entries = []
    for unified, _, _, cat in CONCEPTS + [("1F3FB", None, None, "Component"), ("1F999", None, None, "Objects")]:
        image = unified.lower() + ".png"
        entries.append({"unified": unified, "image": image, "category": cat, "short_name": "x",
                        "has_img_google": True, "has_img_twitter": unified != "1F401", "non_qualified": None,
                        "skin_variations": {"1F3FB": {"unified": unified + "-1F3FB", "image": "skin.png"}}})
    for artist in ("google", "twitter"):
        d = root / f"emoji-{artist}"
        d.mkdir(parents=True)
        (d / "emoji.json").write_text(json.dumps(entries))
        for e in entries:
            if artist == "google" or e["has_img_twitter"]:
                _png(d / "img" / artist / "64" / e["image"])
        _png(d / "img" / artist / "64" / "skin.png")
    base = [{"hexcode": h, "label": name, "tags": ["thing", name.split()[0], "tag"], "group": 1, "emoji": "?"}
            for _, h, name, _ in CONCEPTS] + [{"hexcode": "1F3FB", "label": "light skin tone", "tags": []}]
    (root / "emojibase" / "en").mkdir(parents=True)
    (root / "emojibase" / "en" / "data.json").write_text(json.dumps(base))
    om = root / "openmoji"
    (om / "data").mkdir(parents=True)
    rows = []
    for unified, _, label, _ in CONCEPTS:
        rows.append({"hexcode": unified, "annotation": label, "tags": "a, b", "skintone": ""})
        rows.append({"hexcode": unified + "-1F3FB", "annotation": label, "tags": "", "skintone": "1F3FB"})
    (om / "data" / "openmoji.json").write_text(json.dumps(rows))
    (om / "color" / "svg").mkdir(parents=True)
    for r in rows:
        (om / "color" / "svg" / f"{r['hexcode']}.svg").write_text(
            '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>')
    return {k: root / k for k in ("emoji-google", "emoji-twitter", "emojibase", "openmoji")}


def test_norm_hex():
    assert norm_hex("0023-fe0f-20e3") == "0023-20E3" and norm_hex("2764-FE0F") == "2764"


def test_emoji_split_by_concept(tmp_path):
    d = fake_emoji(tmp_path)
    recs, rep = build_emoji(d["emoji-google"], d["emoji-twitter"], d["emojibase"], d["openmoji"], holdout=0.2)
    assert rep["concepts"] == {"total": 10, "held_out": 2, "held_out_in_openmoji": 2}
    assert rep["skipped"]["no_text"] == 1  # 1F999 has no CLDR text; the Component swatch is not a concept
    concept = {}
    for r in recs:
        concept.setdefault(r.id.split(":")[1], set()).add((r.split, r.source))
    held = {c for c, s in concept.items() if ("test", "openmoji") in s}
    assert len(held) == 2
    for c, s in concept.items():
        if c in held:
            assert s == {("val", "emoji-google"), ("test", "openmoji")}
        else:
            assert {x[0] for x in s} == {"train"}
    assert "-1F3FB" not in "".join(r.id for r in recs)  # no skin-tone variants anywhere
    heart = [r for r in recs if r.id.endswith(":2764")]
    assert heart and heart[0].text == "red heart — thing, red, tag"
    assert heart[0].label == "Smileys & Emotion"
    # 1F401 has no Twitter drawing: counted, not crashed (unless it was held out, where Twitter isn't used)
    assert rep["skipped"].get("no_image_twitter", 0) == (0 if "1F401" in held else 1)
    assert rep["splits"] == {"train": sum(r.split == "train" for r in recs), "val": 2, "test": 2}
    again, _ = build_emoji(d["emoji-google"], d["emoji-twitter"], d["emojibase"], d["openmoji"], holdout=0.2)
    assert again == recs  # deterministic


SVG_META = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:cc="http://web.resource.org/cc/"
 xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" width="4" height="4">
  <metadata>
    <rdf:RDF>
      <cc:Work rdf:about="">
        <dc:title>{title}</dc:title>
        <dc:description>{desc}</dc:description>
        <dc:subject>
          <rdf:Bag>
{tags}
          </rdf:Bag>
        </dc:subject>
        <dc:creator><cc:Agent><dc:title>Some Author</dc:title></cc:Agent></dc:creator>
      </cc:Work>
    </rdf:RDF>
  </metadata>
  <rect width="4" height="4"/>
</svg>
"""


def _clip(root, rel, title, tags=(), desc=""):
    _png(root / "png" / f"{rel}.png")
    svg = root / "svg" / f"{rel}.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    svg.write_text(SVG_META.format(title=title, desc=desc,
                                   tags="\n".join(f"            <rdf:li>{t}</rdf:li>" for t in tags)))


def fake_openclipart(root):
    _clip(root, "animals/dog_nicu_01", "Dog", ["animal", "hash", "", "pet_dog"], "A &amp;quot;good&amp;quot; dog")
    _clip(root, "animals/birds/owl.v2_01", "Owl", ["bird"])  # dots in the name
    _clip(root, "food/apple_01", "Apple", ["fruit", "unsorted"], "x" * 300)  # long description left out
    _clip(root, "special/blank_01", "", ["", "hash"])  # nothing to say: empty text, skipped
    for i in range(12):
        _clip(root, f"shapes/stars/star_{i}pt", "gramastar", ["stars", "shapes"])
    # The Debian packages file some drawings under a second category as a symlink.
    (root / "png" / "people").mkdir(parents=True)
    os.symlink("../animals/dog_nicu_01.png", root / "png" / "people" / "dog_nicu_01.png")
    (root / "svg" / "people").mkdir(parents=True)
    os.symlink("../animals/dog_nicu_01.svg", root / "svg" / "people" / "dog_nicu_01.svg")
    return root


def test_parse_svg_metadata(tmp_path):
    root = fake_openclipart(tmp_path / "oc")
    meta = parse_svg_metadata(root / "svg" / "animals" / "dog_nicu_01.svg")
    assert meta == {"title": "Dog", "description": 'A "good" dog', "tags": ["animal", "hash", "", "pet_dog"]}


def test_openclipart_builder(tmp_path):
    root = fake_openclipart(tmp_path / "oc")
    recs, rep = build_openclipart(root, holdout=0.25, collection_size=10)
    by_id = {r.id: r for r in recs}
    assert rep["skipped"] == {"duplicate_link": 1, "empty_text": 1}
    assert len(recs) == 15 and rep["categories"] == 3  # the "special" item had no text
    dog = by_id["openclipart:animals/dog_nicu_01"]
    assert dog.text == 'Dog — animal, pet dog. A "good" dog' and dog.label == "animals"
    assert by_id["openclipart:animals/birds/owl.v2_01"].text == "Owl — bird"
    assert by_id["openclipart:food/apple_01"].text == "Apple — fruit"
    assert by_id["openclipart:shapes/stars/star_3pt"].text == "star 3pt — stars, shapes"  # collection title
    assert rep["splits"]["test"] > 0 and rep["splits"]["train"] + rep["splits"]["test"] == 15
    assert rep["svg_for_huge_png"] == 0


def test_openclipart_huge_png_replaced_by_svg(tmp_path, monkeypatch):
    from tokenspace.data import openclipart

    root = fake_openclipart(tmp_path / "oc")
    monkeypatch.setattr(openclipart, "MAX_PNG_PIXELS", 15)  # the fake PNGs are 4 x 4
    recs, rep = build_openclipart(root)
    assert rep["svg_for_huge_png"] == 16 and all(r.image.endswith(".svg") for r in recs)


def test_openclipart_subsample(tmp_path):
    root = fake_openclipart(tmp_path / "oc")
    sub, rep_sub = build_openclipart(root, max_items=5)
    assert len(sub) + rep_sub["skipped"].get("empty_text", 0) == 5
    assert build_openclipart(root, max_items=5)[0] == sub  # deterministic subsample


def test_build_manifests_idempotent(tmp_path, monkeypatch):
    from tokenspace import assets

    fake_emoji(tmp_path / "data")
    fake_openclipart(tmp_path / "data" / "openclipart")
    # The builders only need the asset folders; stand in for a verified install.
    monkeypatch.setattr(assets, "path", lambda name, home=None: tmp_path / "data" / name)
    out = build_manifests(tmp_path, progress=False)
    assert set(out) == {"emoji", "openclipart"}
    emoji = read_manifest(out["emoji"])
    assert {r.split for r in emoji} == {"train", "val", "test"}
    assert all(os.path.exists(r.image) for r in emoji)  # relative paths resolve back
    assert read_report(out["openclipart"])["splits"]["train"] > 0
    mtime = out["emoji"].stat().st_mtime_ns
    build_manifests(tmp_path, progress=False)
    assert out["emoji"].stat().st_mtime_ns == mtime  # up to date: not rewritten
    build_manifests(tmp_path, progress=False, seed=1)
    assert out["emoji"].stat().st_mtime_ns != mtime  # parameters changed: rebuilt
