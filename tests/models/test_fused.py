"""Fused model (models/fused.py): the fused vectors equal the weighted sum of the parts' unit vectors,
the lexical anchor adds exactly the text's content word pieces, one shared tower, save/load without the
parts' folders, and clear errors for parts that cannot be fused."""
import numpy as np
import pytest
import torch

from tokenspace.models.config import ModelConfig
from tokenspace.models.registry import build_model, from_pretrained


def unit(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@pytest.fixture
def parts(make_model, tmp_path):
    """Two tiny STAIR models with different heads on one tower, saved as folders."""
    a, b = make_model("stair", seed=0), make_model("stair", seed=1)
    b.image_tower.load_state_dict(a.image_tower.state_dict())
    return a.save_pretrained(tmp_path / "a"), b.save_pretrained(tmp_path / "b")


def fused(tiny_vocab, parts, anchor=0.0, weights=((1.0, 1.0), (2.0, 0.5)), **extra):
    cfg = ModelConfig(
        name="tiny-fused", family="fused", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
        text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)}, max_text_len=16,
        extra={"parts": [{"model": str(p), "image": w[0], "text": w[1]} for p, w in zip(parts, weights)],
               "anchor": anchor, **extra})
    return build_model(cfg, vocab=tiny_vocab).eval()


def test_vectors_are_the_weighted_sum_of_the_parts(tiny_vocab, parts):
    m = fused(tiny_vocab, parts, anchor=0.7)
    a, b = from_pretrained(parts[0]), from_pretrained(parts[1])
    grid = m.image_grid(torch.rand(3, 3, 32, 32))
    with torch.no_grad():
        want = 1.0 * unit(a.image_embed(grid)) + 2.0 * unit(b.image_embed(grid))
        torch.testing.assert_close(m.image_embed(grid), want)
        ids, mask = m.tokenize(["a red dog", "the big cat and a ball"])
        bag = torch.zeros(2, len(tiny_vocab))
        for row, words in enumerate((["red", "dog"], ["big", "cat", "ball"])):  # stop words drop out
            bag[row, [tiny_vocab.id(w) for w in words]] = 1.0
        want = 0.7 * unit(bag) + 1.0 * unit(a.text_embed(ids, mask)) + 0.5 * unit(b.text_embed(ids, mask))
        torch.testing.assert_close(m.text_embed(ids, mask), want)


def test_anchor_puts_every_content_word_in_the_query(tiny_vocab, parts):
    texts = ["a red dog", "green tree with a star"]
    for anchor, expect in ((0.0, None), (1.0, True)):
        m = fused(tiny_vocab, parts, anchor=anchor, text_top_n=8)
        dense = m.encode_text(texts).to_dense()
        assert np.allclose(np.linalg.norm(dense, axis=1), 1.0) and (dense >= 0).all()
        assert ((dense > 0).sum(axis=1) <= 8).all()
        if expect:
            for row, t in enumerate(texts):
                words = [w for w in t.split() if w not in ("a", "with")]
                assert all(dense[row, tiny_vocab.id(w)] > 0 for w in words), t


def test_one_tower_and_its_image_size(tiny_vocab, parts):
    m = fused(tiny_vocab, parts)
    assert all(p.image_tower.image_size == 32 for p in m.parts)
    # the parts run the fused model's tower; its weights are stored once
    assert all(p.image_tower._tower is m.image_tower for p in m.parts)
    assert not any(k.startswith("parts.") and ".image_tower." in k for k in m.state_dict())
    torch.testing.assert_close(m.image_tower.state_dict(), from_pretrained(parts[0]).image_tower.state_dict())


def test_a_part_alone_is_the_model_before_fusing(tiny_vocab, parts, make_model):
    m = fused(tiny_vocab, parts)
    alone, original = m.part(1), from_pretrained(parts[1])
    assert alone.image_tower is not m.image_tower and not isinstance(alone.image_tower, type(m.parts[1].image_tower))
    pixels = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(alone.image_embed(alone.image_grid(pixels)),
                                   original.image_embed(original.image_grid(pixels)))
    np.testing.assert_allclose(alone.encode_text(["a red dog"]).to_dense(),
                               original.encode_text(["a red dog"]).to_dense(), atol=1e-6)


def test_save_load_round_trip_without_the_parts(tiny_vocab, parts, tmp_path):
    import shutil

    m = fused(tiny_vocab, parts, anchor=0.2, image_top_n=5)
    m.anchor = 0.5  # weights set on the built model are the ones saved
    folder = m.save_pretrained(tmp_path / "fused")
    for p in parts:
        shutil.rmtree(p)  # the folder holds everything
    back = from_pretrained(folder)
    images = [np.random.default_rng(i).integers(0, 255, (32, 32, 3), dtype=np.uint8) for i in range(3)]
    from PIL import Image

    images = [Image.fromarray(x) for x in images]
    np.testing.assert_allclose(back.encode_image(images).to_dense(), m.encode_image(images).to_dense(), atol=1e-6)
    np.testing.assert_allclose(back.encode_text(["a red dog"]).to_dense(),
                               m.encode_text(["a red dog"]).to_dense(), atol=1e-6)
    assert (back.encode_image(images).row_nnz() <= 5).all()
    assert back.image_weights == [1.0, 2.0] and back.anchor == 0.5


def test_parts_that_cannot_be_fused_are_refused(tiny_vocab, make_model, parts, tmp_path):
    other = make_model("stair", seed=3).save_pretrained(tmp_path / "other")  # its own random tower
    with pytest.raises(ValueError, match="share one backbone"):
        fused(tiny_vocab, [parts[0], other])
    dense = make_model("dense").save_pretrained(tmp_path / "dense")
    with pytest.raises(ValueError, match="must be a sparse model"):
        fused(tiny_vocab, [parts[0], dense])


@pytest.mark.parametrize("extra, match", [
    ({"parts": []}, "non-empty list"),
    ({"parts": [{"model": "x", "image": -1}]}, "must be >= 0"),
    ({"parts": [{"model": "x", "weight": 1}]}, "unknown option 'weight'"),
    ({"parts": [{"image": 1}]}, "needs model"),
    ({"parts": [{"model": "x"}], "anchor": -0.5}, "anchor must be >= 0"),
])
def test_bad_options(tiny_vocab, extra, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(name="f", family="fused", image_tower={"type": "tiny-cnn"},
                    text_tower={"type": "bag-of-tokens"}, extra=extra)


def test_parts_at_their_own_sizes_share_one_packed_grid(tiny_vocab, parts, tmp_path):
    import torch.nn.functional as F

    m = fused(tiny_vocab, parts)
    m.config.extra["parts"][0]["image_size"] = 16  # part 0 reads the images at 16 px, part 1 at the tower's 32
    m = build_model(m.config, vocab=tiny_vocab).eval()
    assert m.part_sizes == [16, 32] and m.packed_sizes == (32, 16)
    a, b = from_pretrained(parts[0]), from_pretrained(parts[1])
    pixels = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        grid = m.image_grid(pixels)
        small = F.interpolate(pixels, size=(16, 16), mode="bilinear", antialias=True, align_corners=False)
        g32, g16 = m.image_tower(pixels), m.image_tower(small)
        assert grid.shape == (2, g32.shape[1], 1, g32[0, 0].numel() + g16[0, 0].numel())
        torch.testing.assert_close(m.part_grid(grid, 0), g16)
        torch.testing.assert_close(m.part_grid(grid, 1), g32)
        want = 1.0 * unit(a.image_embed(g16)) + 2.0 * unit(b.image_embed(g32))
        torch.testing.assert_close(m.image_embed(grid), want)
    back = from_pretrained(m.save_pretrained(tmp_path / "packed"))
    assert back.part_sizes == [16, 32]
    np.testing.assert_allclose(back.encode_image_grids(grid).to_dense(), m.encode_image_grids(grid).to_dense(),
                               atol=1e-6)
    assert m.part(0).image_tower.image_size == 32  # alone: the size its own config names (tiny: 32)


def test_the_feature_cache_keeps_packed_grids_apart(tiny_vocab, parts, tmp_path):
    from PIL import Image

    from tokenspace.data.grids import cache_image_grids

    path = tmp_path / "x.png"
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(path)
    plain = fused(tiny_vocab, parts)
    cfg = plain.config
    cfg.extra["parts"][0]["image_size"] = 16
    packed = build_model(cfg, vocab=tiny_vocab).eval()
    g1 = cache_image_grids(plain, [path], tmp_path / "cache", progress=False).grids
    g2 = cache_image_grids(packed, [path], tmp_path / "cache", progress=False).grids
    assert g1.shape[2:] != g2.shape[2:] and g2.shape[2] == 1


def test_heatmaps_of_a_packed_model_are_its_first_parts_cells(tiny_vocab, parts):
    from PIL import Image

    from tokenspace.explain.heatmap import cell_activation

    m = fused(tiny_vocab, parts)
    m.config.extra["parts"][0]["image_size"] = 16
    m = build_model(m.config, vocab=tiny_vocab).eval()
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8))
    act = cell_activation(m, image, m.encode_text(["a red dog"]))
    alone = from_pretrained(parts[0])
    with torch.no_grad():
        small = alone.image_grid(torch.nn.functional.interpolate(
            m.preprocess([image]), size=(16, 16), mode="bilinear", antialias=True, align_corners=False))
    assert act.shape == tuple(small.shape[2:])


def test_the_onnx_tower_is_not_used_for_a_packed_model(tiny_vocab, parts):
    from tokenspace.encode import image_tower

    m = fused(tiny_vocab, parts)
    assert m.packed_sizes == ()
    m.config.extra["parts"][0]["image_size"] = 16
    m = build_model(m.config, vocab=tiny_vocab).eval()
    assert image_tower(m, "auto") is None  # the model's own image_grid packs both sizes
    with pytest.raises(ValueError, match="several sizes"):
        image_tower(m, "onnx")
