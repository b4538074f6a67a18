import math

import pytest
import torch

from tokenspace.train.losses import SparseContrastiveLoss, contrastive_loss, flops_loss, quadratic_warmup


def test_flops_loss_matches_hand_computation():
    emb = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    # column means: (1+3)/2 = 2, 0, (2+0)/2 = 1  ->  2^2 + 0 + 1^2 = 5
    assert flops_loss(emb).item() == pytest.approx(5.0)


def test_contrastive_loss_matches_hand_computation():
    logits = torch.tensor([[2.0, 0.0], [1.0, 3.0]])
    row = -(math.log(math.exp(2) / (math.exp(2) + 1)) + math.log(math.exp(3) / (math.exp(1) + math.exp(3)))) / 2
    col = -(math.log(math.exp(2) / (math.exp(2) + math.exp(1))) + math.log(math.exp(3) / (1 + math.exp(3)))) / 2
    assert contrastive_loss(logits).item() == pytest.approx((row + col) / 2, rel=1e-6)


def test_quadratic_warmup():
    assert quadratic_warmup(0, 10) == 0.0
    assert quadratic_warmup(5, 10) == pytest.approx(0.25)
    assert quadratic_warmup(20, 10) == 1.0
    assert quadratic_warmup(3, 0) == 1.0


def test_loss_parts_are_named_and_sum(make_model):
    m = make_model()
    loss = SparseContrastiveLoss(lambda_image=1e-2, lambda_text=1e-3, warmup_steps=0)
    img, txt = torch.rand(4, 34), torch.rand(4, 34)
    parts = loss(img, txt, m, step=10)
    assert set(parts) == {"contrastive", "flops_image", "flops_text", "loss", "logit_scale"}
    assert parts["flops_image"].item() == pytest.approx(1e-2 * flops_loss(img).item(), rel=1e-5)
    total = parts["contrastive"] + parts["flops_image"] + parts["flops_text"]
    assert parts["loss"].item() == pytest.approx(total.item(), rel=1e-6)
