"""CLI start-up: the wall time of a search as a user types it, against an earlier commit, and of --help.

    python -m benchmarks.cli_startup                      # search vs the base commit, breakdown, --help table
    python -m benchmarks.cli_startup --runs 9 --index runs/demo/index --base 49b5e3d
    python -m benchmarks.cli_startup --no-base            # this checkout only
    python -m benchmarks.cli_startup lean --index IDX    # the lean install (no torch) against the full one

The search (`tokenspace search --index INDEX "a red heart" -k 3`) runs as a fresh process each time, for
this checkout and for ``--base`` (checked out in a temporary `git worktree`, run by the same Python with
its src/ first on PYTHONPATH), interleaved run by run (base, new, base, new, ...) so that load on a shared
machine falls on both alike; the median of --runs each, after one warm-up run each (the file cache warm,
as a user's second call finds it; numba's on-disk cache filled). The ratio is base / new.

Where the time goes: the breakdown runs the search's steps as library calls, one after another in one
fresh process per checkout, timing each (import torch, import the search command, load the index, load
the model, encode the query, search; the rest of the process's wall time is the interpreter's start and
exit: a plain exit there, for both commits, while the command itself now shortens its exit), the median
over --runs (--no-breakdown skips it). Each checkout runs its own command's road: this one's text search
opens a text-only session, whose model is its text side without torch where it has one ("import torch"
0, and torch_imported false, in the results), the base's imports torch and loads the model itself. Its
index opens and answers in numpy where the index is small (index/road.py: numba_imported false), the
base's loads numba's kernels.

The commands run without PYTHONDONTWRITEBYTECODE (a sandbox may set it): with it every fresh process of
a checkout compiles its ~60 tokenspace modules again (~0.25 s), which no installed package does; the
warm-up run writes their bytecode.

Also timed: each --help and a usage error (`search -k 0`), answered before any library loads (target
under 0.5 s for `search --help`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, run_record, write_json

OUT = Path(__file__).resolve().parent / "results" / "cli_startup.json"
HELP_CASES = [
    ["--help"],
    ["search", "--help"],
    ["index", "export", "--help"],
    ["encode", "--help"],
    ["serve", "--help"],
    ["train", "--help"],
    ["eval", "--help"],
    ["search", "--index", "x", "-k", "0", "q"],  # a usage error: exit 2
]
HELP_TARGET_S = 0.5  # for `search --help`
SEARCH_TARGET_S = 1.0  # for the search with the release model, end to end, on a quiet machine (was 2.0)
BASE = "49b5e3d"  # the commit before the start-up work (7.0-7.5 s on a quiet machine)
QUERY = "a red heart"

# one process, the search's steps in order, each timed; printed as JSON on the last line. This checkout's
# road (PHASES): a text search opens a text-only session (Searcher.open(text_only=True): the model's text
# side without torch where it has one), numpy's BLAS on one thread as the command sets it; no torch is
# imported unless the model needs it ("import torch" then 0). The base's road (BASE_PHASES): torch first,
# then the model itself, through names that commit has (cli.index_loading, cli.model_loading,
# explain.ranking), torch's threads as that commit's command set them.
PHASES = r'''
import json, sys, time
t0 = time.perf_counter()
out = {"import torch": 0.0}
def lap(name):
    global t0
    now = time.perf_counter(); out[name] = now - t0; t0 = now
index_dir, query = sys.argv[1], sys.argv[2]
import tokenspace.cli.run.search
lap("import the search command")
from tokenspace.models.fused_queries import one_blas_thread
from tokenspace.index import InvertedIndex
from tokenspace.searcher import Collection, Searcher
one_blas_thread()  # as the command does for a text query
index = InvertedIndex.load(index_dir)
collection = Collection.of(index, index_dir)  # the index's record (an older index's collection.json)
lap("load the index")
searcher = Searcher.open(index, collection.model, ranking=collection.ranking, text_only=True, torch_threads=1)
lap("load the model")
searcher.query_vector(query)
lap("encode the query")
searcher.search(query, 3)  # the encoded query comes from the session's cache
lap("search")
out["torch imported"] = "torch" in sys.modules
out["numba imported"] = "numba" in sys.modules
print(json.dumps(out))
sys.stdout.flush()
'''
BASE_PHASES = r'''
import json, sys, time
t0 = time.perf_counter()
out = {}
def lap(name):
    global t0
    now = time.perf_counter(); out[name] = now - t0; t0 = now
index_dir, query = sys.argv[1], sys.argv[2]
import torch
lap("import torch")
import tokenspace.cli.run.search
lap("import the search command")
from tokenspace import pipeline
from tokenspace.cli.index_loading import load_index
from tokenspace.cli import model_loading
from tokenspace.cli.model_loading import load_model
from tokenspace.explain.ranking import Ranking, encode_queries
if hasattr(model_loading, "one_thread"):  # as that commit's search command does for a text query
    model_loading.one_thread()
index = load_index(index_dir)
meta = pipeline.read_collection_meta(index_dir)
lap("load the index")
info = dict(getattr(index, "info", None) or {}) or meta  # the index's own record, else an older collection.json
model = load_model(info["model"])
lap("load the model")
ranking = Ranking.from_dict(info.get("ranking"))
q = encode_queries(model, [query], ranking)
lap("encode the query")
index.search(index.weigh(q, ranking.idf), 3)
lap("search")
out["torch imported"] = True
out["numba imported"] = "numba" in sys.modules
print(json.dumps(out))
sys.stdout.flush()
'''


def console(src: Path | None) -> tuple[list[str], dict]:
    """The command and environment that run `tokenspace` from ``src`` (None: this checkout, through the
    venv's console script when there is one, as a user runs it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # see the docstring
    if src is None:
        script = Path(sys.executable).with_name("tokenspace")
        return ([str(script)] if script.exists() else [sys.executable, "-m", "tokenspace"]), env
    env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    return [sys.executable, "-m", "tokenspace"], env


def time_once(cmd: list[str], env: dict, argv: list[str], check: bool = False) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([*cmd, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.perf_counter() - t0
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({r.returncode}): "
                           f"{r.stderr.decode(errors='replace').strip()[-400:]}")
    return seconds


def phases_once(src: Path | None, index: str) -> dict:
    env = console(src)[1]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", BASE_PHASES if src else PHASES, index, QUERY], capture_output=True,
                       text=True, env=env, cwd=src.parent if src else ROOT, check=False)
    total = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"breakdown failed: {r.stderr.strip()[-400:]}")
    steps = json.loads(r.stdout.strip().splitlines()[-1])
    torch_imported = steps.pop("torch imported")
    numba_imported = steps.pop("numba imported")
    steps["exit and interpreter start"] = total - sum(steps.values())
    return {**steps, "total": total, "torch imported": torch_imported, "numba imported": numba_imported}


@contextlib.contextmanager
def worktree(commit: str):
    """A temporary `git worktree` of ``commit`` (removed afterwards): the base's src/ and models/."""
    tmp = Path(tempfile.mkdtemp(prefix="tokenspace-base-"))
    tree = tmp / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), commit], cwd=ROOT, check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
        tmp.rmdir()


def summary(times: list[float]) -> dict:
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "runs_s": [round(t, 3) for t in times]}


def search_rows(index: str, runs: int, base_src: Path | None, breakdown: bool) -> dict:
    argv = ["search", "--index", index, QUERY, "-k", "3"]
    sides = {"new": None, **({"base": base_src} if base_src is not None else {})}
    commands = {name: console(src) for name, src in sides.items()}
    for name, (cmd, env) in commands.items():  # warm-up: file cache, numba's cache, compiled bytecode
        time_once(cmd, env, argv, check=True)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(runs):  # interleaved: a burst of load on the shared machine falls on both
        for name, (cmd, env) in commands.items():
            times[name].append(time_once(cmd, env, argv, check=True))
    out = {name: summary(t) for name, t in times.items()}
    if base_src is not None:
        out["ratio_base_over_new"] = round(out["base"]["median_s"] / out["new"]["median_s"], 2)
    if breakdown:
        steps: dict[str, list[dict]] = {name: [] for name in sides}
        for _ in range(runs):
            for name, src in sides.items():
                steps[name].append(phases_once(src, index))
        for name, rows in steps.items():
            out[name]["breakdown_median_s"] = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]
                                               if k not in ("torch imported", "numba imported")}
            out[name]["torch_imported"] = any(r["torch imported"] for r in rows)
            out[name]["numba_imported"] = any(r["numba imported"] for r in rows)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per command (median reported; default 5)")
    ap.add_argument("--index", default=str(ROOT / "runs" / "demo" / "index"),
                    help="index the search runs on (default runs/demo/index, from `make demo`); it must name "
                         "its model and be readable by both commits")
    ap.add_argument("--base", default=BASE, help=f"commit to compare with (default {BASE}, before the start-up work)")
    ap.add_argument("--no-base", action="store_true", help="time this checkout only")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the per-step breakdown")
    ap.add_argument("--no-help", action="store_true", help="skip the --help table")
    ap.add_argument("--out", type=Path, default=OUT, help=f"results JSON (default {OUT})")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if not (Path(args.index) / "MANIFEST.json").exists():
        ap.error(f"--index {args.index}: no index there (make demo builds runs/demo/index)")
    record = run_record(__file__, argv)
    payload: dict = {"runs": args.runs, "index": args.index, "query": QUERY}

    with (contextlib.nullcontext(None) if args.no_base else worktree(args.base)) as tree:
        search = search_rows(args.index, args.runs, tree / "src" if tree else None, not args.no_breakdown)
    payload["search"] = {"command": f'tokenspace search --index {args.index} "{QUERY}" -k 3',
                         "base_commit": None if args.no_base else args.base, "target_s": SEARCH_TARGET_S, **search}
    print(f'tokenspace search --index {args.index} "{QUERY}" -k 3   (median of {args.runs}, interleaved)')
    for name in ("base", "new"):
        if name in search:
            label = f"{args.base} (base)" if name == "base" else f"{record['commit']} (this checkout)"
            print(f"  {label:28s} {search[name]['median_s']:6.3f} s   (min {search[name]['min_s']:.3f}, "
                  f"max {search[name]['max_s']:.3f})")
    if "ratio_base_over_new" in search:
        print(f"  base / new: {search['ratio_base_over_new']:.2f}x")
    verdict = "meets" if search["new"]["median_s"] < SEARCH_TARGET_S else "misses"
    print(f"  {verdict} the {SEARCH_TARGET_S} s target")
    if not args.no_breakdown:
        names = [n for n in ("base", "new") if n in search]
        steps = list(search[names[-1]]["breakdown_median_s"])
        print("  where the time goes (median s, one process per run):")
        print(f"    {'step':28s}" + "".join(f"{n:>9s}" for n in names))
        for step in steps:
            print(f"    {step:28s}" + "".join(f"{search[n]['breakdown_median_s'].get(step, 0):9.3f}" for n in names))

    if not args.no_help:
        cmd, env = console(None)
        time_once(cmd, env, ["--version"])  # warm the file cache once
        rows = []
        for case in HELP_CASES:
            times = [time_once(cmd, env, case) for _ in range(args.runs)]
            rows.append({"command": "tokenspace " + " ".join(case), **summary(times)})
        width = max(len(r["command"]) for r in rows)
        print(f"\n{'command':{width}s}  median s   min s   max s")
        for r in rows:
            print(f"{r['command']:{width}s}  {r['median_s']:8.3f}  {r['min_s']:6.3f}  {r['max_s']:6.3f}")
        shown = next(r for r in rows if r["command"] == "tokenspace search --help")
        verdict = "meets" if shown["median_s"] < HELP_TARGET_S else "misses"
        print(f"`tokenspace search --help`: {shown['median_s']:.3f} s median, {verdict} the {HELP_TARGET_S} s target")
        payload.update({"target_s": HELP_TARGET_S, "rows": rows})
    write_json(args.out, payload, record)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["lean"]:  # the lean install against the full one (benchmarks/lean_search.py)
        from benchmarks.lean_search import cli as lean

        lean(sys.argv[2:])
    else:
        main()
