"""Heatmaps: per-cell activation of a query's tokens on a STAIR image grid, overlaid as PNG."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tokenspace.explain.heatmap import cell_activation, colorize, heatmap_png, letterbox, overlay
from tokenspace.sparse import SparseBatch


def test_activation_matches_the_definition(make_model, tiny_vocab):
    import torch

    model = make_model("stair")
    img = Image.new("RGB", (40, 24), (200, 40, 40))
    q = SparseBatch.from_dicts([{"red": 0.7, "dog": 0.3}], vocab=tiny_vocab)
    act = cell_activation(model, img, q)
    with torch.no_grad():
        grid = model.image_grid(model.preprocess([img]))
        scores = model.image_scores(grid)[0]  # [cells, V]
    expect = sum(w * torch.log1p(torch.relu(scores[:, tiny_vocab.id(t)])) for t, w in (("red", 0.7), ("dog", 0.3)))
    assert act.shape == tuple(grid.shape[2:])
    np.testing.assert_allclose(act.ravel(), expect.numpy(), rtol=1e-5, atol=1e-6)
    assert (act >= 0).all()


def test_cell_max_is_the_image_weight(make_model, tiny_vocab):
    """For one token at query weight 1, the hottest cell's activation is that token's pooled image weight
    (STAIR max-pools cells) before the model's L2 normalisation."""
    import torch

    model = make_model("stair")
    img = Image.new("RGB", (32, 32), (30, 30, 220))
    tok = "blue"
    act = cell_activation(model, img, SparseBatch.from_dicts([{tok: 1.0}], vocab=tiny_vocab))
    with torch.no_grad():
        raw = model.image_embed(model.image_grid(model.preprocess([img])))[0, tiny_vocab.id(tok)]
    assert act.max() == pytest.approx(float(raw), rel=1e-4)


def test_png_overlay(make_model, tiny_vocab):
    model = make_model("stair")
    img = Image.new("RGB", (64, 32), (30, 200, 30))
    png = heatmap_png(model, img, SparseBatch.from_dicts([{"green": 1.0}], vocab=tiny_vocab), size=128)
    out = Image.open(io.BytesIO(png))
    assert out.format == "PNG" and out.size == (128, 128) and out.mode == "RGB"


def test_overlay_without_activation_is_the_letterboxed_image():
    img = Image.new("RGB", (20, 10), (10, 20, 30))
    out = overlay(img, np.zeros((4, 4)), size=40)
    assert np.array_equal(np.asarray(out), np.asarray(letterbox(img, 40)))
    # letterboxing keeps the aspect: white bands above and below a 2:1 image
    assert np.asarray(out)[0, 20].tolist() == [255, 255, 255] and np.asarray(out)[20, 20].tolist() == [10, 20, 30]


def test_overlay_marks_the_hot_cell():
    img = Image.new("RGB", (32, 32), (255, 255, 255))
    act = np.zeros((2, 2))
    act[0, 1] = 1.0  # top-right cell
    out = np.asarray(overlay(img, act, size=64)).astype(int)
    assert out[8, 56].sum() < out[56, 8].sum()  # the hot corner is tinted (darker than white)


def test_colorize_range():
    c = colorize(np.array([0.0, 0.5, 1.0, 2.0, -1.0]))
    assert c.dtype == np.uint8 and c.shape == (5, 3)
    assert c[0].tolist() == c[4].tolist() and c[2].tolist() == c[3].tolist()


def test_models_without_cells_are_refused(tiny_vocab):
    class Dense:
        family = "dense"

    with pytest.raises(TypeError, match="STAIR"):
        cell_activation(Dense(), Image.new("RGB", (8, 8)), SparseBatch.from_dicts([{"dog": 1}], vocab=tiny_vocab))
