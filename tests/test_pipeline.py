"""End to end on a tiny manifest: data spec -> cached grids -> encode -> index -> search -> explain."""
import re

import numpy as np
import pytest

from tokenspace import pipeline
from tokenspace.data.manifest import Record, write_manifest
from tokenspace.train import pairs


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
    queries = model.encode_text(["a red dog", "a blue car", "green tree"])
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
    # 12 images and the empty-caption one (an index keeps it); the corrupt one skipped. One line, not a JSON blob
    assert re.search(r"^indexed 13 images into \S*idx", capsys.readouterr().out, re.M)
    assert main(["search", "--index", str(tmp_path / "idx"), "a red dog", "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "query: a red dog" in out and "matched:" in out
    # malformed boolean filters are a clear error (exit 1: a runtime error; 2 is for usage), not a traceback
    assert main(["search", "--index", str(tmp_path / "idx"), "a dog", "--where", "dog AND (cat"]) == 1
    assert "error" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- every caption
@pytest.fixture
def two_caption_manifest(tmp_path, tiny_pairs):
    """COCO-style records: the first image has two captions, the others one."""
    paths, texts = tiny_pairs
    records = [Record("img0", str(paths[0]), texts[0], "train", captions=(texts[0], "the red dog on the sun"))]
    records += [Record(f"img{i}", str(p), t, "train") for i, (p, t) in enumerate(zip(paths[1:4], texts[1:4]), 1)]
    return write_manifest(records, tmp_path / "coco-like.jsonl")


def _recipe(tmp_path, tiny_vocab, make_config, manifest):
    from tokenspace.train.recipe import Recipe

    tiny_vocab.save(tmp_path / "vocab.txt")
    make_config("stair", len(tiny_vocab), vocab=str(tmp_path / "vocab.txt")).save(tmp_path / "model.json")
    return Recipe.from_dict({"name": "captions", "model": str(tmp_path / "model.json"),
                             "data": {"train": [f"{manifest}:train"]}, "stages": [{"name": "c", "steps": 1}]})


def _captured_training_data(monkeypatch, tmp_path, tiny_vocab, make_config, manifest):
    """Run pipeline.train with the Trainer replaced by one that records the PairData it is given."""
    from tokenspace.train import trainer

    seen = {}

    class Capture:
        def __init__(self, model, recipe, data, out_dir, **_):
            seen["data"], self.model = data, model

        def fit(self, resume=False):
            return self.model

    monkeypatch.setattr(trainer, "Trainer", Capture)
    pipeline.train(_recipe(tmp_path, tiny_vocab, make_config, manifest), tmp_path / "run", home=tmp_path / "home",
                   progress=False)
    return seen["data"]


def test_a_two_caption_manifest_yields_both_pairs(monkeypatch, tmp_path, tiny_vocab, make_config,
                                                  two_caption_manifest):
    data = _captured_training_data(monkeypatch, tmp_path, tiny_vocab, make_config, two_caption_manifest)
    assert len(data) == 5 and data.texts[:2] == ["a red dog", "the red dog on the sun"]  # was 4: first caption only
    np.testing.assert_array_equal(data.inputs[[0]], data.inputs[[1]])  # both captions pair with image 0
    assert not np.array_equal(data.inputs[[0]], data.inputs[[2]])
    assert data.groups[0] == data.groups[1] and len(set(data.groups[1:].tolist())) == 4


def test_scale_load_pairs_uses_every_caption(tmp_path, tiny_vocab, make_config, two_caption_manifest):
    from tokenspace.train.scale import load_pairs

    recipe = _recipe(tmp_path, tiny_vocab, make_config, two_caption_manifest)
    model = pipeline.build_seeded(recipe)
    data = load_pairs(recipe, model, home=tmp_path / "home", progress=False)
    assert len(data) == 5 and "the red dog on the sun" in data.texts
    from tokenspace.train.trainer import Trainer  # the trainer reads the shared grids through RowsOf

    Trainer(model, recipe, data, tmp_path / "run", progress=False).fit()
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()


def test_caption_groups():
    # one caption per image: the trainer's old grouping by text, ids included (same batches as before)
    from tokenspace.train.trainer import PairData

    texts = ["b", "a", "b", "c"]
    np.testing.assert_array_equal(pairs.caption_groups(np.arange(4), texts),
                                  PairData.from_texts(np.zeros(4), texts).groups)
    # captions of one image share a group; a caption shared by two images joins them (transitively)
    g = pairs.caption_groups(np.array([0, 0, 1, 2, 2, 3]), ["x", "y", "z", "z", "w", "v"])
    assert g[0] == g[1] and g[2] == g[3] == g[4] and len({g[0], g[2], g[5]}) == 3


def test_sampler_draws_one_caption_per_image_per_epoch_and_every_caption_over_epochs(tmp_path, tiny_pairs):
    from tokenspace.train.trainer import BatchSampler

    paths, texts = tiny_pairs
    recs = [Record(f"i{i}", str(p), t, "train", captions=(t, f"{t} again", f"{t} once more"))
            for i, (p, t) in enumerate(zip(paths, texts))]
    data = pipeline.caption_pairs(np.arange(len(recs)).reshape(-1, 1), recs)
    assert len(data) == 3 * len(recs)
    sampler = BatchSampler(data.groups, len(recs), np.random.default_rng(0))
    seen = set()
    for _ in range(20):
        batch = sampler.next()  # one epoch = one batch here
        images = data.inputs[batch][:, 0]
        assert sorted(images.tolist()) == list(range(len(recs)))  # each image once, never twice
        seen.update(batch.tolist())
    assert seen == set(range(len(data)))


def test_evaluate_with_folds_reports_both_protocols(make_model, manifest, tmp_path):
    out = pipeline.evaluate(make_model(), f"{manifest}:test", home=tmp_path, progress=False, folds=4)
    res = next(iter(out.values()))
    assert res["n_images"] == 12  # 4 folds of 3 images (the corrupt one skipped)
    assert 0 <= res["folds4/image_retrieval_recall@1"] <= 1 and "image_retrieval_recall@1" in res
    assert res["folds4/image_retrieval_recall@1"] >= res["image_retrieval_recall@1"]  # fewer candidates per fold
