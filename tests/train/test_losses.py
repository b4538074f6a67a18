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


def test_flops_loss_at_its_reference_batch_is_eq6():
    emb = torch.rand(8, 5) * (torch.rand(8, 5) > 0.5)
    assert flops_loss(emb, reference_batch=8).item() == pytest.approx(flops_loss(emb).item(), rel=1e-6)


def test_flops_loss_reference_batch_is_unbiased_for_eq6_at_that_batch():
    """Batches of 8 drawn from a population: the mean of the reference-batch loss is eq. 6's expectation
    at batch 256 (mu^2 (1 - 1/R) + E[a^2] / R); plain eq. 6 at batch 8 is far above it (its Var / B)."""
    g = torch.Generator().manual_seed(0)
    pop = torch.rand(4000, 6, generator=g) * (torch.rand(4000, 6, generator=g) < torch.tensor([0.01, 0.02, 0.05, 0.1, 0.2, 0.3]))
    r = 256
    mu, ea2 = pop.mean(0), pop.pow(2).mean(0)
    target = ((1 - 1 / r) * mu.pow(2) + ea2 / r).sum().item()
    idx = torch.randint(0, len(pop), (20000, 8), generator=g)
    est = torch.stack([flops_loss(pop[i], reference_batch=r) for i in idx]).mean().item()
    plain = torch.stack([flops_loss(pop[i]) for i in idx]).mean().item()
    assert est == pytest.approx(target, rel=0.02)
    assert plain > 1.3 * target


def test_flops_loss_reference_batch_barely_pushes_a_token_only_one_sample_has():
    emb = torch.zeros(64, 3)
    emb[0, 0] = 2.0  # token 0 active in one sample only
    emb[:, 1] = 1.0  # token 1 active everywhere
    emb.requires_grad_(True)
    flops_loss(emb).backward()
    plain = emb.grad.clone()
    emb.grad = None
    flops_loss(emb, reference_batch=16384).backward()
    # eq. 6 at batch 64: 2 a / B^2; at 16,384 only the 1/R part is left: 2 a / (B R)
    assert plain[0, 0].item() == pytest.approx(2 * 2.0 / 64**2)
    assert emb.grad[0, 0].item() == pytest.approx(2 * 2.0 / (64 * 16384), rel=1e-4)
    # a token every sample has feels the same pressure at either batch size
    assert emb.grad[5, 1].item() == pytest.approx(plain[5, 1].item(), rel=1e-3)


class _Model:
    """score and logit scale of a dual encoder (cosine) or of VisualSparta (dot, its own objective)."""

    def __init__(self, own_objective: bool):
        self.logit_scale = torch.tensor(1.0 if own_objective else 7.0)
        self.own = own_objective

    def score(self, a, b):
        if self.own:
            return a @ b.T
        return torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T


class _OwnObjective(_Model):
    def contrastive_objective(self, logits, cols=None, offset=0):
        from tokenspace.models.visualsparta import text_to_image_loss

        return text_to_image_loss(logits, cols, offset)


@pytest.mark.parametrize("own_objective", [False, True])
@pytest.mark.parametrize("distill", [0.0, 0.5])
def test_rank_blocks_average_to_the_global_loss_and_gradient(own_objective, distill):
    """Data parallelism: each of W ranks computes its rows' share ([b, B] + [B, b] logits); the mean of
    the shares is the [B, B] loss, and its gradient (what the summing gather and DDP's averaging give)
    is the single-process gradient, for the symmetric loss, VisualSparta's text -> image objective and
    the distillation term."""
    gen = torch.Generator().manual_seed(3)
    B, D, W = 12, 20, 3
    img = (torch.rand(B, D, generator=gen) * (torch.rand(B, D, generator=gen) > 0.5)).requires_grad_()
    txt = (torch.rand(B, D, generator=gen) * (torch.rand(B, D, generator=gen) > 0.5)).requires_grad_()
    teacher = torch.randn(B, B, generator=gen) * 3
    model = _OwnObjective(True) if own_objective else _Model(False)
    loss_fn = SparseContrastiveLoss(1e-2, 1e-2, distill=distill)
    extra = {"teacher_logits": teacher} if distill else {}
    full = loss_fn(img, txt, model, step=10, **extra)
    g_img, g_txt = torch.autograd.grad(full["loss"], (img, txt))
    b = B // W
    shares = [loss_fn(img, txt, model, step=10, rows=slice(r * b, (r + 1) * b), **extra) for r in range(W)]
    for name in full:
        mean = sum(s[name] for s in shares) / W
        assert float(mean) == pytest.approx(float(full[name]), rel=1e-5), name
    if not own_objective:  # a share is not the whole loss: rows alone would not do
        assert float(shares[0]["contrastive"]) != pytest.approx(float(full["contrastive"]), rel=1e-3)
    s_img, s_txt = torch.autograd.grad(sum(s["loss"] for s in shares) / W, (img, txt))
    torch.testing.assert_close(s_img, g_img, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(s_txt, g_txt, rtol=1e-5, atol=1e-7)
