"""benchmarks.lean_search's timing loop (the wheel and the venv are tests/test_lean_install.py's): each arm
a fresh process, interleaved, its wall time and its own CPU time (user + system of that process alone)."""
from __future__ import annotations

import os
import sys


def test_each_arm_gets_its_wall_and_its_own_cpu_time(load_benchmark):
    bench = load_benchmark("lean_search")
    idle = [sys.executable, "-c", "pass"]
    busy = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"]
    times = bench.time_arms({"idle": idle, "busy": busy}, 2, dict(os.environ))
    assert set(times) == {"idle", "busy"} and all(len(v["wall"]) == len(v["cpu"]) == 2 for v in times.values())
    assert all(c >= 0.3 for c in times["busy"]["cpu"]) and all(c < 0.3 for c in times["idle"]["cpu"]), times
    assert all(w >= c * 0.5 for w, c in zip(times["busy"]["wall"], times["busy"]["cpu"]))
    s = bench.stats(times["busy"]["wall"])
    assert s["min"] <= s["median"] <= s["max"] and len(s["all"]) == 2
