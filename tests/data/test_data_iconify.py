"""Iconify JSON sets (named icons and emoji artists), the renderer and the cross-artist dedupe, on tiny
fixtures written here in the packages' own layouts."""
import json

import numpy as np
from PIL import Image
from test_data_builders import fake_emoji  # pytest puts this folder on sys.path

from tokenspace.data.emoji import build_emoji, emoji_candidates, name_index, slug
from tokenspace.data.iconify import read_iconify
from tokenspace.data.icons import build_icons, concept_names, icon_text
from tokenspace.data.images import load_image
from tokenspace.data.render import render_svgs
from tokenspace.data.splits import leaks

SQUARE = '<path fill="currentColor" d="M2 2h12v12H2z"/>'
DOT = '<circle cx="8" cy="8" r="5" fill="#e00"/>'


def write_set(folder, prefix, icons, chars=None, categories=None, aliases=None, width=16):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "icons.json").write_text(json.dumps(
        {"prefix": prefix, "width": width, "height": width, "icons": icons, "aliases": aliases or {}}))
    (folder / "chars.json").write_text(json.dumps(chars or {}))
    (folder / "metadata.json").write_text(json.dumps({"categories": categories} if categories else {}))
    (folder / "info.json").write_text(json.dumps({"prefix": prefix, "license": {"spdx": "MIT"}}))
    return folder


def test_named_icon_set_three_icons(tmp_path):
    # three icons: "dog", its bold style variant, and "heart" (plus a hidden one and an alias)
    d = write_set(tmp_path / "ph", "ph", {
        "dog": {"body": SQUARE}, "dog-bold": {"body": DOT}, "heart": {"body": DOT, "width": 32},
        "old-heart": {"body": DOT, "hidden": True},
    }, aliases={"puppy": {"parent": "dog"}}, categories={"Animals": ["dog"]})
    s = read_iconify(d)
    assert sorted(s.icons) == ["dog", "dog-bold", "heart"] and s.hidden == 1 and s.aliases == 1
    assert 'viewBox="0 0 32 16"' in s.svg("heart") and SQUARE in s.svg("dog")
    recs, rep = build_icons({"iconify-ph": d}, tmp_path / "rendered", fractions={"test": 0.0, "val": 0.0})
    assert sorted(r.id for r in recs) == ["icon-ph:dog", "icon-ph:heart"]
    assert rep["sets"]["ph"]["skipped"] == {"style_variant": 1, "hidden": 1, "alias": 1}
    dog = next(r for r in recs if r.id == "icon-ph:dog")
    assert dog.text == "dog — animals" and dog.label == "Animals" and dog.source == "icons-ph"
    assert dog.image.endswith("/ph/dog.png")  # the plain drawing, not dog-bold
    img = load_image(dog.image)  # rendered once to a PNG file; transparent parts on white
    assert img.size == (224, 224) and img.getpixel((112, 112)) == (0, 0, 0) and img.getpixel((2, 2)) == (255,) * 3
    assert rep["missing_sets"] and "iconify-mdi" in rep["missing_sets"]


def test_variants_collapse_to_one_concept():
    names = ["bell", "bell-off", "bell-filled", "bell-2", "wifi-off", "numeric-2", "alarm-filled"]
    chosen, dropped = concept_names(names, "tabler")
    assert chosen == {"bell": "bell", "wifi-off": "wifi-off", "numeric-2": "numeric-2", "alarm": "alarm-filled"}
    assert dropped == {"style_variant": 1, "alternate_variant": 2}
    ms, _ = concept_names(["home", "home-rounded", "home-outline-sharp", "home-outline"], "material-symbols")
    assert ms == {"home": "home"}
    assert icon_text("account-heart", ["Account / User"]) == "account heart — account / user"


def test_render_is_resumable_and_reports_bad_svg(tmp_path):
    good = f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">{DOT}</svg>'
    out = tmp_path / "a.png"
    assert render_svgs([(good, out), ("<svg><nope", tmp_path / "b.png")], workers=1, progress=False) == {
        str(tmp_path / "b.png"): render_svgs([("<svg><nope", tmp_path / "b.png")], workers=1, progress=False)[
            str(tmp_path / "b.png")]}
    assert Image.open(out).size == (224, 224) and not (tmp_path / "b.png").exists()
    mtime = out.stat().st_mtime_ns
    assert render_svgs([(good, out)], workers=2, progress=False) == {}
    assert out.stat().st_mtime_ns == mtime  # already there: not rendered again
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]  # no temporary left behind


def fake_artists(root):
    """The four required emoji sources plus: an emoji-datasource folder with two PNGs (apple), an
    Iconify set joined by chars.json (noto, the same artwork as google), one joined by name only
    (emojione) and the high-contrast test-only artist."""
    d = fake_emoji(root)
    apple = root / "emoji-apple"
    (apple / "img" / "apple" / "64").mkdir(parents=True)
    entries = [{"unified": "1F400", "image": "1f400.png", "has_img_apple": True},
               {"unified": "2764-FE0F", "image": "2764-fe0f.png", "has_img_apple": True},
               {"unified": "1F402", "image": "1f402.png", "has_img_apple": False}]
    (apple / "emoji.json").write_text(json.dumps(entries))
    for e in entries[:2]:
        Image.new("RGBA", (4, 4), (0, 0, 255, 255)).save(apple / "img" / "apple" / "64" / e["image"])
    d["emoji-apple"] = apple
    d["iconify-noto"] = write_set(root / "noto", "noto", {
        "thing-0": {"body": DOT}, "thing-9": {"body": DOT}, "thing-0-light-skin-tone": {"body": DOT},
        "mystery": {"body": DOT}}, chars={"1f400": "thing-0", "1f409": "thing-9", "1f400-1f3fb": "thing-0-light-skin-tone"})
    # no chars.json: joined through the CLDR labels as names ("thing 3" -> "thing-3") or not at all
    d["iconify-emojione"] = write_set(root / "emojione", "emojione", {
        "thing-3": {"body": DOT}, "red-heart": {"body": DOT}, "flag-for-nowhere": {"body": DOT}})
    d["iconify-fluent-emoji-high-contrast"] = write_set(root / "hc", "fluent-emoji-high-contrast", {
        f"thing-{i}": {"body": SQUARE} for i in range(8)}, chars={f"1f40{i}": f"thing-{i}" for i in range(8)})
    return d


def test_every_artist_joined_deduped_and_held_out(tmp_path):
    d = fake_artists(tmp_path)
    cands, rep, jobs = emoji_candidates(d, tmp_path / "rendered")
    arts = rep["artists"]
    assert arts["apple"]["drawings"] == 2 and arts["apple"]["skipped"] == {"no_image": 1}
    # noto: 3 of its 4 icons join by chars.json (one a skin tone, left out); "mystery" does not
    assert arts["noto"]["joined"] == 3 and arts["noto"]["join_rate"] == 0.75
    assert arts["noto"]["skipped"]["no_join"] == 1 and arts["noto"]["skipped"]["skin_tone_variant"] == 1
    # noto's 1F400 is the same artwork as emoji-datasource-google's: one copy kept (the PNG)
    assert arts["noto"]["skipped"]["same_drawing_as_google"] == 1
    assert rep["family_overlap"] == {"google+noto": 1, "noto_only": 0}
    ids = {c.record.id for c in cands}
    assert "emoji-google:1F400" in ids and "emoji-noto:1F400" not in ids
    assert "emoji-noto:1F409" not in ids  # 1F409 has no CLDR text in the fixture: counted, not guessed
    # emojione has no chars.json: two names equal CLDR labels, the third is skipped and counted
    assert arts["emojione"]["joined_by"].startswith("name") and arts["emojione"]["joined"] == 2
    assert {"emoji-emojione:1F403", "emoji-emojione:2764"} <= ids and arts["emojione"]["skipped"]["no_join"] == 1

    recs, rep = build_emoji(d, tmp_path / "rendered", fractions={"test": 0.3, "val": 0.2})
    by_source = {}
    for r in recs:
        by_source.setdefault(r.source, set()).add(r.split)
    assert by_source["emoji-fluent-hc"] <= {"test-hc", "test-artists-hc"}  # a test-only artist
    assert by_source["emoji-openmoji"] <= {"test", "test-artists"}
    for extra in ("emoji-apple", "emoji-emojione"):  # training-only artists: held-out concepts dropped
        assert by_source.get(extra, set()) <= {"train-extra"}
        kept = sum(r.source == extra for r in recs)
        assert kept + sum(v for k, v in rep["dropped"].items() if k.startswith(extra + "_in_")) == 2
    keys = {c.record.id: c.keys for c in cands}
    assert not leaks([(r.split, keys[r.id]) for r in recs], ("val", "test", "test-hc", "test-concepts"))
    for r in recs:  # every Iconify drawing that is kept was rendered to a PNG file
        if "/rendered/" in r.image:
            assert Image.open(r.image).size == (224, 224)


def test_name_index_marks_conflicts_ambiguous():
    class S:  # stands in for an IconSet: only chars is read
        def __init__(self, chars):
            self.chars = chars

    idx = name_index({"a": S({"1f600": "grin"}), "b": S({"1f601": "grin", "1f602": "joy"})},
                     [{"hexcode": "1F603", "label": "Big Smile"}])
    assert idx["grin"] is None and idx["joy"] == "1F602" and idx["big-smile"] == "1F603"
    assert slug("flag: Côte d’Ivoire") == "flag-c-te-divoire"


def test_svg_filters_are_rendered(tmp_path):
    """A blurred square must come out blurred: cairosvg drops <filter> (hard edges, only 0/255 alpha)."""
    from tokenspace.data.render import svg_to_png

    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><filter id="b"><feGaussianBlur '
           'stdDeviation="3"/></filter><rect x="8" y="8" width="16" height="16" fill="#000" filter="url(#b)"/></svg>')
    out = tmp_path / "blur.png"
    out.write_bytes(svg_to_png(svg, 64))
    alpha = np.asarray(Image.open(out).convert("RGBA"))[..., 3]
    soft = int(((alpha > 20) & (alpha < 235)).sum())
    assert soft > 300, soft  # a wide soft edge, not a crisp square
