"""Inference-free queries (models/inference_free.py): the query side is the tokenizer and a stored weight
per token (no text network), the image side is the base model's, unchanged; saved and loaded with the
folder; the three weight sources; clear errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenspace.index import InvertedIndex
from tokenspace.models.inference_free import (
    InferenceFreeModel,
    caption_idf,
    content_mask,
    inference_free_config,
    mean_text_weights,
)
from tokenspace.models.registry import build_model, from_pretrained

CAPTIONS = ["a red dog", "a blue car", "the green tree", "a red cat and a dog", "big ball", "a small star"]


@pytest.fixture
def base(make_model, tmp_path):
    return make_model("stair", seed=0).save_pretrained(tmp_path / "base")


def make_if(base, tiny_vocab, weights=None, **extra):
    model = build_model(inference_free_config(str(base), **extra), vocab=tiny_vocab).eval()
    model.set_weights(weights if weights is not None else caption_idf(model.tokenizer, CAPTIONS))
    return model


def test_queries_are_the_texts_tokens_at_their_stored_weights(base, tiny_vocab):
    table = np.arange(len(tiny_vocab), dtype=np.float32) / 10 + 0.5
    model = make_if(base, tiny_vocab, table)
    q = model.encode_query(["a red dog", "the red red car!"])
    assert model.decode(q, top_k=None)[0] == sorted(
        [(t, w) for t, w in model.decode(q, top_k=None)[0]], key=lambda x: -x[1])
    for row, words in enumerate((["red", "dog"], ["red", "car"])):  # stop words and "!" weigh 0
        idx, val = q.row(row)
        assert sorted(tiny_vocab.tokens[i] for i in idx) == sorted(words)
        want = table[idx] / np.linalg.norm(table[idx])  # cosine base: unit rows
        np.testing.assert_allclose(val, want, rtol=1e-6)
    # the torch text_embed holds the same vector (before normalising)
    ids, mask = model.tokenize(["a red dog"])
    with torch.no_grad():
        dense = model.text_embed(ids, mask)[0].numpy()
    want = np.zeros(len(tiny_vocab), np.float32)
    for w in ("red", "dog"):
        want[tiny_vocab.id(w)] = table[tiny_vocab.id(w)]
    np.testing.assert_allclose(dense, want)
    # one text gives one vector (the ecosystem's single-item form)
    one = model.encode_query("a red dog", convert_to_sparse_tensor=True)
    np.testing.assert_allclose(one.to_dense().numpy(), q.to_dense()[0])


def test_the_image_side_is_the_bases_and_an_index_of_it_answers(base, tiny_vocab):
    model = make_if(base, tiny_vocab)
    original = from_pretrained(base)
    grids = torch.rand(5, 16, 4, 4)
    a, b = model.encode_image_grids(grids), original.encode_image_grids(grids)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.values, b.values)
    index = InvertedIndex.build(b, [f"i{n}" for n in range(5)])
    hits = index.search(model.encode_query(["a red dog"]), k=3)[0]
    assert hits and all(h.score > 0 for h in hits)


def test_saved_and_loaded_with_the_folder(base, tiny_vocab, tmp_path):
    model = make_if(base, tiny_vocab, text_top_n=2)
    out = model.save_pretrained(tmp_path / "if")
    (base / "model.safetensors").unlink()  # the folder needs nothing of the base's
    loaded = from_pretrained(out)
    assert isinstance(loaded, InferenceFreeModel) and loaded.config.options.text_top_n == 2
    texts = ["a red dog", "green tree and a big blue car"]
    np.testing.assert_allclose(loaded.encode_text(texts).to_dense(), model.encode_text(texts).to_dense())
    assert (loaded.encode_text(texts).to_dense() > 0).sum(1).max() == 2
    grids = torch.rand(2, 16, 4, 4)
    np.testing.assert_allclose(loaded.encode_image_grids(grids).to_dense(), model.encode_image_grids(grids).to_dense())


def test_weight_sources(base, tiny_vocab):
    model = make_if(base, tiny_vocab)
    idf = caption_idf(model.tokenizer, CAPTIONS)
    red, star = tiny_vocab.id("red"), tiny_vocab.id("star")
    assert idf[red] < idf[star]  # "red" is in two captions, "star" in one
    mean = mean_text_weights(from_pretrained(base), CAPTIONS, batch_size=4)
    full = from_pretrained(base).encode_text(["a small star"]).to_dense()[0]
    assert mean[star] == pytest.approx(full[star], rel=1e-5)
    assert (mean >= 0).all() and np.isfinite(mean).all()
    keep = content_mask(tiny_vocab.tokens)
    assert not keep[tiny_vocab.id("a")] and not keep[tiny_vocab.id("[CLS]")] and keep[red]


def test_bad_input_is_refused(base, tiny_vocab, make_model, tmp_path):
    model = make_if(base, tiny_vocab)
    with pytest.raises(ValueError, match="one entry per token"):
        model.set_weights(np.ones(3))
    with pytest.raises(ValueError, match="finite and >= 0"):
        model.set_weights(-np.ones(len(tiny_vocab)))
    with pytest.raises(ValueError, match="empty text"):
        model.encode_query(["a dog", " "])
    with pytest.raises(ValueError, match="option weights must be one of"):
        inference_free_config(str(base), weights="bm42")
    dense = make_model("dense").save_pretrained(tmp_path / "dense")
    with pytest.raises(ValueError, match="sparse model"):
        build_model(inference_free_config(str(dense)), vocab=tiny_vocab)
    with pytest.raises(ValueError, match="no captions"):
        caption_idf(model.tokenizer, [])


def test_export_st_writes_the_table_as_a_sparse_static_embedding(base, tiny_vocab, tmp_path):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is in the dev extra")
    from tokenspace.models.export_st import export_sentence_transformers

    texts = ["a red dog", "the blue cat on a car with a big hat and a small ball", "Dogs!",
             "red " * 13 + "dog cat star tree"]  # longer than the model's 16 tokens: truncated alike
    for top_n in (None, 2):
        model = make_if(base, tiny_vocab, np.linspace(0.5, 3.0, len(tiny_vocab)), text_top_n=top_n)
        out = export_sentence_transformers(model, tmp_path / f"st{top_n}")
        encoder = st.SparseEncoder(str(out), device="cpu", trust_remote_code=True)
        theirs = encoder.encode(texts, convert_to_tensor=True).to_dense().numpy()
        ours = model.encode_query(texts).to_dense()
        np.testing.assert_allclose(theirs, ours, atol=1e-6)
        if top_n is None:  # 14 word pieces fit beside [CLS] and [SEP]: "dog" in, "star" cut
            assert ours[3, tiny_vocab.id("dog")] > 0 and ours[3, tiny_vocab.id("star")] == 0
