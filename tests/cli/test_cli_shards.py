"""`tokenspace shards` then `tokenspace encode`: a user's folder of images (or a JSONL manifest) becomes an
index whose ids are the images' paths, as the README's lines run them."""
from __future__ import annotations

import json
import re

from tokenspace.index import InvertedIndex


def test_folder_to_shards_to_index(world, tmp_path):
    images = world.root / "img"  # 12 drawings and 12 unreadable files
    (images / "red-heart.txt").write_text("a heart, in red\n")  # a sidecar caption for one image that has none
    r = world.run("shards", "--images", images, "--out", tmp_path / "shards", "--per-shard", "5")
    assert r.code == 0, r.err
    assert "wrote 12 samples in 3 shard(s)" in r.out and "skipped 12 unreadable image(s)" in r.out
    assert "... and 9 more" in r.out  # three are named, the rest counted
    pattern = re.search(r"--shards '([^']+)'", r.out).group(1)
    assert pattern == f"{tmp_path / 'shards'}/shard-{{000000..000002}}.tar"
    r = world.run("encode", "--model", world.model, "--shards", pattern, "--index", tmp_path / "index",
                  "--tower", "torch", "--workers", "0")
    assert r.code == 0, r.err
    index = InvertedIndex.load(tmp_path / "index")
    good = sorted(p.stem for p in world.images)
    assert sorted(index.ids()) == good
    collection = tmp_path / "index" / "collection.json"
    if collection.exists():  # when encode records the captions: the sidecar's, else the file name's words
        items = json.loads(collection.read_text()).get("items", {})
        if items:
            assert items["red-heart"]["text"] == "a heart, in red"


def test_manifest_and_bad_input(world, tmp_path):
    manifest = tmp_path / "list.jsonl"
    rows = [{"image": str(p), "caption": f"drawing {p.stem}", "key": f"d{i}", "artist": "me"}
            for i, p in enumerate(world.images[:4])]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = world.run("shards", "--manifest", manifest, "--out", tmp_path / "s")
    assert r.code == 0, r.err
    assert "wrote 4 samples in 1 shard(s)" in r.out and "4 from manifest" in r.out
    r = world.run("shards", "--manifest", manifest, "--out", tmp_path / "s")  # the folder holds shards now
    assert r.code == 1 and "already holds shards" in r.error_line()
    manifest.write_text('{"image": "nope.png"}\n')
    r = world.run("shards", "--manifest", manifest, "--out", tmp_path / "s2")
    assert r.code == 1 and "list.jsonl:1: image" in r.error_line() and "not found" in r.error_line()
    r = world.run("shards", "--images", tmp_path / "nowhere", "--out", tmp_path / "s3")
    assert r.code == 1 and "no such folder" in r.error_line()
    r = world.run("shards", "--out", tmp_path / "s4")
    assert r.code == 2  # one of --images / --manifest is required
