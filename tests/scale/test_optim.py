"""LAMB against a plain NumPy transcription of the paper's update, and its place in recipes."""
import numpy as np
import pytest
import torch

from tokenspace.train.optim import Lamb, build_optimizer, param_groups
from tokenspace.train.recipe import Recipe


def reference_lamb(w, grads, lr, b1, b2, eps, wd, adapt):
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
        wn, un = np.linalg.norm(w), np.linalg.norm(u)
        r = wn / un if adapt and wn > 0 and un > 0 else 1.0
        w = w - lr * r * u
    return w


@pytest.mark.parametrize("wd", [0.0, 1e-2])
def test_lamb_matches_the_papers_update(wd):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((5, 4))
    grads = [rng.standard_normal((5, 4)) * 10 ** k for k in (-3, 0, 2)]  # scale-free: the ratio normalises
    p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
    opt = Lamb([p], lr=1e-2, betas=(0.9, 0.999), eps=1e-6, weight_decay=wd)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    expect = reference_lamb(w0, grads, 1e-2, 0.9, 0.999, 1e-6, wd, adapt=wd > 0)
    np.testing.assert_allclose(p.detach().numpy(), expect, rtol=1e-6, atol=1e-9)


def test_trust_ratio_moves_each_layer_by_lr_times_its_norm():
    torch.manual_seed(0)
    small, big = torch.nn.Parameter(torch.randn(8, 8) * 0.01), torch.nn.Parameter(torch.randn(8, 8) * 10)
    before = [small.detach().clone(), big.detach().clone()]
    opt = Lamb([small, big], lr=1e-3, weight_decay=1e-2)
    small.grad, big.grad = torch.randn(8, 8) * 1e3, torch.randn(8, 8) * 1e-3
    opt.step()
    for p, b in zip((small, big), before):
        assert (p.detach() - b).norm() / b.norm() == pytest.approx(1e-3, rel=1e-4)


def test_lamb_state_dict_resumes_exactly():
    torch.manual_seed(0)
    target = torch.randn(6, 3)

    def run(steps, opt_state=None, w=None):
        p = torch.nn.Parameter(w.clone() if w is not None else torch.ones(6, 3))
        opt = Lamb(param_groups([p], 1e-2), lr=1e-2, weight_decay=1e-2)
        if opt_state:
            opt.load_state_dict(opt_state)
        for _ in range(steps):
            opt.zero_grad()
            ((p - target) ** 2).sum().backward()
            opt.step()
        return p.detach(), opt.state_dict()

    full, _ = run(6)
    half, state = run(3)
    resumed, _ = run(3, state, half)
    torch.testing.assert_close(full, resumed)
    assert ((full - target) ** 2).sum() < ((torch.ones(6, 3) - target) ** 2).sum()


def test_recipe_selects_the_optimizer():
    r = Recipe.from_dict({"name": "r", "model": "m", "stages": [{"name": "s", "steps": 1}],
                          "optimizer": "lamb", "betas": [0.9, 0.98], "eps": 1e-6})
    assert r.betas == (0.9, 0.98)
    p = torch.nn.Parameter(torch.zeros(2, 2))
    assert isinstance(build_optimizer(r.optimizer, param_groups([p], 0.1), betas=r.betas), Lamb)
    assert isinstance(build_optimizer("adamw", param_groups([p], 0.1)), torch.optim.AdamW)
    with pytest.raises(ValueError, match="optimizer"):
        Recipe.from_dict({"name": "r", "model": "m", "stages": [{"name": "s", "steps": 1}], "optimizer": "sgd"})


def test_stair_paper_recipe_states_the_papers_schedule():
    r = Recipe.load("stair-paper")
    assert (r.optimizer, r.weight_decay, r.batch_size, r.lambda_image, r.lambda_text) == ("lamb", 1e-2, 16384, 1e-3, 1e-3)
    assert [s.steps for s in r.stages] == [300_000, 300_000, 600_000]
    assert [s.lr for s in r.stages] == [1e-3, 1e-3, 1e-4]
    assert all(s.warmup_steps == 10_000 for s in r.stages)
    assert r.stages[0].restrict_text and r.stages[1].freeze_image and r.train_image_tower
    assert r.flops_warmup > 0  # quadratic growth of lambda (SPLADE)
