"""The loss over the active columns (train/active.py) against the full [B, D] computation: values and
gradients. The 2-rank (gloo) version of the same check is in tests/scale/test_distributed.py."""
import numpy as np
import pytest
import torch

from tokenspace.train.active import active_columns, keep_active
from tokenspace.train.losses import SparseContrastiveLoss
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer


def sparse_batch(b=6, d=40, seed=0):
    """[b, d] image and text rows, non-negative, zero in most columns; one image row all zero and one
    column active in the images only (its text gradient is not zero in the full loss)."""
    g = torch.Generator().manual_seed(seed)
    img = torch.rand(b, d, generator=g) * (torch.rand(b, d, generator=g) > 0.8)
    txt = torch.rand(b, d, generator=g) * (torch.rand(b, d, generator=g) > 0.8)
    img[:, d // 2:], txt[:, d // 2:] = 0, 0  # half the columns dead in both
    img[:, d - 1] = 1.0  # active in the images, zero in every text
    img[2] = 0
    return img, txt


def loss_and_grads(model, loss_fn, img, txt, sparse: bool):
    img, txt = img.clone().requires_grad_(), txt.clone().requires_grad_()
    a, b = keep_active(img, txt) if sparse else (img, txt)
    parts = loss_fn(a, b, model, step=5)
    parts["loss"].backward()
    scale = model.log_logit_scale.grad  # None where the family fixes the scale (VisualSparta)
    return {k: float(v.detach()) for k, v in parts.items()}, img.grad, txt.grad, \
        torch.zeros(()) if scale is None else scale.clone()


@pytest.mark.parametrize("family,over", [("stair", {}), ("sparse-clip", {"expansion": 5, "extra": {"l1": 0.1}}),
                                         ("visualsparta", {})])
@pytest.mark.parametrize("reference_batch", [None, 16])
def test_active_columns_give_the_full_loss_and_gradients(make_model, family, over, reference_batch):
    m = make_model(family, **over)
    loss_fn = SparseContrastiveLoss(lambda_image=0.3, lambda_text=0.2, reference_batch=reference_batch)
    img, txt = sparse_batch()
    full = loss_and_grads(m, loss_fn, img, txt, sparse=False)
    m.zero_grad()
    fast = loss_and_grads(m, loss_fn, img, txt, sparse=True)
    assert set(full[0]) == set(fast[0])
    for k in full[0]:
        assert fast[0][k] == pytest.approx(full[0][k], rel=1e-6, abs=1e-7), k
    for got, want in zip(fast[1:], full[1:]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert (full[2][:, -1] != 0).any()  # the image-only column: the text side is pushed there


def test_keep_active_drops_only_columns_zero_in_both_sides():
    img, txt = sparse_batch()
    cols = active_columns(img, txt)
    want = ((img != 0) | (txt != 0)).any(0).nonzero().squeeze(1)
    assert torch.equal(cols, want) and len(cols) <= img.shape[1] // 2 + 1  # the dead half is gone
    a, b = keep_active(img, txt)
    assert torch.equal(a, img[:, want]) and torch.equal(b, txt[:, want])


def test_keep_active_leaves_dense_or_differently_wide_sides_alone():
    dense = torch.rand(4, 8) + 0.1
    a, b = keep_active(dense, dense * 2)
    assert a is dense
    wide = torch.zeros(4, 12)
    a, b = keep_active(dense, wide)
    assert a is dense and b is wide


def test_an_all_zero_batch_gives_the_full_loss(make_model):
    m = make_model()
    zero = torch.zeros(4, 34)
    full = loss_and_grads(m, SparseContrastiveLoss(lambda_image=0.1), zero, zero, sparse=False)
    m.zero_grad()
    fast = loss_and_grads(m, SparseContrastiveLoss(lambda_image=0.1), zero, zero, sparse=True)
    assert fast[0]["loss"] == pytest.approx(full[0]["loss"])
    assert torch.equal(fast[1], full[1]) and torch.equal(fast[2], full[2])


def test_the_trainer_step_is_the_same_with_and_without_active_columns(make_model, tmp_path):
    """The Trainer's own forward_loss (FLOPs terms on, a tiny STAIR model): loss, logged sparsity and every
    parameter gradient equal; the active columns are fewer than the vocabulary."""
    rng = np.random.default_rng(0)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun", "a star", "big fish"]
    data = PairData.from_texts(rng.standard_normal((8, 16, 2, 2)).astype(np.float32), words)
    stage = Stage("joint", steps=1)
    out = {}
    for sparse in (False, True):
        m = make_model()
        t = Trainer(m, Recipe(name="t", model="tiny", stages=[stage], batch_size=8, lambda_image=1e-1,
                              lambda_text=1e-1, flops_warmup=0), data, tmp_path, progress=False)
        t.sparse_loss = sparse
        t._trainable(stage)
        parts, img, _ = t.forward_loss(np.arange(8), stage, 0)
        parts["loss"].backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        out[sparse] = (float(parts["loss"].detach()), img.shape[1], grads)
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-6)
    assert out[True][1] < out[False][1] == 34
    assert out[True][2].keys() == out[False][2].keys() and len(out[True][2]) > 5
    for n, g in out[False][2].items():
        # float summation order: the sums over 34 vs the active columns round apart (seen: 1.5e-6 on a
        # gradient whose largest entry is 4.3, on a fresh machine's torch 2.13 CPU kernels)
        torch.testing.assert_close(out[True][2][n], g, rtol=1e-5, atol=5e-6, msg=n)
