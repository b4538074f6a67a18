"""A search's wall time from a lean install (no torch) against this venv's full install, on an index whose
model is inference-free.

    python -m benchmarks.cli_startup lean --index runs/if-idx                    # 7 runs each, interleaved
    python -m benchmarks.cli_startup lean --index runs/if-idx --runs 9 --json benchmarks/results/lean_search.json

The lean install is made as tests/test_lean_install.py makes it (``make_lean_venv``, shared): this tree's
wheel installed --no-deps into a fresh venv whose only other packages are the core's requirements,
linked from this venv (no network). Each search (`tokenspace search --index INDEX "a red heart" -k 3`) is
a fresh process; the two installs alternate run by run, so load on a shared machine falls on both alike;
one warm-up run each first (numba's on-disk cache filled, the file cache warm). Reports the median and
range of each, and the machine's load average, which says how far from a quiet machine the figures are.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from packaging.requirements import Requirement

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


def cli(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True, help="an index whose recorded model is inference-free")
    ap.add_argument("--query", default="a red heart")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        lean = make_lean_venv(Path(tmp))
        arms = {"lean": str(lean / "tokenspace"), "full": str(Path(sys.executable).with_name("tokenspace"))}
        env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(tmp) / "numba"))
        argv = ["search", "--index", args.index, args.query, "-k", "3"]
        for script in arms.values():  # warm-up: numba's cache, the file cache
            subprocess.run([script, *argv], env=env, capture_output=True, check=True, timeout=600)
        times: dict[str, list[float]] = {k: [] for k in arms}
        for _ in range(args.runs):
            for name, script in arms.items():
                t = time.perf_counter()
                subprocess.run([script, *argv], env=env, capture_output=True, check=True, timeout=600)
                times[name].append(time.perf_counter() - t)
    result = {"command": " ".join(["python -m benchmarks.cli_startup lean", *(sys.argv[1:] if argv is None else argv)]),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "index": args.index,
              "query": args.query, "runs": args.runs, "load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "seconds": {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "all": v}
                          for k, v in times.items()}}
    for k, v in result["seconds"].items():
        print(f"{k}: median {v['median']:.2f} s ({v['min']:.2f}-{v['max']:.2f}) over {args.runs} runs")
    print(f"load average {result['load_average'][0]:.1f} on {result['cpus']} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")

