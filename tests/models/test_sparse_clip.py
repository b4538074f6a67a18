"""Sparse CLIP: the logit-scale cap (during training too), ReLU vs no-ReLU arms, L0 tracking."""
import json
import math

import numpy as np
import pytest
import torch

from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer


def tiny_data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    texts = [f"a {words[i % len(words)]}" for i in range(n)]
    return PairData.from_texts(rng.standard_normal((n, 16, 2, 2)).astype(np.float16), texts)


def test_loss_never_sees_a_scale_above_the_cap_even_when_the_parameter_is_past_it(make_model, tmp_path):
    cap = 12.0
    m = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=cap)
    with torch.no_grad():
        m.log_logit_scale.fill_(math.log(cap) + 3.0)  # the parameter has grown far past the cap
    trainer = Trainer(m, Recipe(name="t", model="tiny", stages=[Stage("joint", steps=3, lr=0.5)], batch_size=4),
                      tiny_data(), tmp_path, progress=False)
    seen, forward = [], trainer.loss_fn.forward

    def spy(image_emb, text_emb, model, step):
        seen.append(model.logit_scale.item())
        return forward(image_emb, text_emb, model, step)

    trainer.loss_fn.forward = spy
    trainer.fit()
    # first step: the forward clamp; later steps: the parameter clamp, after which it may come back down
    assert len(seen) == 3 and seen[0] == pytest.approx(cap) and all(s <= cap + 1e-4 for s in seen)
    logged = [json.loads(x)["logit_scale"] for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert all(s <= cap + 1e-4 for s in logged)
    # the parameter itself is clamped after each step (open_clip's clamp_): at the cap, not past it
    assert m.log_logit_scale.item() <= math.log(cap) + 1e-6


def test_capped_loss_equals_the_loss_at_the_cap(make_model):
    from tokenspace.train.losses import SparseContrastiveLoss

    m = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=20.0)
    img, txt = torch.rand(4, m.config.embed_dim * 4), torch.rand(4, m.config.embed_dim * 4)
    loss = SparseContrastiveLoss()
    with torch.no_grad():
        m.log_logit_scale.fill_(math.log(20.0))
        at_cap = loss(img, txt, m, 0)["loss"]
        m.log_logit_scale.fill_(math.log(500.0))
        above = loss(img, txt, m, 0)["loss"]
    torch.testing.assert_close(above, at_cap)


def test_lower_cap_gives_a_lower_scale(make_model):
    hi = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=50.0)
    lo = make_model("sparse-clip", expansion=4, logit_scale_init=10.0, logit_scale_max=20.0)
    for m in (hi, lo):
        with torch.no_grad():
            m.log_logit_scale.fill_(10.0)
    assert lo.logit_scale.item() == pytest.approx(20.0) and hi.logit_scale.item() == pytest.approx(50.0)


def test_relu_and_no_relu_arms(make_model):
    grid = torch.randn(5, 16, 2, 2)
    relu = make_model("sparse-clip", expansion=4).eval()
    dense = make_model("sparse-clip", expansion=1, extra={"relu": False}).eval()
    with torch.no_grad():
        assert (relu.image_embed(grid) >= 0).all()
        assert (dense.image_embed(grid) < 0).any()  # signed: the dense ablation arm of Fig. 2a
    rows = relu.encode_image_grids(grid.numpy())
    assert rows.vocab.tokens[0] == "f00000" and rows.dim == relu.config.embed_dim * 4
    np.testing.assert_allclose(np.linalg.norm(rows.to_dense(), axis=1), 1.0, atol=1e-5)


def test_tracking_evaluator_reports_l0_and_recall(make_model):
    from tokenspace.train.tracking import tracking_evaluator

    data = tiny_data(6)
    ev = tracking_evaluator(data.grids, data.texts, np.arange(6))
    relu = ev(make_model("sparse-clip", expansion=4))
    width = 8 * 4
    assert 0 <= relu["l0_image"] <= width and relu["l0_frac_image"] == pytest.approx(relu["l0_image"] / width)
    assert 0 <= relu["image_retrieval_recall@1"] <= 1 and "text_retrieval_recall@10" in relu
    signed = ev(make_model("sparse-clip", expansion=1, extra={"relu": False}))
    # without ReLU nothing is exactly zero: every feature is active (the paper's "sparsity never emerges")
    assert signed["l0_image"] == pytest.approx(8) and signed["l0_frac_text"] == pytest.approx(1.0)


def test_tracking_through_training_lands_in_the_log(make_model, tmp_path):
    from tokenspace.train.tracking import eval_history, tracking_evaluator

    data = tiny_data()
    ev = tracking_evaluator(data.grids[:6], data.texts[:6], np.arange(6))
    r = Recipe(name="t", model="tiny", stages=[Stage("joint", steps=4)], batch_size=4, eval_every=2)
    Trainer(make_model("sparse-clip", expansion=4), r, data, tmp_path, evaluate=ev, progress=False).fit()
    hist = eval_history(tmp_path / "log.jsonl")
    assert [h["step"] for h in hist] == [2, 4, 4]  # every 2 steps, plus the stage end
    assert all("l0_image" in h and "image_retrieval_recall@1" in h for h in hist)
