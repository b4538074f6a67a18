"""`tokenspace index build --images DIR` and `--manifest FILE.jsonl`: a user's own folder of images indexed in
one command, on the road every build takes (encode.py's resumable parts, the model's ranking), with the
keys and captions `tokenspace shards` gives the same files; `search` and the HTTP service work on the
result at once. A tiny folder drawn here, a tiny model built here; Ctrl-C raised inside the encoding."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tokenspace.cli import main
from tokenspace.data.webdataset import folder_sources
from tokenspace.index import InvertedIndex

COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
SHAPES = ["dog", "cat", "car", "tree"]


def draw(color: str, shape: int, size: int = 32):
    """A white square with one coloured quarter (which quarter: the shape), as tests/conftest.py draws."""
    from PIL import Image

    img = np.full((size, size, 3), 255, np.uint8)
    q = size // 2
    r, c = divmod(shape, 2)
    img[r * q:(r + 1) * q, c * q:(c + 1) * q] = COLORS[color]
    return Image.fromarray(img)

FAST = ["--tower", "torch", "--workers", "0", "--part-size", "4", "--batch-size", "4"]


@pytest.fixture
def photos(make_model, tmp_path, monkeypatch, restore_cli_logging):
    """(model folder, image folder): 12 drawings in nested folders, some captioned by a .txt beside them,
    the others by their file names, and one file that is not an image at all."""
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "home"))
    make_model("stair").save_pretrained(tmp_path / "model")
    root = tmp_path / "Pictures"
    for color in COLORS:
        for s, shape in enumerate(SHAPES):
            folder = root / color if s % 2 else root / color / "old"
            folder.mkdir(parents=True, exist_ok=True)
            draw(color, s).save(folder / f"{color}_{shape}.png")
            if s < 2:
                (folder / f"{color}_{shape}.txt").write_text(f"a {color} {shape}\n")
    (root / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    (root / "notes.md").write_text("not an image")  # not an image extension: never listed
    return tmp_path / "model", root


def build(model, out, *source) -> int:
    return main(["index", "build", "--model", str(model), *source, "--out", str(out), *FAST])


def test_a_folder_is_indexed_searched_and_served(photos, tmp_path, capsys):
    model, root = photos
    out = tmp_path / "idx"
    assert build(model, out, "--images", str(root)) == 0
    cap = capsys.readouterr()
    assert "indexed 12 images" in cap.out and "1 unreadable skipped" in cap.out, cap.out
    assert f"tokenspace search --index {out}" in cap.out
    assert "it/s" in cap.err or "%|" in cap.err  # a progress bar
    index = InvertedIndex.load(out)
    want = {s.key: s.caption for s in folder_sources(root) if s.key != "broken"}  # what `shards` would write
    assert sorted(index.ids()) == sorted(want)
    meta = dict(zip(index.ids(), index.metadata(index.ids())))
    assert {k: m["caption"] for k, m in meta.items()} == want
    assert meta["red/red_tree"]["caption"] == "red tree"  # from its name
    assert meta["red/old/red_dog"]["caption"] == "a red dog"  # from red_dog.txt
    assert Path(meta["red/red_tree"]["image"]).is_file()
    assert index.info["model"] == str(model.resolve()) and "ranking" in index.info

    # searched with no --model (the index names it) ...
    assert main(["search", "--index", str(out), "a red dog", "-k", "3"]) == 0
    printed = capsys.readouterr().out
    assert printed.lstrip().startswith("1. ") and printed.count("  (") == 3
    # ... and served (the service the `serve` command runs)
    from fastapi.testclient import TestClient

    from tokenspace.searcher import Searcher
    from tokenspace.serve.app import create_app

    with TestClient(create_app(Searcher.open(out))) as client:
        r = client.post("/search", json={"text": "a blue car", "k": 2})
        assert r.status_code == 200 and len(r.json()["hits"]) == 2, r.text
        hit = r.json()["hits"][0]["id"]
        assert client.get(r.json()["hits"][0]["image_url"]).status_code == 200, hit


def test_a_manifest_of_files_keeps_its_fields_as_metadata(photos, tmp_path, capsys):
    model, root = photos
    manifest = tmp_path / "mine.jsonl"
    rows = [{"image": str(p), "caption": f"photo {n}", "album": "summer" if n % 2 else "winter"}
            for n, p in enumerate(sorted(root.rglob("*_*.png")))]
    rows[0]["key"] = "first"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "idx"
    assert build(model, out, "--manifest", str(manifest)) == 0
    index = InvertedIndex.load(out)
    assert len(index) == 12 and "first" in index.ids()
    (first,) = index.metadata(["first"])
    assert first["caption"] == "photo 0" and first["album"] == "winter"
    capsys.readouterr()
    assert main(["search", "--index", str(out), "a red dog", "--filter", "album=summer", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits and all(int(h["text"].split()[1]) % 2 for h in hits)


def test_bad_sources_are_named_before_the_model_loads(photos, tmp_path, capsys):
    model, root = photos
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build(tmp_path / "no-model", tmp_path / "a", "--images", str(empty)) == 1  # the folder first
    assert "--images" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # one source only: argparse's usage error
        build(model, tmp_path / "b", "--images", str(root), "--data", "x:test")
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_a_killed_folder_build_resumes_from_its_parts(photos, tmp_path, ctrl_c, capsys):
    model, root = photos
    assert build(model, tmp_path / "whole", "--images", str(root)) == 0
    ctrl_c.at, ctrl_c.calls = 2, 0  # Ctrl-C while the second part encodes (the first run only)
    out = tmp_path / "idx"
    assert build(model, out, "--images", str(root)) == 130
    assert "rerun the same command" in capsys.readouterr().err
    assert sorted(p.name for p in Path(f"{out}.parts").glob("part-*.npz")) == ["part-000000.npz"]
    ctrl_c.at, ctrl_c.calls = 0, 0
    assert build(model, out, "--images", str(root)) == 0
    assert ctrl_c.calls == 3  # the parts still missing (13 files in parts of 4: the second to the fourth)
    x, y = InvertedIndex.load(out), InvertedIndex.load(tmp_path / "whole")
    ids = sorted(x.ids())
    assert ids == sorted(y.ids()) and len(ids) == 12
    np.testing.assert_allclose(x.get(ids).values, y.get(ids).values, rtol=1e-6, atol=1e-7)
