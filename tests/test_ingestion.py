"""One ingestion road (encode.py): `tokenspace index build` (data specs: image files) and `tokenspace encode`
(webdataset shards) encode through the same resumable parts, so the same images give the same index,
which records its model, ranking and captions whichever command built it; a killed run of either
resumes from its parts and ends with the index an uninterrupted run writes. The commands run in-process
(``tokenspace.cli.main``), with a Ctrl-C raised inside the encoding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tokenspace import encode
from tokenspace.cli import main
from tokenspace.data.manifest import Record, write_manifest
from tokenspace.data.webdataset import write_shards
from tokenspace.index import InvertedIndex

FAST = ["--tower", "torch", "--workers", "0", "--part-size", "4", "--batch-size", "4"]


@pytest.fixture
def sources(make_model, tiny_pairs, tmp_path, monkeypatch, restore_cli_logging):
    """(model folder, data spec, shard) of the 12 tiny images: a manifest of the files and a shard of the
    same bytes and captions."""
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "home"))
    make_model("stair").save_pretrained(tmp_path / "model")
    paths, texts = tiny_pairs
    records = [Record(p.stem, str(p), t, "test") for p, t in zip(paths, texts)]
    manifest = write_manifest(records, tmp_path / "tiny.jsonl")
    shard = write_shards(((r.id, Path(r.image).read_bytes(), r.text) for r in records),
                         str(tmp_path / "shard-%06d.tar"))[0]
    return tmp_path / "model", f"{manifest}:test", shard


def build(sources, out, *extra) -> int:
    model, spec, _ = sources
    return main(["index", "build", "--model", str(model), "--data", spec, "--out", str(out), *FAST, *extra])


def encode_shards(sources, out, *extra) -> int:
    model, _, shard = sources
    return main(["encode", "--model", str(model), "--shards", shard, "--index", str(out), *FAST, *extra])


def assert_same_index(a: Path, b: Path) -> None:
    """The same rows (ids, tokens, weights), captions and recorded model and ranking."""
    x, y = InvertedIndex.load(a), InvertedIndex.load(b)
    ids = sorted(x.ids())
    assert ids == sorted(y.ids()) and len(ids) == 12
    rx, ry = x.get(ids), y.get(ids)
    assert np.array_equal(rx.indptr, ry.indptr) and np.array_equal(rx.indices, ry.indices)
    np.testing.assert_allclose(rx.values, ry.values, rtol=1e-6, atol=1e-7)
    assert [m["caption"] for m in x.metadata(ids)] == [m["caption"] for m in y.metadata(ids)]
    assert x.info == y.info and x.info["model"] == str(Path(x.info["model"]).resolve())


def test_index_build_and_encode_write_the_same_index(sources, tmp_path, capsys):
    assert build(sources, tmp_path / "built") == 0
    assert encode_shards(sources, tmp_path / "encoded") == 0
    assert_same_index(tmp_path / "built", tmp_path / "encoded")
    assert not (tmp_path / "built.parts").exists()  # a build's parts go once its index is saved
    assert InvertedIndex.load(tmp_path / "built").metadata(["red-dog"])[0]["image"].endswith("red-dog.png")
    capsys.readouterr()
    # an index from `encode` is searched with no --model, and its hits show their captions
    assert main(["search", "--index", str(tmp_path / "encoded"), "a red dog", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "query: a red dog" in out and out.count("  (a ") == 3


@pytest.mark.parametrize("command", [build, encode_shards])
def test_a_killed_run_resumes_from_its_parts(sources, tmp_path, ctrl_c, capsys, command):
    assert build(sources, tmp_path / "whole") == 0
    ctrl_c.at, ctrl_c.calls = 2, 0  # Ctrl-C while the second part encodes (the first run only)
    out = tmp_path / "idx"
    assert command(sources, out) == 130
    assert "rerun the same command" in capsys.readouterr().err
    parts = sorted(p.name for p in Path(f"{out}.parts").glob("part-*.npz"))
    assert parts == ["part-000000.npz"]  # the first part is whole on disk
    if command is encode_shards:  # encode adds part by part: the index already holds the first one
        assert len(InvertedIndex.load(out)) == 4
    else:  # a build commits once, at the end
        assert not (out / "MANIFEST.json").exists()
    ctrl_c.at, ctrl_c.calls = 0, 0
    assert command(sources, out) == 0
    assert ctrl_c.calls == 2  # only the two parts missing were encoded again (4 images each)
    assert_same_index(out, tmp_path / "whole")


def test_a_build_over_another_build_s_parts_encodes_again(sources, tmp_path):
    """Parts a build left from another collection are its own scratch: encoded again, never mixed in."""
    from tokenspace.models.registry import load

    model, spec, _ = sources
    stale = encode.FileCollection.from_specs([f"{spec}:6"])  # the first 6 images only
    encode.encode_parts(load(str(model)), stale, tmp_path / "idx.parts", part_size=4, workers=0)
    assert build(sources, tmp_path / "idx") == 0
    assert len(InvertedIndex.load(tmp_path / "idx")) == 12 and not (tmp_path / "idx.parts").exists()


def test_both_commands_record_and_apply_the_model_s_ranking_with_its_hub_prior(sources, tmp_path, monkeypatch):
    """The model's ranking.json (here: a floor and a hub prior from the manifest's captions) is what both
    commands record and apply: `encode` dropped the hub prior that `index build` applied. The bank's
    encoded captions are computed once per model and bank and kept in the asset cache: the second command
    reads them back, encoding no caption."""
    import json

    from tokenspace.explain import ranking as ranking_module

    model, spec, _ = sources
    (model / "ranking.json").write_text(json.dumps({
        "search": {"idf": 0.0, "prior_weight": 0.25, "expansion": 1.0, "expansion_floor": 0.1},
        "hub_prior": {"specs": [spec], "size": 8, "k": 2, "weight": 0.25}}))
    encoded = []
    real = ranking_module.encode_queries
    monkeypatch.setattr(ranking_module, "encode_queries", lambda m, texts, r=None: encoded.append(len(texts)) or real(m, texts, r))
    assert build(sources, tmp_path / "built") == 0
    assert sum(encoded) == 8  # the bank, once
    assert encode_shards(sources, tmp_path / "encoded") == 0
    assert sum(encoded) == 8  # read back from the cache
    assert len(list((tmp_path / "home" / encode.HUB_BANKS).glob("*.npz"))) == 1
    x, y = InvertedIndex.load(tmp_path / "built"), InvertedIndex.load(tmp_path / "encoded")
    assert x.info["ranking"] == y.info["ranking"] == {"idf": 0.0, "prior_weight": 0.25, "expansion": 1.0,
                                                      "expansion_floor": 0.1}
    assert x.hub_prior == y.hub_prior == {"k": 2, "weight": 0.25, "bank_size": 8, "ordered": True}
    ids = sorted(x.ids())
    np.testing.assert_allclose(x.hubness(ids), y.hubness(ids), rtol=1e-5)
    assert x.hubness(ids).max() > 0
    # --no-hub-prior: neither command gives one, and both record the prior off
    assert encode_shards(sources, tmp_path / "plain", "--no-hub-prior") == 0
    assert InvertedIndex.load(tmp_path / "plain").hub_prior is None
    assert InvertedIndex.load(tmp_path / "plain").info["ranking"]["prior_weight"] == 0.0
