"""benchmarks/gpu_run.py's pieces on the CPU at toy size (the whole --tiny run takes over a minute here:
run it by hand, `python -m benchmarks.gpu_run --tiny`)."""
from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def gpu_run(load_benchmark):
    return load_benchmark("gpu_run")


def test_the_global_loss_arms_agree_and_use_fewer_columns(gpu_run):
    out = {}
    gpu_run.global_loss(torch.device("cpu"), True, gpu_run.Clock(60, 0.1), out)
    stair = out["stair-paper@64"]
    assert stair["before"]["loss"] == pytest.approx(stair["active"]["loss"], rel=1e-6)
    assert stair["active"]["columns"] < stair["before"]["columns"] == 500
    # one rank's rows: the same columns, a share of the loss (not the global value)
    assert stair["local"]["columns"] == stair["active"]["columns"]
    assert stair["local"]["loss"] != pytest.approx(stair["active"]["loss"], rel=1e-3)
    dense = out["sparse-clip-vitb32@64"]  # dense rows: every column is active, nothing is dropped
    assert dense["active"]["columns"] == dense["before"]["columns"] == 256


def test_sparse_vectors_have_the_asked_non_zeros(gpu_run):
    v = gpu_run.sparse_vectors(3000, 400, 12, 0, torch.device("cpu"))
    assert v.shape == (3000, 400) and ((v > 0).sum(1) == 12).all()
    counts = (v > 0).sum(0)
    assert counts[:20].float().mean() > 4 * counts[-100:].float().mean()  # Zipf-like: a head and a tail


def test_gpu_days_from_measured_times(gpu_run):
    from tokenspace.train.recipe import Recipe

    measured = {"throughput": {"stair-paper": {"active": {"step_s": 0.5}}},
                "global_loss": {"stair-paper@16384": {"batch": 16384, "active": {"seconds": 0.25}}}}
    out = {}
    gpu_run.gpu_days(measured, out)
    r = Recipe.load("stair-paper")
    assert out["stair-paper"]["gpu_days"] == pytest.approx(r.total_steps * 0.75 * 64 / 86400)
    assert "error" in out["sparse-clip-vitb32"]  # nothing measured for it
    json.dumps(out)
    measured["global_loss"]["stair-paper@16384"]["local"] = {"seconds": 0.05}  # each rank's rows: preferred
    gpu_run.gpu_days(measured, out)
    assert out["stair-paper"]["gpu_days"] == pytest.approx(r.total_steps * 0.55 * 64 / 86400)


def test_merge_keeps_the_sections_not_rerun(gpu_run, tmp_path):
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"command": "x", "date": "d", "device": "GPU", "sections": {
        "throughput": {"stair-paper": {"active": {"step_s": 0.5}}}, "gpu_days": {"old": 1}}}))
    out = tmp_path / "new.json"
    assert gpu_run.main(["--tiny", "--sections", "gpu_days", "--merge", str(earlier), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["sections"]["throughput"] == {"stair-paper": {"active": {"step_s": 0.5}}}
    assert "old" not in got["sections"]["gpu_days"] and got["merged"]["sections"] == ["throughput"]


def test_the_autograd_head_arm_swaps_the_head_and_puts_it_back(gpu_run, make_model):
    from tokenspace.models import stair
    from tokenspace.models.maxproj import max_projection

    m = make_model()
    grid = torch.randn(2, 16, 3, 3)
    want = m.image_embed(grid)
    with gpu_run.autograd_head():
        assert stair.max_projection is not max_projection
        torch.testing.assert_close(m.image_embed(grid), want)
    assert stair.max_projection is max_projection


def test_without_a_gpu_it_refuses_unless_tiny(gpu_run, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert gpu_run.main([]) == 2
    assert "--tiny" in capsys.readouterr().err


def test_slabs_follow_the_device_and_the_slab_arm_puts_them_back(gpu_run):
    from tokenspace.models import maxproj

    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # (a device object needs no GPU)
    assert maxproj._chunk(100, 4, cpu) == 64  # 256 rows: 64 items of 4 positions
    assert maxproj._chunk(100, 4, cuda) == 100 and maxproj._chunk(2000, 4, cuda) == 1024  # 4,096 rows
    with gpu_run.slab_rows(256):
        assert maxproj._chunk(2000, 4, cuda) == 64
    assert maxproj._chunk(2000, 4, cuda) == 1024 and maxproj._chunk(100, 4, cpu) == 64


@pytest.mark.parametrize("name", ["stair-paper", "sparse-clip-vitb32", "visualsparta-paper"])
def test_paper_configs_build_at_random_init_without_any_asset(load_benchmark, name, tmp_path, monkeypatch):
    """The GPU machine has no asset cache: a tower whose default weights are an asset (EfficientNet-Lite0
    for visualsparta-paper) must get no weights, not its default."""
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path))  # an empty cache
    cfg, model = load_benchmark("paper_costs").build_meta(name)
    assert sum(p.numel() for p in model.parameters()) > 1_000_000
