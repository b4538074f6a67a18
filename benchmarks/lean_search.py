"""A search's wall time from a lean install (no torch) against this venv's full install, on an index whose
model is inference-free; and, with --release-index, the full install's search on an index of the release
model (its text tower runs the query).

    python -m benchmarks.cli_startup lean --index runs/if-idx                    # 7 runs each, interleaved
    python -m benchmarks.cli_startup lean --index runs/if-idx --release-index runs/demo/index \
        --runs 9 --json benchmarks/results/lean_search.json

The lean install is made as tests/test_lean_install.py makes it (``make_lean_venv``, shared): this tree's
wheel installed --no-deps into a fresh venv whose only other packages are the core's requirements,
linked from this venv (no network). Each search (`tokenspace search --index INDEX "a red heart" -k 3`) is
a fresh process; the installs alternate run by run, so load on a shared machine falls on all alike;
one warm-up run each first (numba's on-disk cache filled, the file cache warm). Reports the median and
range of each one's wall time and of its CPU time (user + system of the search process: on a quiet
machine a one-thread search's wall time is about its CPU time), and the
machine's load average, which says how far from a quiet machine the wall figures are. Targets: 0.5 s
for the lean search, 1 s for the release model's. A fourth arm, numba_floor, is the lean venv's Python
importing numpy and numba and calling one cached kernel: what a search paid on top before a small
index's one-query search ran in numpy (index/road.py), and what one that loads the kernels still pays (a
large index, approximate search). The arms run without PYTHONDONTWRITEBYTECODE (a sandbox may set it):
the full install is this checkout, whose modules would otherwise be compiled again in every process
(~0.25 s), as no installed package's are.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

from benchmarks.common import run_record

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(out: Path) -> Path:
    """The wheel of this tree, built from a copy (a build writes build/ and egg-info beside the sources)."""
    src = out / "src-copy"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(out), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("tokenspace-*.whl")
    return wheel


def core_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist without the extras' (what `pip install tokenspace` installs)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [Requirement(ln.split(":", 1)[1].strip()) for ln in lines if ln.startswith("Requires-Dist:")]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def closure(reqs: list[Requirement]) -> list[md.Distribution]:
    """The installed distributions ``reqs`` need, their own requirements followed (extras left out)."""
    seen: dict[str, md.Distribution] = {}
    todo = list(reqs)
    while todo:
        r = todo.pop()
        key = r.name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = md.distribution(r.name)  # PackageNotFoundError: a core dependency this venv lacks
        seen[key] = dist
        for sub in dist.requires or []:
            s = Requirement(sub)
            if s.marker is None or s.marker.evaluate({"extra": ""}):
                todo.append(s)
    return list(seen.values())


def link_site(dists: list[md.Distribution], site: Path) -> None:
    """Each distribution's top-level files and folders (its .dist-info included), linked into ``site``."""
    site.mkdir()
    for dist in dists:
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            target = Path(dist.locate_file(top))
            if target.exists() and not (site / top).exists():
                (site / top).symlink_to(target)


def make_lean_venv(folder: Path) -> Path:
    """A fresh venv in ``folder``/venv holding this tree's wheel and the core's requirements alone; its
    bin folder. No network: the requirements are this venv's installed files, linked."""
    wheel = build_wheel(folder / "wheel")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    link_site(closure(core_requirements(wheel)), folder / "core-deps")
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "core-deps.pth").write_text(str(folder / "core-deps") + "\n")
    return venv / "bin"


TARGETS_S = {"lean": 0.5, "release": 1.0}  # wall, on a quiet machine

# numba's cost to a process that loads the kernels (the "numba_floor" arm): the lean venv's Python
# importing numpy and numba and calling one cached kernel, as the kernels' first search does (numba builds
# its typing and target context on a process's first call, cache or not), then ending as the command
# ends; nothing of tokenspace
FLOOR_KERNEL = """
from numba import njit


@njit(cache=True, nogil=True)
def total(a):
    s = 0.0
    for x in a:
        s += x
    return s
"""


def child_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_arms(arms: dict[str, list[str]], runs: int, env: dict) -> dict[str, dict[str, list[float]]]:
    """Each arm's command (a fresh process) once to warm up, then ``runs`` times, the arms interleaved;
    {arm: {"wall": [...], "cpu": [...]}} in seconds."""
    for argv in arms.values():  # warm-up: numba's cache, the file cache
        subprocess.run(argv, env=env, capture_output=True, check=True, timeout=600)
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in arms}
    for _ in range(runs):
        for name, argv in arms.items():
            cpu, t = child_cpu(), time.perf_counter()
            subprocess.run(argv, env=env, capture_output=True, check=True, timeout=600)
            times[name]["wall"].append(time.perf_counter() - t)
            times[name]["cpu"].append(child_cpu() - cpu)
    return times


def stats(v: list[float]) -> dict:
    return {"median": round(statistics.median(v), 3), "min": round(min(v), 3), "max": round(max(v), 3),
            "all": [round(x, 3) for x in v]}


def cli(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="an index whose recorded model is inference-free")
    ap.add_argument("--release-index", default=None,
                    help="also time the full install's search on this index of the release model (e.g. "
                         "runs/demo/index): the query runs through its text tower")
    ap.add_argument("--query", default="a red heart")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    record = run_record(__file__, argv)
    record["command"] = " ".join(["python -m benchmarks.cli_startup lean",
                                  *(sys.argv[2:] if argv is None else argv)])
    search = ["search", args.query, "-k", "3"]
    with tempfile.TemporaryDirectory() as tmp:
        lean = make_lean_venv(Path(tmp))
        full = str(Path(sys.executable).with_name("tokenspace"))
        arms = {"lean": [str(lean / "tokenspace"), *search, "--index", args.index],
                "full": [full, *search, "--index", args.index]}
        if args.release_index:
            arms["release"] = [full, *search, "--index", args.release_index]
        (Path(tmp) / "floor_kernel.py").write_text(FLOOR_KERNEL)
        # a script beside the kernel's module (its folder is the script's import path); ended with os._exit,
        # as the search command ends its process (cli/__init__.py: no module teardown)
        (Path(tmp) / "floor_main.py").write_text(
            "import os\nimport numpy as np\nimport floor_kernel\nfloor_kernel.total(np.ones(3))\nos._exit(0)\n")
        arms["numba_floor"] = [str(lean / "python"), str(Path(tmp) / "floor_main.py")]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # see the docstring
        env["NUMBA_CACHE_DIR"] = str(Path(tmp) / "numba")
        times = time_arms(arms, args.runs, env)
    result = {**record, "index": args.index, "release_index": args.release_index, "query": args.query,
              "runs": args.runs, "load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "commands": {k: shlex.join([Path(v[0]).name, *v[1:]]) for k, v in arms.items()},
              "targets_s": {k: v for k, v in TARGETS_S.items() if k in arms},
              "seconds": {k: stats(v["wall"]) for k, v in times.items()},
              "cpu_seconds": {k: stats(v["cpu"]) for k, v in times.items()}}
    for k in times:
        w, c = result["seconds"][k], result["cpu_seconds"][k]
        target = f", target {TARGETS_S[k]} s" if k in TARGETS_S else ""
        print(f"{k}: median {w['median']:.2f} s wall ({w['min']:.2f}-{w['max']:.2f}), {c['median']:.2f} s CPU, "
              f"over {args.runs} runs{target}")
    print(f"load average {result['load_average'][0]:.1f} on {result['cpus']} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
