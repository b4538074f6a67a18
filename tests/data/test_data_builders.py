"""Builders on tiny fake package layouts mirroring the real ones (emoji-datasource, emojibase-data,
openmoji, Debian openclipart-png/-svg)."""
import json
import logging
import os
from collections import Counter

import pytest
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
            for _, h, name, _ in CONCEPTS] + [{"hexcode": "1F3FB", "label": "light skin tone", "tags": [],
                                              "group": 2}]
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


def test_concept_hex_groups_skin_tones_and_genders():
    from tokenspace.data.emoji import concept_hex

    # man golfing: dark skin tone / woman golfing / person golfing
    assert concept_hex("1F3CC-1F3FF-200D-2642") == concept_hex("1F3CC-200D-2640") == concept_hex("1F3CC") == "1F3CC"
    # man astronaut / woman astronaut / astronaut (person + rocket)
    assert concept_hex("1F468-200D-1F680") == concept_hex("1F469-1F3FB-200D-1F680") == concept_hex("1F9D1-200D-1F680")
    assert concept_hex("1F436") != concept_hex("1F431")


def test_emoji_split_by_concept(tmp_path):
    d = fake_emoji(tmp_path)
    recs, rep = build_emoji(d, tmp_path / "rendered", fractions={"test": 0.3, "val": 0.2})
    assert rep["concepts"] == 10 and rep["cldr_skipped"] == {"component": 1}
    assert rep["artists"]["google"]["skipped"]["no_cldr_text"] == 1  # 1F999 has no CLDR text
    by_concept = {}
    for r in recs:
        by_concept.setdefault(r.id.split(":")[1], set()).add((r.split, r.source))
    roles = {frozenset(s) for s in by_concept.values()}
    train = {("train", "emoji-google"), ("train", "emoji-twitter"), ("test-artists", "emoji-openmoji")}
    val = {("val", "emoji-google")}
    test = {("test-concepts", "emoji-google"), ("test", "emoji-openmoji")}
    for s in by_concept.values():
        # 1F401 has no Twitter drawing: its training set lacks that one record
        assert s in (train, val, test) or s == train - {("train", "emoji-twitter")}, s
    assert {frozenset(val), frozenset(test)} <= roles  # with these fractions both held-out kinds occur
    assert "-1F3FB" not in "".join(r.id for r in recs)  # no skin-tone variants anywhere
    heart = [r for r in recs if r.id.endswith(":2764")]
    assert heart and heart[0].text == "red heart — thing, red, tag"
    assert heart[0].label == "People & Body"  # emojibase group 1
    assert rep["splits"] == dict(sorted(Counter(r.split for r in recs).items()))
    again, _ = build_emoji(d, tmp_path / "rendered", fractions={"test": 0.3, "val": 0.2})
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
    recs, rep = build_openclipart(root, fractions={"test": 0.25, "val": 0.1}, collection_size=10)
    by_id = {r.id: r for r in recs}
    assert rep["skipped"] == {"duplicate_link": 1, "empty_text": 1}
    assert len(recs) == 15 and rep["categories"] == 3  # the "special" item had no text
    dog = by_id["openclipart:animals/dog_nicu_01"]
    assert dog.text == 'Dog — animal, pet dog. A "good" dog' and dog.label == "animals"
    assert by_id["openclipart:animals/birds/owl.v2_01"].text == "Owl — bird"
    assert by_id["openclipart:food/apple_01"].text == "Apple — fruit"
    assert by_id["openclipart:shapes/stars/star_3pt"].text == "star 3pt — stars, shapes"  # collection title
    assert rep["splits"]["test"] > 0 and sum(rep["splits"].values()) == 15


def test_openclipart_same_title_one_side_of_the_split(tmp_path):
    root = tmp_path / "oc"
    for i in range(8):  # eight titles, each drawn twice ("Chemistry Flask" 01 / 02)
        for v in (1, 2):
            _clip(root, f"science/thing{i}_{v:02d}", f"Thing Number {i}", ["science"])
    recs, rep = build_openclipart(root, fractions={"test": 0.3, "val": 0.2})
    sides = {}
    for r in recs:
        sides.setdefault(r.text, set()).add(r.split)
    assert len(recs) == 16 and all(len(s) == 1 for s in sides.values())
    assert len({next(iter(s)) for s in sides.values()}) > 1  # the titles do not all land together
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


@pytest.fixture
def build_log(caplog):
    """The build's log records. Listening on its own logger, not the root's: the CLI's setup_logging
    (run by any earlier cli test in this process) stops propagation at "tokenspace"."""
    logger = logging.getLogger("tokenspace.data.build")
    logger.addHandler(caplog.handler)
    with caplog.at_level(logging.INFO, logger=logger.name):
        yield caplog
    logger.removeHandler(caplog.handler)


def test_build_manifests_idempotent(tmp_path, monkeypatch, build_log, capsys, restore_cli_logging):
    from tokenspace import assets, cli
    from tokenspace.data import build

    fake_emoji(tmp_path / "data")
    fake_openclipart(tmp_path / "data" / "openclipart")
    present = {"emoji-google", "emoji-twitter", "emojibase", "openmoji", "openclipart"}

    def fake_path(name, home=None):  # the builders only need the asset folders: stand in for an install
        if name not in present:
            raise assets.AssetMissingError(f"{name} missing; get it with: {assets.ASSETS[name].command()}")
        return tmp_path / "data" / name

    monkeypatch.setattr(assets, "path", fake_path)
    out = build_manifests(tmp_path, progress=True)
    assert any(r.levelno == logging.INFO and "get it with: tokenspace assets install iconify-mdi" in r.getMessage()
               for r in build_log.records)  # named, not fatal
    assert {"emoji", "openclipart"} <= set(out) and not {"icons", "mnist", "fashion-mnist"} & set(out)
    assert out["emoji"].parent == tmp_path / "manifests" / f"v{build.BUILDER_VERSION}"
    emoji = read_manifest(out["emoji"])
    assert {"train", "test-artists"} <= {r.split for r in emoji}
    assert all(os.path.exists(r.image) for r in emoji)  # relative paths resolve back
    assert read_report(out["openclipart"])["concept_groups"]["leaked_groups"] == 0
    mtime = out["emoji"].stat().st_mtime_ns
    build_manifests(tmp_path, progress=False)
    assert out["emoji"].stat().st_mtime_ns == mtime  # up to date: not rewritten
    build_manifests(tmp_path, progress=False, seed=1)
    assert out["emoji"].stat().st_mtime_ns != mtime  # parameters changed: rebuilt
    # a dataset asked for by name whose input is missing: one error naming the install command
    with pytest.raises(assets.AssetMissingError, match="tokenspace assets install mnist"):
        build_manifests(tmp_path, progress=False, names=["mnist"])
    with pytest.raises(KeyError, match="unknown dataset"):
        build_manifests(tmp_path, progress=False, names=["nope"])
    # progress=False: the lines go to DEBUG, below what the CLI shows by default
    build_log.clear()
    build_manifests(tmp_path, progress=False, force=True)
    assert build_log.records == []
    # `tokenspace data build` shows its progress lines on stderr, the manifest paths on stdout
    capsys.readouterr()
    assert cli.main(["--home", str(tmp_path), "data", "build", "--only", "emoji"]) == 0
    std = capsys.readouterr()
    assert "[tokenspace] emoji: " in std.err and "emoji.jsonl" in std.err
    assert std.out.startswith("emoji: ") and "[tokenspace]" not in std.out
