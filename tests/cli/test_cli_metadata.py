"""Row metadata from the command line: `index build` stores each image's caption (and source)
and the fields of `--metadata FILE.jsonl`; `search --filter` filters on them inside the engine; bad
lines and bad filters are one-line errors."""
from __future__ import annotations

import json
import re

from tokenspace.index import InvertedIndex


def _hit_ids(out: str) -> list[str]:
    return re.findall(r"^\s*\d+\.\s+\S+\s+(\S+)", out, flags=re.M)  # rank. score id


def test_build_stores_captions_and_user_fields_and_search_filters_on_them(world, tmp_path):
    meta = tmp_path / "meta.jsonl"
    meta.write_text(json.dumps({"id": "red-dog", "owner": "ann", "year": 2020}) + "\n\n"
                    + json.dumps({"id": "blue-cat", "owner": "bob"}) + "\n")
    out = tmp_path / "idx"
    r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:train", "--out", out,
                  "--metadata", meta)
    assert r.code == 0, r.err
    index = InvertedIndex.load(out)
    rows = index.metadata(["red-dog", "blue-cat", "green-car"])
    assert [{k: v for k, v in row.items() if k != "image"} for row in rows] == [  # (and each image's file)
        {"caption": "a red dog", "owner": "ann", "year": 2020}, {"caption": "a blue cat", "owner": "bob"},
        {"caption": "a green car"}]
    assert all(row["image"].endswith(".png") for row in rows)

    r = world.run("search", "--index", out, "a red dog", "-k", "9", "--filter", "caption~red")
    assert r.code == 0, r.err
    hits = _hit_ids(r.out)
    assert hits and set(hits) == {"red-dog", "red-cat", "red-car"}  # every red image, whatever it scores
    r = world.run("search", "--index", out, "a dog", "-k", "9", "--filter", "owner=ann|bob", "--filter", "year=2020")
    assert r.code == 0 and _hit_ids(r.out) == ["red-dog"], r.out
    r = world.run("search", "--index", out, "a dog", "--filter", "owner=nobody")
    assert r.code == 0 and "no hits" in r.out


def test_bad_metadata_file_lines(world, tmp_path):
    cases = {
        "not json": ('{"id": "red-dog",\n', "meta.jsonl:1: not JSON"),
        "not an object": ('{"id": "red-dog"}\n[1, 2]\n', "meta.jsonl:2: expected a JSON object"),
        "no id": ('{"owner": "ann"}\n', 'meta.jsonl:1: needs "id"'),
        "twice": ('{"id": "red-dog"}\n{"id": "red-dog"}\n', "meta.jsonl:2: id 'red-dog' appears twice"),
        "unknown id": ('{"id": "purple-dog"}\n', "id(s) are not images of this collection, e.g. 'purple-dog'"),
    }
    for name, (text, why) in cases.items():
        meta = tmp_path / "meta.jsonl"
        meta.write_text(text)
        r = world.run("index", "build", "--model", world.model, "--data", f"{world.manifest}:test",
                      "--out", tmp_path / name, "--metadata", meta)
        assert r.code == 1 and why in r.error_line(), (name, r.err)
        assert not (tmp_path / name / "MANIFEST.json").exists()


def test_filter_on_an_index_without_metadata_is_refused(world):
    r = world.run("search", "--index", world.index, "a dog", "--filter", "source=emoji")  # built in code, no metadata
    assert r.code == 1 and "carries no row metadata" in r.error_line(), r.err


def test_bad_filters_are_usage_errors(world):
    for arg, why in {"owner": "expected field=value", "a b=1": "field name 'a b'", "caption~two words": "one word"}.items():
        r = world.run("search", "--index", world.index, "a dog", "--filter", arg)
        assert r.code == 2 and why in r.err, (arg, r.err)
        assert "Traceback" not in r.err


def test_search_takes_must_must_not_and_steer_as_the_http_api_does(world):
    """`search --must/--must-not/--steer`: the hits and scores are the
    library's explained_search over the same options, and bad tokens are one line naming the option."""
    from tokenspace.explain.search import explained_search, search_options
    from tokenspace.explain.steer import steer
    from tokenspace.models.registry import load

    index, model = InvertedIndex.load(world.index), load(world.model)
    plain = explained_search(index, model.encode_text(["a red dog"]), 12)
    top = plain[0].parts[0].token  # the (random) tiny model's rows all hold it
    for args, must, must_not, steering in (
        (["--must", top], [top], [], {}),
        (["--must-not", top, "--must-not", "red"], [], [top, "red"], {}),
        (["--steer", f"{top}=3", "--steer", "red=0"], [], [], {top: 3.0, "red": 0.0}),
    ):
        r = world.run("search", "--index", world.index, "a red dog", "-k", "12", *args)
        assert r.code == 0, r.err
        q = steer(model.encode_text(["a red dog"]), steering, model.vocab)
        want = explained_search(index, q, 12, **search_options(index, model.vocab, must=must, must_not=must_not))
        assert _hit_ids(r.out) == [h.id for h in want], (args, r.out)
        assert re.findall(r"^\s*\d+\.\s+(\S+)", r.out, flags=re.M) == [f"{h.score:.4f}" for h in want]
        if must_not:
            assert want == [] and "no hits" in r.out  # every row holds ``top``
        if steering:
            assert [h.score for h in want] != [h.score for h in plain]
    for args, why in ((["--must", "zebra"], "--must: unknown tokens ['zebra']"),
                      (["--must-not", "zebra"], "--must-not: unknown tokens ['zebra']"),
                      (["--steer", "zebra=2"], "--steer: unknown tokens ['zebra']")):
        r = world.run("search", "--index", world.index, "a dog", *args)
        assert r.code == 1 and why in r.error_line(), (args, r.err)
    r = world.run("search", "--index", world.index, "a dog", "--steer", "red")
    assert r.code == 2 and "TOKEN=FACTOR" in r.err
