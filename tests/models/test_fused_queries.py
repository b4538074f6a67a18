"""The fused (and STAIR) text side in numpy (models/fused_queries.py) against the model itself: the same
rows to 1e-5, batched or one text at a time, from a model in memory or its saved folder; what it does not
reproduce is refused; the module imports no torch."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from tokenspace.models.config import ModelConfig
from tokenspace.models.fused_queries import FusedQueries, Unsupported
from tokenspace.models.query_filter import fit_query_filter
from tokenspace.models.registry import build_model, from_pretrained

TEXTS = ["a red dog", "the big cat and a ball", "the", "green tree with a star on the moon",
         "dog dog dog", "a blue fish", "sun", "red hat with a small bird and a big house on the tree"]


def tiny_fused(tiny_vocab, make_model, tmp_path, anchor=1.0, related_min=0.5, weights=(1.0, 0.5), text_top_n=6):
    """Two tiny STAIR parts (text weights ``weights``), the lexical anchor and a fitted query filter."""
    a, b = make_model("stair", seed=0), make_model("stair", seed=1)
    b.image_tower.load_state_dict(a.image_tower.state_dict())
    parts = a.save_pretrained(tmp_path / "a"), b.save_pretrained(tmp_path / "b")
    extra = {"parts": [{"model": str(p), "image": 1.0, "text": w} for p, w in zip(parts, weights)],
             "anchor": anchor, "text_top_n": text_top_n}
    if related_min is not None:
        extra.update(related_min=related_min, related_dim=4)
    cfg = ModelConfig(name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16, extra=extra)
    m = build_model(cfg, vocab=tiny_vocab).eval()
    torch.manual_seed(0)
    with torch.no_grad():  # an expansion with some strong tokens, not all of them near zero
        for p in m.parts:
            p.text_tower.mlm_bias.normal_(0, 2.0)
    if related_min is not None:
        rng = np.random.default_rng(0)
        vec = rng.normal(size=(len(tiny_vocab), 4)).astype(np.float32)
        vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        fit_query_filter(m, ["a red dog", "a blue cat", "the sun and a star"], vec, related_min, top=3, min_share=0.6)
    return m


def assert_same_rows(got, want):
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-5)


@pytest.mark.parametrize("anchor, related_min, weights", [(1.0, 0.3, (1.0, 0.5)), (0.7, None, (1.0, 0.0)),
                                                          (0.0, 0.3, (0.5, 2.0)), (1.0, None, (0.0, 0.0))])
def test_fused_rows_equal_the_models(tiny_vocab, make_model, tmp_path, anchor, related_min, weights):
    m = tiny_fused(tiny_vocab, make_model, tmp_path, anchor, related_min, weights)
    want = m.encode_text(TEXTS)
    assert want.nnz > len(TEXTS)  # the texts have tokens to compare
    for fast in (FusedQueries.from_model(m), FusedQueries.from_folder(m.save_pretrained(tmp_path / "fused"))):
        assert_same_rows(fast.encode_text(TEXTS), want)  # one batch, padded to the longest text
        for i, t in enumerate(TEXTS):  # one at a time, unpadded
            assert_same_rows(fast.encode_text(t), want[i])
        assert fast.encode_query(TEXTS[:2]).nnz == want[[0, 1]].nnz


def test_the_filter_and_top_n_take_effect(tiny_vocab, make_model, tmp_path):
    """The comparison above is not vacuous: the filter drops tokens and the top-n cuts rows here."""
    m = tiny_fused(tiny_vocab, make_model, tmp_path, related_min=0.3, text_top_n=4)
    fast = FusedQueries.from_model(m)
    assert (fast.encode_text(TEXTS).row_nnz() <= 4).all() and (fast.encode_text(TEXTS).row_nnz() == 4).any()
    m.related_min = None
    unfiltered = m.encode_text(TEXTS)
    m.related_min = 0.3
    assert not np.array_equal(unfiltered.indices, m.encode_text(TEXTS).indices)


def test_stair_rows_equal_the_models(tiny_vocab, make_model, tmp_path):
    m = make_model("stair", seed=3, extra={"text_top_n": 5})
    want = m.encode_text(TEXTS)
    for fast in (FusedQueries.from_model(m), FusedQueries.from_folder(m.save_pretrained(tmp_path / "stair"))):
        assert_same_rows(fast.encode_text(TEXTS), want)
    back = from_pretrained(tmp_path / "stair")  # the light BERT a saved folder loads into: the same rows
    assert_same_rows(FusedQueries.from_model(back).encode_text(TEXTS), back.encode_text(TEXTS))


def test_what_it_does_not_reproduce_is_refused(tiny_vocab, make_model, tmp_path):
    dense = make_model("dense")
    with pytest.raises(Unsupported, match="dense"):
        FusedQueries.from_model(dense)
    m = make_model("stair")
    config = m.portable_config().to_dict()
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    with pytest.raises(Unsupported, match="option 'restrict'"):
        FusedQueries({**config, "extra": {"restrict": True}}, state, m.vocab)
    with pytest.raises(Unsupported, match="text tower"):
        FusedQueries({**config, "text_tower": {"type": "open-clip-text"}}, state, m.vocab)
    with pytest.raises(Unsupported, match="no text_tower"):
        FusedQueries(config, {}, m.vocab)


def test_errors_as_the_models():
    with pytest.raises(ValueError, match="empty text"):
        FusedQueries.encode_text(None, ["a dog", "  "])
    with pytest.raises(TypeError, match="strings"):
        FusedQueries.encode_text(None, ["a dog", 3])


def test_it_imports_no_torch():
    code = "import sys, tokenspace.models.fused_queries; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]


def test_the_release_models_queries():
    """The release model (committed in models/): its numpy queries are the model's, on texts of every kind
    (function words only, repeats, a text longer than the encoder reads, digits, unknown pieces)."""
    from tokenspace.models.registry import load
    from tokenspace.models.releases import DEFAULT_RELEASE, release_path

    folder = release_path(DEFAULT_RELEASE)
    if folder is None:
        pytest.skip("the release model is not installed")
    model = load(DEFAULT_RELEASE)
    texts = ["a red car", "a cup of coffee", "the of a", "a lighthouse by the sea at night", "dog dog",
             "zebra crossing 1234", "qwxz blorft", " ".join(["a big red house with a green door"] * 6),
             "an astronaut riding a horse on the moon", "ÉCOLE café naïve"]
    want = model.encode_text(texts)
    fast = FusedQueries.from_folder(folder)
    assert_same_rows(fast.encode_text(texts), want)
    for i, t in enumerate(texts):
        assert_same_rows(fast.encode_text(t), want[i])
