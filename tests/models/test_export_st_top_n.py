"""export-st of a model with a text top-n gives ``encode_text``'s vectors (the top-n was once
ignored, 49-60 active tokens instead of 40, and SparseEncoder's max_active_dims would cut after the
normalisation, weights off by up to 0.077)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tokenspace.models.export_st import export_sentence_transformers

TEXTS = ["a red dog", "the blue cat on a car with a big hat and a small ball", "Dogs!", "sun moon star"]


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_export_st_with_a_text_top_n_gives_encode_texts_vectors(make_model, tmp_path, similarity):
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is in the dev extra")
    model = make_model("stair", seed=1).eval()
    model.similarity_fn_name = similarity
    with torch.no_grad():  # many active tokens per text, so that the cut matters
        model.text_tower.mlm_bias.add_(torch.linspace(0.5, 2.0, len(model.vocab)))
    model.text_top_n = 3
    ours = model.encode_text(TEXTS).to_dense()
    assert ((ours > 0).sum(1) == 3).all()
    out = export_sentence_transformers(model, tmp_path / "st")
    encoder = st.SparseEncoder(str(out), device="cpu", trust_remote_code=True)
    theirs = encoder.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
    assert "trust_remote_code=True" in (out / "README.md").read_text()
