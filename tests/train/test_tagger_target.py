"""Tagger vectors as a STAIR image-head target: the loss by hand, and a warm start that lowers it while
moving only the head (backbone, word embeddings and text tower untouched)."""
import numpy as np
import pytest
import torch

from tokenspace.models.config import ModelConfig
from tokenspace.train.tagger_target import TaggerTarget, head_parameters, warm_start

CLASSES = {"n00000001": "dog", "n00000002": "red car", "n00000003": "cat, tree"}


@pytest.fixture
def tagger(tmp_path, tiny_vocab):
    from tokenspace.models.registry import build_model

    d = tmp_path / "classes"
    d.mkdir()
    (d / "imagenet_synsets.txt").write_text("\n".join(CLASSES) + "\n")
    (d / "imagenet_synset_to_lemma.txt").write_text("".join(f"{w}\t{x}\n" for w, x in CLASSES.items()))
    cfg = ModelConfig(name="tagger-tiny", family="tagger",
                      image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 32},
                      text_tower={"type": "bag-of-tokens", "vocab_size": len(tiny_vocab)},
                      extra={"classes": str(d), "text": "bag", "hypernym_levels": 0, "top_classes": 2})
    torch.manual_seed(0)
    m = build_model(cfg, vocab=tiny_vocab).eval()
    with torch.no_grad():  # channel c votes for class c
        m.classifier.weight.zero_()
        m.classifier.bias.zero_()
        for c in range(3):
            m.classifier.weight[c, c] = 4.0
    return m


def grids_for(n=24, seed=0):
    g = torch.zeros(n, 16, 2, 2)
    rng = np.random.default_rng(seed)
    for i in range(n):
        g[i, rng.integers(3), rng.integers(2), rng.integers(2)] = 1.0 + rng.random()
    return g.numpy()


def test_loss_is_one_minus_cosine_to_the_tagger_rows(tagger):
    grids = grids_for(4)
    target = TaggerTarget(tagger, grids)
    dense = target.dense([0, 1, 2, 3])
    assert dense.shape == (4, len(tagger.vocab)) and (dense.norm(dim=1) - 1).abs().max() < 1e-5
    torch.manual_seed(0)
    emb = torch.rand(2, len(tagger.vocab))
    t = dense[[1, 3]]
    expected = np.mean([1 - float(emb[i] @ t[i] / emb[i].norm() / t[i].norm()) for i in range(2)])
    assert float(target.loss(emb, [1, 3])) == pytest.approx(expected, rel=1e-5)
    assert float(target.loss(t * 3.0, [1, 3])) == pytest.approx(0.0, abs=1e-6)  # scale-free
    with pytest.raises(ValueError, match="dims"):
        target.loss(torch.rand(2, 5), [0, 1])


def test_empty_target_rows_are_left_out(tagger):
    from tokenspace.sparse import SparseBatch

    target = TaggerTarget(tagger, grids_for(3))
    target.rows = SparseBatch.concat([target.rows[[0]], SparseBatch.empty(1, target.dim)])  # row 1: no tokens
    emb = torch.rand(2, target.dim)
    assert float(target.loss(emb, [0, 1])) == pytest.approx(float(target.loss(emb[:1], [0])), rel=1e-6)
    assert float(target.loss(emb[1:], [1])) == 0.0


def test_warm_start_lowers_the_loss_and_moves_only_the_head(tagger, make_model):
    stair = make_model("stair")
    grids = grids_for(32)
    target = TaggerTarget(tagger, grids)
    frozen = {n: p.detach().clone() for n, p in stair.named_parameters() if n.startswith(("image_tower", "text_tower"))}
    head = {id(p) for p in head_parameters(stair)}
    assert head == {id(p) for p in stair.image_transform.parameters()} | {id(stair.image_bias)}
    losses = warm_start(stair, grids, target, steps=60, lr=3e-2, batch_size=16)
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:5])
    for n, p in stair.named_parameters():
        if n in frozen:
            assert torch.equal(p, frozen[n]), n


def test_only_a_tagger_gives_targets(make_model):
    with pytest.raises(TypeError, match="tagger"):
        TaggerTarget(make_model("stair"), grids_for(2))
