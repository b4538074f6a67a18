"""STAIR's token head (models/maxproj.py) never holds a [B, L, V] score tensor, forward or backward, and
gives the values and gradients of the plain autograd head that does."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tokenspace.models.maxproj import max_projection
from tokenspace.models.pooling import log1p_relu, max_log1p_relu


class LargestTensor(TorchDispatchMode):
    """Records the element count of the largest tensor any torch op returns (autograd's backward too)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def inputs(B=40, L=30, H=8, V=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, L, H, generator=g, requires_grad=True)
    w = torch.randn(V, H, generator=g, requires_grad=True)
    b = torch.randn(V, generator=g, requires_grad=True)
    valid = torch.rand(B, L, generator=g) > 0.3
    valid[:, 0] = True
    return h, w, b, valid


def naive_head(h, w, b, valid):  # what the head computed before max_projection: [B, L, V] scores
    return max_log1p_relu(h @ w.T + b, valid)


def fast_head(h, w, b, valid):
    return log1p_relu(max_projection(h, w, b, valid))


def run(head, h, w, b, valid, g):
    with LargestTensor() as seen:
        out = head(h, w, b, valid)
        grads = torch.autograd.grad((out * g).sum(), (h, w, b))
    return out.detach(), grads, seen.largest


def test_the_head_never_holds_batch_x_length_x_vocabulary_and_equals_the_autograd_head():
    h, w, b, valid = inputs()  # B x L = 1,200 rows: several slabs of at most 256
    g = torch.randn(40, 300)
    ref, ref_grads, ref_largest = run(naive_head, h, w, b, valid, g)
    out, grads, largest = run(fast_head, h, w, b, valid, g)
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    full = 40 * 30 * 300
    assert ref_largest >= full  # the recorder sees the plain head's [B, L, V] tensors...
    assert largest <= 256 * 300 < full // 4  # ...and the fast head's largest is one slab of <= 256 rows


def test_bf16_products_keep_the_slab_bound():
    h, w, b, valid = inputs(seed=1)
    with LargestTensor() as seen:
        out = max_projection(h, w, b, valid, compute_dtype=torch.bfloat16)
        out.sum().backward()
    assert seen.largest <= 256 * 300
