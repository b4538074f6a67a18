"""benchmarks/gpu_run.py's step and encode pieces (the ``stair_step``, ``compile`` and ``encode`` sections) on
the CPU at toy size: the step variants compute what the library's step computes, and the summaries of
the GPU-only measurements read their inputs right."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def gpu_run(load_benchmark):
    return load_benchmark("gpu_run")


def test_the_foreach_lamb_steps_as_lamb_does(gpu_run):
    from tokenspace.train.optim import Lamb, param_groups

    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7)),
          torch.nn.Parameter(torch.zeros(4, 2))]  # a zero tensor: its trust ratio falls back to 1
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    ref = Lamb(param_groups(ps, 0.01), lr=1e-2, betas=(0.9, 0.98), eps=1e-6)
    new = gpu_run.foreach_lamb(Lamb(param_groups(qs, 0.01), lr=1e-2, betas=(0.9, 0.98), eps=1e-6))
    assert type(new).__name__ == "ForeachLamb" and isinstance(new, Lamb)
    for step in range(4):
        g = [torch.randn_like(p) for p in ps]
        for p, q, gi in zip(ps, qs, g):
            p.grad, q.grad = gi.clone(), gi.clone()
        ref.step()
        new.step()
        for p, q in zip(ps, qs):
            torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
    assert float(new.state[qs[0]]["step"]) == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_low_precision_max_gives_max_projections_values_and_gradients(gpu_run, dtype):
    from tokenspace.models import stair
    from tokenspace.models.maxproj import max_projection

    torch.manual_seed(1)
    h0, w0, b0 = torch.randn(3, 5, 8), torch.randn(11, 8), torch.randn(11)
    valid = torch.ones(3, 5, dtype=torch.bool)
    valid[1, 3:] = False

    def run(fn):
        h, w, b = (t.clone().requires_grad_() for t in (h0, w0, b0))
        out = fn(h, w, b, valid, dtype)
        (out * torch.arange(11.0)).sum().backward()
        return out.detach(), h.grad, w.grad, b.grad

    want = run(max_projection)
    with gpu_run.low_precision_max():
        assert stair.max_projection is not max_projection
        got = run(stair.max_projection)
    assert stair.max_projection is max_projection
    assert torch.equal(got[0], want[0])  # widening after the max: the same values
    for a, b in zip(got[1:], want[1:]):
        torch.testing.assert_close(a, b)


def test_compile_blocks_finds_both_towers_blocks_and_the_step_is_unchanged(gpu_run):
    from benchmarks import paper_costs
    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model
    from tokenspace.models.shrink import shrink
    cfg = shrink(paper_costs.random_init(ModelConfig.load("stair-paper")), width=16, layers=2, vocab=40,
                 image_size=16, patch=8, heads=2)
    vocab = paper_costs.synthetic_vocab(40)
    _, recipe = gpu_run.build("stair-paper", True)
    losses = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = build_model(cfg, vocab=vocab)
        t, stage, opt = gpu_run.trainer_for(model, recipe, 4, torch.device("cpu"))
        if compiled:
            assert gpu_run.compile_blocks(model, tiny=True) == 4  # 2 ViT layers + 2 text layers
        losses.append([t.step(np.arange(4), stage, s, opt)["loss"] for s in range(2)])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_mfu_is_three_forwards_over_the_step_and_the_peak(gpu_run):
    flops = {"image_tower": 2e9, "image_head": 1e9, "text_tower": 1e9, "text_head": 0.5e9,
             "text_head_restricted": 9e9}  # stage 1's head: not part of the joint step
    got = gpu_run.mfu(flops, 100, 0.5, peak=1e12)
    assert got["model_tflop_per_step"] == pytest.approx(3 * 4.5e9 * 100 / 1e12)
    assert got["mfu"] == pytest.approx(3 * 4.5e9 * 100 / 0.5 / 1e12)


def test_the_trace_summary_reads_kernels_launches_and_syncs(gpu_run):
    events = [
        {"cat": "kernel", "name": "sm90_xmma_gemm_bf16", "ts": 0, "dur": 10},
        {"cat": "kernel", "name": "flash_fwd_kernel", "ts": 5, "dur": 10},  # overlaps the first: busy 0-15
        {"cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 30, "dur": 5},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 40, "dur": 2},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "ts": 1, "dur": 1},
        {"cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 2, "dur": 1},
        {"cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 3, "dur": 1},
    ]

    class Prof:
        def export_chrome_trace(self, path):
            with open(path, "w") as f:
                json.dump({"traceEvents": events}, f)

    got = gpu_run.trace_summary(Prof(), wall_us=100.0, steps=1)
    assert got["by_kind_ms_per_step"] == {"matmul": 0.01, "attention": 0.01, "elementwise / reduction / other": 0.005,
                                          "memcpy / memset": 0.002}
    assert got["device_busy_share"] == pytest.approx((15 + 5 + 2) / 100)
    assert got["kernel_launches_per_step"] == 2 and got["stream_syncs_per_step"] == 1
    assert got["scalar_reads_per_step"] == 1
    assert got["top_kernels_ms_per_step"][0] == ["sm90_xmma_gemm_bf16", 0.01]


def test_rows_agreement_of_equal_and_of_moved_rows(gpu_run):
    from tokenspace.sparse import SparseBatch

    a = SparseBatch.from_dense(np.array([[0, 1, 2, 0], [3, 0, 0, 1]], np.float32))
    b = SparseBatch.from_dense(np.array([[0, 1, 2.5, 0], [3, 1, 0, 0]], np.float32))
    same = gpu_run.rows_agreement(a, a)
    assert same["jaccard_mean"] == 1.0 and same["identical_rows"] == 2 and same["max_weight_diff_common"] == 0
    moved = gpu_run.rows_agreement(a, b)
    assert moved["jaccard_min"] == pytest.approx(1 / 3, abs=1e-5) and moved["max_weight_diff_common"] == pytest.approx(0.5)
