"""LAMB's multi-tensor step (the default) against its per-tensor reference (``Lamb(foreach=False)``): the
same update over several steps on a tiny model, with the trainer's groups (decay and no-decay), the
trust ratio's edge cases (zero weights, zero updates), tensors without a gradient on some steps, low
precision parameters, and checkpoints that pass between the two."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from tokenspace.train.optim import Lamb, build_optimizer, param_groups


class Tiny(nn.Module):
    """Matrices, biases, a norm, an embedding, a scalar, and two tensors at the trust ratio's edges: a zero
    matrix (||w|| = 0) and a zero matrix that gets zero gradients (||w|| = ||u|| = 0)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.fc1 = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 4)
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.zero = nn.Parameter(torch.zeros(4, 4))  # learns from 0: ratio 1 on its first step
        self.dead = nn.Parameter(torch.zeros(3, 3))  # never used: zero gradient, zero update

    def forward(self, ids):
        h = self.norm(torch.relu(self.fc1(self.emb(ids).mean(1))))
        out = self.fc2(h) @ (torch.eye(4) + self.zero)
        return (out * self.scale).pow(2).mean() + 0 * self.dead.sum()


def groups(model, wd=1e-2):
    """The trainer's layout: decay and no-decay groups, each with its lr scale (train/trainer.py)."""
    ps = list(model.parameters())
    decay, no_decay = [p for p in ps if p.ndim >= 2], [p for p in ps if p.ndim < 2]
    return [{"params": decay, "weight_decay": wd, "lr_scale": 1.0},
            {"params": no_decay, "weight_decay": 0.0, "lr_scale": 0.5}]


def pair(seed=0):
    torch.manual_seed(seed)
    a = Tiny()
    b = Tiny()
    b.load_state_dict(a.state_dict())
    return a, b


def train(model, opt, steps, seed=1, skip=()):
    """``steps`` steps on fixed random batches; parameters named in ``skip`` get no gradient on odd steps."""
    g = torch.Generator().manual_seed(seed)
    for s in range(steps):
        ids = torch.randint(0, 11, (5, 3), generator=g)
        opt.zero_grad(set_to_none=True)
        model(ids).backward()
        if s % 2:
            for name, p in model.named_parameters():
                if name in skip:
                    p.grad = None
        opt.step()


def assert_same(a, b, rtol=1e-5, atol=1e-7):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q, p, rtol=rtol, atol=atol, msg=lambda m, name=name: f"{name}: {m}")


def test_foreach_is_the_default():
    p = nn.Parameter(torch.ones(2, 2))
    assert Lamb([p]).foreach
    assert build_optimizer("lamb", param_groups([p], 0.1)).foreach


@pytest.mark.parametrize("always_adapt", [False, True])
def test_the_foreach_step_equals_the_per_tensor_step(always_adapt):
    ref_model, new_model = pair()
    kw = dict(lr=3e-2, betas=(0.9, 0.98), eps=1e-6, always_adapt=always_adapt)
    ref = Lamb(groups(ref_model), foreach=False, **kw)
    new = Lamb(groups(new_model), **kw)
    before = new_model.zero.detach().clone()
    train(ref_model, ref, 6)
    train(new_model, new, 6)
    assert_same(ref_model, new_model)
    assert not torch.equal(new_model.zero, before)  # the zero matrix learnt (its ratio fell back to 1)
    assert torch.equal(new_model.dead, torch.zeros(3, 3))  # zero weights, zero update: still zero, no NaN
    for p, q in zip(ref_model.parameters(), new_model.parameters()):
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(new.state[q][k], ref.state[p][k], rtol=1e-6, atol=1e-9)
        assert float(new.state[q]["step"]) == float(ref.state[p]["step"]) == 6


def test_weight_decay_and_the_ratio_act_only_in_the_decay_group():
    """A zero gradient: the step is decay alone, rescaled by the trust ratio to lr x ||w|| in the decay group;
    the no-decay group (wd 0, no ratio) stays where it is."""
    torch.manual_seed(0)
    w, b = nn.Parameter(torch.randn(5, 3)), nn.Parameter(torch.randn(5))
    w0, b0 = w.detach().clone(), b.detach().clone()
    opt = Lamb([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], lr=1e-2)
    w.grad, b.grad = torch.zeros_like(w), torch.zeros_like(b)
    opt.step()
    torch.testing.assert_close(w.detach(), w0 * (1 - 1e-2))  # u = wd w, r = ||w|| / ||u||: w - lr w
    assert torch.equal(b.detach(), b0)


def test_tensors_without_gradients_keep_their_own_step_counts():
    """Tensors of one group skipped on some steps (no gradient) count fewer steps: each one's bias
    correction is its own, as in the per-tensor loop."""
    ref_model, new_model = pair(3)
    skip = ("fc1.weight", "norm.bias")
    ref = Lamb(groups(ref_model), lr=2e-2, foreach=False)
    new = Lamb(groups(new_model), lr=2e-2)
    train(ref_model, ref, 5, skip=skip)
    train(new_model, new, 5, skip=skip)
    assert_same(ref_model, new_model)
    assert float(new.state[new_model.fc1.weight]["step"]) == 3
    assert float(new.state[new_model.fc2.weight]["step"]) == 5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_low_and_double_precision_parameters_step_alike(dtype):
    torch.manual_seed(0)
    w = [torch.randn(6, 5).to(dtype), torch.randn(5).to(dtype), torch.randn(4, 4)]  # one float32 among them
    ref_ps = [nn.Parameter(x.clone()) for x in w]
    new_ps = [nn.Parameter(x.clone()) for x in w]
    ref = Lamb(param_groups(ref_ps, 1e-2), lr=1e-2, foreach=False)
    new = Lamb(param_groups(new_ps, 1e-2), lr=1e-2)
    for s in range(4):
        grads = [torch.randn(x.shape).to(x.dtype) for x in w]
        for p, q, g in zip(ref_ps, new_ps, grads):
            p.grad, q.grad = g.clone(), g.clone()
        ref.step()
        new.step()
    for p, q in zip(ref_ps, new_ps):
        assert q.dtype == p.dtype
        tol = {"rtol": 1e-2, "atol": 1e-2} if p.dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-7}
        torch.testing.assert_close(q, p, **tol)


def test_checkpoints_pass_between_the_two_steps():
    """The state_dict is the same either way: a run checkpointed under one step resumes under the other."""
    full_model, half_model = pair(5)
    full = Lamb(groups(full_model), lr=2e-2, foreach=False)
    train(full_model, full, 6, seed=7)
    first = Lamb(groups(half_model), lr=2e-2)  # foreach for the first 3 steps
    g = torch.Generator().manual_seed(7)
    for _ in range(3):
        first.zero_grad(set_to_none=True)
        half_model(torch.randint(0, 11, (5, 3), generator=g)).backward()
        first.step()
    state = first.state_dict()
    assert set(state["param_groups"][0]) == set(full.state_dict()["param_groups"][0])
    second = Lamb(groups(half_model), lr=2e-2, foreach=False)
    second.load_state_dict(state)
    for _ in range(3):
        second.zero_grad(set_to_none=True)
        half_model(torch.randint(0, 11, (5, 3), generator=g)).backward()
        second.step()
    assert_same(full_model, half_model)


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # reading a CPU scalar (each tensor's step count) launches nothing on a GPU: not counted
        self.n += func is not torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("foreach", [True, False])
def test_the_foreach_step_dispatches_per_group_not_per_tensor(foreach):
    """What a GPU sees as kernel launches: the multi-tensor step's ops do not grow with the number of
    tensors (the per-tensor step's do, ~20 per tensor)."""
    counts = []
    for n in (4, 40):
        ps = [nn.Parameter(torch.randn(3, 3)) for _ in range(n)]
        opt = Lamb(param_groups(ps, 1e-2), lr=1e-2, foreach=foreach)
        for p in ps:
            p.grad = torch.randn(3, 3)
        opt.step()  # the state exists: the counted step is a steady one
        with _Ops() as ops:
            opt.step()
        counts.append(ops.n)
    if foreach:
        assert counts[0] == counts[1] < 40
        assert all(s["step"].device.type == "cpu" for s in opt.state.values())
    else:
        assert counts[1] - counts[0] >= 36 * 15
