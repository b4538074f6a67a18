"""Wall time of `tokenspace ... --help` (`search --help` once took 2 s: torch was imported before
parsing; target under 0.5 s). Each command runs as a fresh process, as a user types it; the median of --runs.

    python -m benchmarks.cli_startup            # table, and benchmarks/results/cli_startup.json
    python -m benchmarks.cli_startup --runs 9

The console script next to this Python (the venv's `tokenspace`) is timed, else `python -m tokenspace`.
Also timed: a usage error (`search -k 0`), which is answered before any library loads too.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import run_record, write_json

OUT = Path(__file__).resolve().parent / "results" / "cli_startup.json"
CASES = [
    ["--help"],
    ["search", "--help"],
    ["index", "export", "--help"],
    ["encode", "--help"],
    ["serve", "--help"],
    ["train", "--help"],
    ["eval", "--help"],
    ["search", "--index", "x", "-k", "0", "q"],  # a usage error: exit 2
]
TARGET_S = 0.5  # for `search --help`


def command() -> list[str]:
    script = Path(sys.executable).with_name("tokenspace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tokenspace"]


def time_once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([*command(), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per command (median reported; default 5)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"results JSON (default {OUT})")
    args = ap.parse_args(argv)
    time_once(["--version"])  # warm the file cache once, as a user's second call finds it
    rows = []
    for argv in CASES:
        times = [time_once(argv) for _ in range(args.runs)]
        rows.append({"command": "tokenspace " + " ".join(argv), "median_s": round(statistics.median(times), 3),
                     "min_s": round(min(times), 3), "max_s": round(max(times), 3)})
    width = max(len(r["command"]) for r in rows)
    print(f"{'command':{width}s}  median s   min s   max s")
    for r in rows:
        print(f"{r['command']:{width}s}  {r['median_s']:8.3f}  {r['min_s']:6.3f}  {r['max_s']:6.3f}")
    search = next(r for r in rows if r["command"] == "tokenspace search --help")
    verdict = "meets" if search["median_s"] < TARGET_S else "misses"
    print(f"`tokenspace search --help`: {search['median_s']:.3f} s median, {verdict} the {TARGET_S} s target")
    write_json(args.out, {"runs": args.runs, "target_s": TARGET_S, "rows": rows}, run_record(__file__, argv))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
