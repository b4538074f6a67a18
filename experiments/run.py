"""Run one experiment from its config file.

    python -m experiments.run --list                          # every experiment, its question and results
    python -m experiments.run prune_sweep                     # runs experiments/prune_sweep.toml
    python -m experiments.run prune_sweep --plan              # prints the resolved parameters only
    python -m experiments.run prune_sweep --set sweep.image=[0,100]   # one parameter changed for this run
    python -m experiments.run prune_sweep -- --report-only    # a mode of the script (not a parameter)

A config (experiments/<name>.toml) holds the question, the module that answers it, the result files it
wrote when last run, and, in its tables, every parameter the run takes (experiments/config.py: the
script reads them all from the TOML it is given and refuses a key it does not use). A run writes the
TOML it ran beside its JSON result (the ``[output] json`` path with .toml, else
benchmarks/results/<name>.toml) and, beside it too, the run record (date, commit, machine, command,
exit status) as .run.json.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

from benchmarks.common import RESULTS, ROOT, run_record, write_json
from experiments import config

HERE = Path(__file__).resolve().parent


def configs() -> dict[str, dict]:
    return {p.stem: tomllib.loads(p.read_text()) for p in sorted(HERE.glob("*.toml"))}


def kept_beside(name: str, cfg: dict) -> Path:
    """Where a run keeps the TOML it ran: beside its JSON result."""
    out = cfg.get("output", {}).get("json")
    return (ROOT / out).with_suffix(".toml") if out else RESULTS / f"{name}.toml"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", help="experiment (a file experiments/<name>.toml)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--config", type=Path, help="run this TOML instead of experiments/<name>.toml "
                                                 "(e.g. one a run kept beside its result)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="change one parameter for this run (a key the TOML has; TOML syntax)")
    ap.add_argument("--plan", "--dry-run", dest="plan", action="store_true",
                    help="print the resolved parameters (every key checked against the script) and stop")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    known = configs()
    if args.list or not args.name:
        for name, cfg in known.items():
            print(f"{name:22s} {cfg['question']}\n{'':22s} results: {', '.join(cfg.get('results', [])) or '-'}")
        return 0
    if args.name not in known:
        ap.error(f"no experiments/{args.name}.toml; choose from {', '.join(known)}")
    cfg = tomllib.loads(args.config.read_text()) if args.config else copy.deepcopy(known[args.name])
    for assignment in args.set:
        try:
            config.override(cfg, assignment)
        except ValueError as e:
            ap.error(str(e))
    with tempfile.TemporaryDirectory(prefix=f"{args.name}-") as tmp:
        ran = Path(tmp) / f"{args.name}.toml"
        ran.write_text(config.dumps(cfg))
        cmd = [sys.executable, "-m", cfg["module"], "--config", str(ran), *extra]
        if args.plan:  # in this process: the script reads and checks its parameters, then stops
            module = importlib.import_module(cfg["module"])
            try:
                module.main(["--config", str(ran), "--plan", *extra])
            except SystemExit as e:
                return e.code if isinstance(e.code, int) else (print(e.code, file=sys.stderr) or 2)
            return 0
        print(" ".join(["python", "-m", cfg["module"], "--config", str(kept_beside(args.name, cfg)), *extra]),
              flush=True)
        rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
        if rc == 0:
            kept = kept_beside(args.name, cfg)
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(f"# the parameters of the run recorded in {args.name}.run.json\n" + ran.read_text())
    record = run_record(HERE / "run.py", argv)
    write_json(kept_beside(args.name, cfg).with_suffix(".run.json"), {"experiment": args.name, "module": cfg["module"],
                                                  "parameters": config.parameters(cfg), "exit": rc}, record)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
