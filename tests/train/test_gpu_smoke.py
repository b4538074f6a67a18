"""`make gpu-smoke`'s CPU variant (benchmarks/gpu_smoke.py --tiny): every paper config starts, trains from
its synthetic shards through the ScaleTrainer and its loss falls, within a minute of CPU time."""
from __future__ import annotations

import json
import time


def test_gpu_smoke_tiny_runs_every_paper_config_on_cpu(tmp_path, load_benchmark):
    mod = load_benchmark("gpu_smoke")
    cpu0 = time.process_time()
    # workers 0: the decoding runs in this process, so its CPU time is all counted below
    code = mod.cli(["--tiny", "--workers", "0", "--out", str(tmp_path / "smoke.json"), "--work", str(tmp_path / "w")])
    cpu = time.process_time() - cpu0
    results = json.loads((tmp_path / "smoke.json").read_text())["results"]
    assert [r["config"] for r in results] == ["stair-paper", "sparse-clip-vitb32", "visualsparta-paper"]
    for r in results:
        assert "error" not in r, r
        assert r["finite"] and r["loss_falls"], r
        assert r["steps"] == 40 and r["step_s"] > 0 and r["peak_mib"] > 0
    assert code == 0
    assert cpu < 60, f"the CPU smoke took {cpu:.0f} s of CPU time"
