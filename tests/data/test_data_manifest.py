import json

import pytest

from tokenspace.data.manifest import (
    ManifestError,
    Record,
    drop_empty_texts,
    read_manifest,
    split_counts,
    write_manifest,
)


def test_round_trip_relative_paths_and_captions(tmp_path):
    img = tmp_path / "imgs" / "a.png"
    recs = [
        Record("a", str(img), "a dog", "train", label="animal", source="x"),
        Record("b", str(tmp_path / "imgs" / "b.png"), "cat one", "test", captions=("cat one", "cat two")),
    ]
    path = write_manifest(recs, tmp_path / "m" / "man.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["image"] == "../imgs/a.png"  # relative to the manifest's folder
    assert "captions" not in lines[0] and lines[1]["captions"] == ["cat one", "cat two"]
    back = read_manifest(path)
    assert back == recs
    assert back[1].texts == ("cat one", "cat two") and back[0].texts == ("a dog",)
    assert read_manifest(path, split="test") == recs[1:]
    assert split_counts(back) == {"train": 1, "test": 1}
    assert [p.name for p in path.parent.iterdir()] == ["man.jsonl"]  # atomic write leaves no temp file


@pytest.mark.parametrize("line, msg", [
    ('{"id": "a", "image": "x.png", "text": "t"', "not valid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"id": "a", "image": "x.png", "split": "train"}', "missing field(s) text"),
    ('{"id": "a", "image": "x.png", "text": 3, "split": "train"}', "'text' must be a string"),
    ('{"id": "a", "image": "x.png", "text": "t", "split": "train", "bogus": 1}', "unknown field(s) bogus"),
])
def test_malformed_lines_name_the_line(tmp_path, line, msg):
    p = tmp_path / "m.jsonl"
    good = '{"id": "ok", "image": "y.png", "text": "t", "split": "train"}'
    p.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(ManifestError) as e:
        read_manifest(p)
    assert f"{p}:3" in str(e.value) and msg in str(e.value)


def test_duplicate_ids_rejected(tmp_path):
    p = tmp_path / "m.jsonl"
    row = '{"id": "a", "image": "y.png", "text": "t", "split": "train"}\n'
    p.write_text(row + row)
    with pytest.raises(ManifestError, match="duplicate id 'a' \\(first on line 1\\)"):
        read_manifest(p)


def test_empty_texts_dropped_and_counted():
    recs = [Record("a", "a.png", "dog", "train"), Record("b", "b.png", "  ", "train"), Record("c", "c.png", "", "x")]
    kept, dropped = drop_empty_texts(recs)
    assert [r.id for r in kept] == ["a"] and [r.id for r in dropped] == ["b", "c"]
