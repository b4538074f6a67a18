"""Webdataset shards from a folder of images or a JSONL manifest (data/webdataset.py, writer side),
read back by the reader `tokenspace encode` uses (TarCollection)."""
from __future__ import annotations

import json
import tarfile

import pytest
from PIL import Image

from tokenspace.data.images import ImageLoadError, check_image, load_image
from tokenspace.data.webdataset import (
    TarCollection,
    decode_image_bytes,
    folder_sources,
    manifest_sources,
    shard_pattern,
    write_sample_shards,
)


def _folder(root):
    (root / "pets").mkdir(parents=True)
    Image.new("RGB", (20, 10), (255, 0, 0)).save(root / "red_heart.png")
    (root / "red_heart.txt").write_text("a red heart\n")
    Image.new("RGB", (12, 12), (0, 0, 255)).save(root / "pets" / "my.cat.jpg")
    Image.new("P", (8, 8)).save(root / "pets" / "dog.gif")  # not a reader format: stored as PNG
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    (root / "notes.md").write_text("not an image")
    (root / ".hidden").mkdir()
    Image.new("RGB", (4, 4)).save(root / ".hidden" / "x.png")  # hidden folders are not the user's images
    return root


def test_folder_round_trip(tmp_path):
    src = _folder(tmp_path / "imgs")
    sources = folder_sources(src)
    assert [s.key for s in sources] == ["broken", "pets/dog", "pets/my_cat", "red_heart"]
    report = write_sample_shards(sources, tmp_path / "out", per_shard=2)
    assert report.written == 3 and report.converted == 1
    assert report.skipped == [(str(src / "broken.png"), "not a recognised image format")]
    assert report.captions == {"file name": 2, "sidecar": 1}
    assert [p.rsplit("/", 1)[1] for p in report.shards] == ["shard-000000.tar", "shard-000001.tar"]
    c = TarCollection.open(shard_pattern(report.shards))
    assert c.keys == ["pets/dog", "pets/my_cat", "red_heart"] and c.skipped == 0
    assert c.texts == ["dog", "my cat", "a red heart"]
    assert c.image(2).size == (20, 10) and c.image(1).size == (12, 12) and c.image(0).size == (8, 8)
    # the reader's formats go in byte for byte
    assert c.image_bytes(2) == (src / "red_heart.png").read_bytes()
    with tarfile.open(report.shards[0]) as tar:  # no temporary file left, no metadata member for folders
        assert sorted(tar.getnames()) == ["pets/dog.png", "pets/dog.txt", "pets/my_cat.jpg", "pets/my_cat.txt"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["shard-000000.tar", "shard-000001.tar"]
    with pytest.raises(ValueError, match="already holds shards"):
        write_sample_shards(sources, tmp_path / "out")


def test_manifest_with_keys_and_metadata(tmp_path):
    src = _folder(tmp_path / "imgs")
    m = tmp_path / "imgs" / "list.jsonl"
    rows = [{"image": "red_heart.png", "caption": "love", "license": "CC0", "tags": ["a", "b"]},
            {"path": "pets/my.cat.jpg", "key": "cat-1"},
            {"image": str(src / "pets" / "dog.gif"), "text": "a dog"}]
    m.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    sources = manifest_sources(m)
    assert [(s.key, s.caption, s.caption_from) for s in sources] == [
        ("red_heart", "love", "manifest"), ("cat-1", "my cat", "file name"), ("pets/dog", "a dog", "manifest")]
    report = write_sample_shards(sources, tmp_path / "out")
    c = TarCollection.open(report.shards)
    assert c.keys == ["red_heart", "cat-1", "pets/dog"] and c.texts == ["love", "my cat", "a dog"]
    with tarfile.open(report.shards[0]) as tar:
        meta = json.loads(tar.extractfile("red_heart.json").read())
        assert meta == {"license": "CC0", "tags": ["a", "b"]}
        assert "cat-1.json" not in tar.getnames()


@pytest.mark.parametrize("line, message", [
    ('{"image": "red_heart.png"', "list.jsonl:1: not a JSON object"),
    ('["red_heart.png"]', "expected a JSON object, got list"),
    ('{"caption": "x"}', 'needs the image file as "image"'),
    ('{"image": "nope.png"}', "image .*nope.png not found \\(paths are relative to the manifest's folder\\)"),
    ('{"image": "red_heart.png", "caption": 3}', '"caption" must be a string'),
    ('{"image": "red_heart.png", "key": "a.b"}', "cannot hold a dot"),
    ('{"image": "red_heart.png"}\n{"image": "red_heart.png"}', "two images have the key 'red_heart'"),
])
def test_manifest_errors_name_the_line(tmp_path, line, message):
    _folder(tmp_path)
    m = tmp_path / "list.jsonl"
    m.write_text(line + "\n")
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        manifest_sources(m)


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        folder_sources(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        folder_sources(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such file"):
        manifest_sources(tmp_path / "missing.jsonl")
    Image.new("RGB", (4, 4)).save(tmp_path / "empty" / "a.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "empty" / "a.jpg")
    with pytest.raises(ValueError, match="two images have the key 'a'"):
        folder_sources(tmp_path / "empty")


def test_decompression_bomb_is_a_counted_refusal_not_a_warning(tmp_path, recwarn):
    """Pillow warns from 89 megapixels: our limit is lower, so such an image is refused as too large
    (one ImageLoadError the callers count), without Pillow's raw warning."""
    big = tmp_path / "big.png"
    Image.new("1", (10_000, 9_000)).save(big)  # 90 megapixels, a few kB as a 1-bit PNG
    for read in (check_image, load_image):
        with pytest.raises(ImageLoadError, match="too large to decode \\(10000 x 9000 pixels\\)"):
            read(big)
    with pytest.raises(ImageLoadError, match="too large"):
        decode_image_bytes(big.read_bytes(), "shard.tar:big")
    assert not [w for w in recwarn if issubclass(w.category, Image.DecompressionBombWarning)]
