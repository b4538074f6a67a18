"""export-st of a fused model (the release model's family): its text side, one STAIR part's MLM +
SpladePooling + the lexical anchor (st_anchor.py) + TopN + Normalize, read back by sentence-transformers
itself, equals ``model.encode_text``; fused text sides that are not one STAIR part are refused."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tokenspace.models.config import ModelConfig
from tokenspace.models.export_st import check_family, export_sentence_transformers
from tokenspace.models.registry import build_model

TEXTS = ["a red dog", "the blue cat on a car with a big hat and a small ball", "Dogs!", "sun moon star", "the a"]


@pytest.fixture
def parts(make_model, tmp_path):
    """A tiny STAIR model and a second one (another head) on one tower, saved as folders."""
    a, b = make_model("stair", seed=0), make_model("stair", seed=1)
    b.image_tower.load_state_dict(a.image_tower.state_dict())
    with torch.no_grad():  # many active tokens per text, so that the top-n cut matters
        a.text_tower.mlm_bias.add_(torch.linspace(0.5, 2.0, a.text_tower.vocab_size))
    return a.save_pretrained(tmp_path / "a"), b.save_pretrained(tmp_path / "b")


def fused(tiny_vocab, parts, weights, anchor=0.8, **extra):
    cfg = ModelConfig(
        name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
        extra={"parts": [{"model": str(p), "image": w[0], "text": w[1]} for p, w in zip(parts, weights)],
               "anchor": anchor, **extra})
    return build_model(cfg, vocab=tiny_vocab).eval()


@pytest.mark.parametrize("top_n", [None, 4])
def test_export_st_of_a_fused_model_gives_encode_texts_vectors(tiny_vocab, parts, tmp_path, top_n):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is in the dev extra")
    # the second part takes no part in the text side (text weight 0), as the release's tagger
    model = fused(tiny_vocab, parts, weights=((1.0, 0.7), (1.0, 0.0)), text_top_n=top_n)
    ours = model.encode_text(TEXTS).to_dense()
    out = export_sentence_transformers(model, tmp_path / "st")
    modules = [m["type"] for m in json.loads((out / "modules.json").read_text())]
    assert modules[2] == "st_anchor.LexicalAnchor" and modules[-1].endswith("Normalize")
    assert ("st_top_n.TopN" in modules) == bool(top_n)
    encoder = st.SparseEncoder(str(out), device="cpu", trust_remote_code=True)
    theirs = encoder.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-6)
    if top_n:
        assert ((ours > 0).sum(1) <= top_n).all() and ((ours > 0).sum(1) == top_n).any()
    # the anchor is there: every content word of the query is active (no top-n to cut it)
    if not top_n:
        assert ours[0, tiny_vocab.id("red")] > 0 and ours[0, tiny_vocab.id("dog")] > 0
    assert "trust_remote_code=True" in (out / "README.md").read_text()


def test_fused_text_sides_export_st_cannot_write_are_refused(tiny_vocab, parts, tmp_path):
    both = fused(tiny_vocab, parts, weights=((1.0, 1.0), (1.0, 0.5)))
    with pytest.raises(ValueError, match="one STAIR part.*stair \\(text weight 1\\), stair \\(text weight 0.5\\)"):
        export_sentence_transformers(both, tmp_path / "st")
    anchor_only = fused(tiny_vocab, parts, weights=((1.0, 0.0), (1.0, 0.0)))
    with pytest.raises(ValueError, match="has text parts: none"):
        export_sentence_transformers(anchor_only, tmp_path / "st")
    assert not (tmp_path / "st").exists()
    check_family("fused")
    with pytest.raises(ValueError, match="'tagger' model's text side is not an MLM"):
        check_family("tagger")
