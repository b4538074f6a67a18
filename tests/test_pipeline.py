"""End to end on a tiny manifest: data spec -> cached grids -> encode -> index -> search -> explain."""
import json

import numpy as np
import pytest

from tokenspace import pipeline
from tokenspace.data.manifest import Record, write_manifest


@pytest.fixture
def manifest(tmp_path, tiny_pairs):
    paths, texts = tiny_pairs
    records = [Record(f"img{i}", str(p), t, "test") for i, (p, t) in enumerate(zip(paths, texts))]
    bad = tmp_path / "corrupt.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
    records.append(Record("corrupt", str(bad), "a broken picture", "test"))
    records.append(Record("empty", str(paths[0]), "   ", "test"))
    return write_manifest(records, tmp_path / "tiny.jsonl")


def test_load_split_drops_empty_texts_and_honours_limits(manifest):
    recs = pipeline.load_split(f"{manifest}:test")
    assert "empty" not in {r.id for r in recs} and len(recs) == 13
    sub = pipeline.load_split(f"{manifest}:test:5")
    assert len(sub) == 5 and sub == pipeline.load_split(f"{manifest}:test:5")  # deterministic
    with pytest.raises(ValueError, match="DATASET:SPLIT"):
        pipeline.load_split("emoji")
    with pytest.raises(ValueError, match="no records"):
        pipeline.load_split(f"{manifest}:train")


def test_corrupt_images_are_skipped_and_counted(make_model, manifest, tmp_path):
    model = make_model()
    enc = pipeline.image_grids(model, pipeline.load_split(f"{manifest}:test"), home=tmp_path, progress=False)
    assert list(enc.skipped) == ["corrupt"] and len(enc.records) == 12 == len(enc.grids)
    # the cache is reused: a second call computes nothing and gives the same grids
    again = pipeline.image_grids(model, pipeline.load_split(f"{manifest}:test"), home=tmp_path, progress=False)
    np.testing.assert_array_equal(enc.grids, again.grids)


def test_encode_index_search_equals_exact_scores(make_model, manifest, tmp_path):
    from tokenspace.explain.hits import contributions
    from tokenspace.index import InvertedIndex

    model = make_model()
    vectors, ids, records = pipeline.encode_collection(model, f"{manifest}:test", home=tmp_path, progress=False)
    index = InvertedIndex.build(vectors, ids)
    index.save(tmp_path / "idx")
    index = InvertedIndex.load(tmp_path / "idx")
    queries = model.encode_texts(["a red dog", "a blue car", "green tree"])
    hits = index.search(queries, k=5)
    exact = queries.to_scipy() @ vectors.to_scipy().T
    for qi, row in enumerate(hits):
        scores = exact[qi].toarray().ravel()
        assert [h.score for h in row] == pytest.approx(sorted(scores, reverse=True)[: len(row)], abs=1e-5)
        docs = index.get([h.id for h in row])
        for h, parts in zip(row, contributions(queries[qi], docs)):
            # the explanation is the score: per-token contributions sum to it
            assert sum(p.contribution for p in parts) == pytest.approx(h.score, abs=1e-5)


def test_cli_index_build_and_search(make_model, manifest, tmp_path, capsys, monkeypatch):
    from tokenspace.cli import main

    model = make_model()
    model.save_pretrained(tmp_path / "model")
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "home"))
    assert main(["index", "build", "--model", str(tmp_path / "model"), "--data", f"{manifest}:test",
                 "--out", str(tmp_path / "idx")]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats  # the index reports its size
    assert main(["search", "--index", str(tmp_path / "idx"), "a red dog", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "query: a red dog" in out and "matched:" in out
    # malformed boolean filters are a clear error, not a traceback
    assert main(["search", "--index", str(tmp_path / "idx"), "a dog", "--where", "dog AND (cat"]) == 2
    assert "error" in capsys.readouterr().err
