"""Run one experiment from its config file.

    python -m experiments.run --list                 # every experiment, its question and its result files
    python -m experiments.run prune_sweep            # runs experiments/prune_sweep.toml's command
    python -m experiments.run prune_sweep --dry-run  # prints the command only
    python -m experiments.run prune_sweep -- --image 0 100    # extra arguments go to the experiment

A config (experiments/<name>.toml) holds the question, the module that answers it and its default
arguments, and the result files it wrote when it was last run. The runner adds the run record (date,
commit, machine, command) as benchmarks/results/<name>.run.json, so an experiment is traced the same way
as a maintained benchmark even when its own JSON predates the record.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import tomllib

from benchmarks.common import RESULTS, ROOT, run_record, write_json

HERE = Path(__file__).resolve().parent


def configs() -> dict[str, dict]:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(HERE.glob("*.toml"))}


def command_line(cfg: dict, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", cfg["module"], *cfg.get("args", []), *extra]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", help="experiment (a file experiments/<name>.toml)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    known = configs()
    if args.list or not args.name:
        for name, cfg in known.items():
            print(f"{name:22s} {cfg['question']}\n{'':22s} results: {', '.join(cfg.get('results', [])) or '-'}")
        return 0
    if args.name not in known:
        ap.error(f"no experiments/{args.name}.toml; choose from {', '.join(known)}")
    cfg = known[args.name]
    cmd = command_line(cfg, extra)
    print(" ".join(["python", *cmd[1:]]), flush=True)
    if args.dry_run:
        return 0
    rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
    record = run_record(HERE / "run.py", argv)
    write_json(RESULTS / f"{args.name}.run.json", {"experiment": args.name, "module": cfg["module"],
                                                  "args": cfg.get("args", []) + extra, "exit": rc}, record)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
