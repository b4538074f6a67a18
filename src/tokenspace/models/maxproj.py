"""max_j (h_j . e_v + b_v) over positions j, for every vocabulary entry v, without autograd's copies.

This is the inner loop of STAIR's token projection head (eq. 4-5) and what dominates a training
step on CPU: a [B, L, V] score tensor with V = 30,522. Plain autograd materialises it several times
(bias add, masking, dtype casts, the max's backward). Here the forward keeps only the max and its
argmax ([B, V] each) and the backward scatters the incoming gradient to the winning positions and
runs two matrix products. Mathematically identical to the autograd version (tested against it).
"""
from __future__ import annotations

import torch

from tokenspace.models.pooling import in_onnx_export

# (batch x positions) rows per slab. CPUs: bounded memory. GPUs: fewer, larger products; a STAIR step
# (ViT-B/16 + 12 x 512, batch 256, bf16, one H200) took 0.233 s at 4,096 rows against 0.288 s at 256,
# for 1 GiB more peak memory (benchmarks/results/gpu_run.json, throughput "slab-4096" vs "active")
SLAB_ROWS = {"cpu": 256, "cuda": 4096}


def _chunk(B: int, L: int, device: torch.device) -> int:
    return max(1, min(B, SLAB_ROWS.get(device.type, SLAB_ROWS["cpu"]) // max(L, 1)))


class _MaxProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, bias, valid, compute_dtype):
        # h [B, L, H], weight [V, H], bias [V], valid [B, L] bool -> [B, V] (float32)
        B, L, _ = h.shape
        hc, wc = h.to(compute_dtype), weight.to(compute_dtype)
        best = torch.empty(B, weight.shape[0], dtype=torch.float32, device=h.device)
        arg = torch.empty(B, weight.shape[0], dtype=torch.long, device=h.device)
        step = _chunk(B, L, h.device)
        for a in range(0, B, step):  # a few [L, V] slabs at a time: big matmuls, bounded memory
            s = (hc[a : a + step] @ wc.T).float()  # [b, L, V]
            if valid is not None:
                s.masked_fill_(~valid[a : a + step, :, None], float("-inf"))
            torch.max(s, dim=1, out=(best[a : a + step], arg[a : a + step]))
        best += bias.float()
        ctx.save_for_backward(h, weight, arg)
        ctx.compute_dtype = compute_dtype
        return best

    @staticmethod
    def backward(ctx, grad):  # grad [B, V]
        h, weight, arg = ctx.saved_tensors
        B, L, _ = h.shape
        cd = ctx.compute_dtype
        grad_h = grad_w = grad_b = None
        # rows with every position masked have max = -inf; their gradient is 0, not NaN
        grad = torch.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(0).to(weight.dtype)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            wc, hc = weight.to(cd), h.to(cd)
            gh = torch.empty_like(h) if ctx.needs_input_grad[0] else None
            gw = torch.zeros(weight.shape, dtype=torch.float32, device=h.device) if ctx.needs_input_grad[1] else None
            step = _chunk(B, L, h.device)
            for a in range(0, B, step):
                n = min(step, B - a)
                g = torch.zeros(n, L, weight.shape[0], dtype=cd, device=h.device)  # gradient lands on the argmax only
                g.scatter_(1, arg[a : a + n, None], grad[a : a + n, None].to(cd))
                if gh is not None:
                    gh[a : a + n] = (g @ wc).to(h.dtype)  # [n, L, H]
                if gw is not None:
                    gw += (g.reshape(n * L, -1).T @ hc[a : a + n].reshape(n * L, -1)).float()  # [V, H]
            grad_h = gh
            grad_w = gw.to(weight.dtype) if gw is not None else None
        return grad_h, grad_w, grad_b, None, None


def max_projection(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                   valid: torch.Tensor | None = None, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[B, L, H] positions -> [B, V] = max over valid positions of (h @ weight.T + bias).

    ``compute_dtype=torch.bfloat16`` runs the two big matrix products in bf16 (fp32 accumulation of
    the result), ~2.7x faster on CPUs with AVX512-BF16."""
    if valid is not None:
        valid = valid.bool()
    if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad or bias.requires_grad):
        return _MaxProjection.apply(h, weight, bias, valid, compute_dtype)
    if in_onnx_export():  # (torch.onnx itself is imported only by an export)
        return _max_projection_graph(h, weight, bias, valid, compute_dtype)
    return _max_projection_inference(h, weight, bias, valid, compute_dtype)


def _max_projection_graph(h, weight, bias, valid, compute_dtype) -> torch.Tensor:
    """The forward as one graph for the ONNX exporter (models/onnx_export.py): the tracer would unroll
    the slab loop below for the example's batch size, so the file would be wrong for any other batch."""
    s = (h.to(compute_dtype) @ weight.to(compute_dtype).T).float()  # [B, L, V]
    if valid is not None:
        s = s.masked_fill(~valid[:, :, None], float("-inf"))
    return s.amax(dim=1) + bias.float()


def _max_projection_inference(h, weight, bias, valid, compute_dtype) -> torch.Tensor:
    """The forward alone (encoding, evaluation): ``amax`` keeps no argmax for a backward, which makes the
    reduction ~10x cheaper than ``torch.max(dim=1)`` with indices ([B, V] longs written per slab)."""
    B, L, _ = h.shape
    hc, wt = h.to(compute_dtype), weight.to(compute_dtype).T
    best = torch.empty(B, weight.shape[0], dtype=torch.float32, device=h.device)
    step = _chunk(B, L, h.device)
    for a in range(0, B, step):
        s = (hc[a : a + step] @ wt).float()  # [b, L, V]
        if valid is not None:
            s.masked_fill_(~valid[a : a + step, :, None], float("-inf"))
        torch.amax(s, dim=1, out=best[a : a + step])
    return best.add_(bias.float())
