"""An experiment's parameters, read from the TOML it is given, with every key accounted for.

A config's top-level strings (``question``, ``module``, ``results``) are the runner's; its tables
(``[model]``, ``[sweep]``, ``[output]``, ...) are the experiment's parameters. A script reads every
parameter before it measures anything and then calls ``ready()``: a key the TOML has but the script never
read is refused (a typo or a stale key would otherwise be silently ignored, and the TOML kept beside a
result would claim a setting that was not used), and ``--plan`` prints the resolved parameters there and
stops. A key the script reads and the TOML lacks is a KeyError naming it: a script has no defaults of its
own, so the TOML is the whole record of a run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
RUNNER_KEYS = ("question", "module", "results")


class Params:
    """A table of a config whose reads are recorded (sub-tables are Params too)."""

    def __init__(self, data: dict, where: str = ""):
        self._data, self._where, self._read, self._tables = data, where, set(), {}

    def __getitem__(self, key: str):
        if key not in self._data:
            raise KeyError(f"{self._where}{key}: missing from the experiment's TOML (a script has no defaults)")
        self._read.add(key)
        value = self._data[key]
        if isinstance(value, dict):
            return self._tables.setdefault(key, Params(value, f"{self._where}{key}."))
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def keys(self):
        return self._data.keys()

    def unread(self) -> list[str]:
        out = [f"{self._where}{k}" for k in self._data if k not in self._read]
        for table in self._tables.values():
            out += table.unread()
        return out

    def whole(self) -> dict:
        """The table as plain data, every key in it read (a table the script takes as one value)."""
        self._read = set(self._data)
        self._tables.clear()
        return self._data

    def resolved(self) -> dict:
        return self._data


def parameters(cfg: dict) -> dict:
    """The experiment's part of a config: its tables (the runner's strings left out)."""
    unknown = [k for k, v in cfg.items() if not isinstance(v, dict) and k not in RUNNER_KEYS]
    if unknown:
        raise ValueError(f"top-level keys {unknown}: a parameter belongs in a table ([section]); "
                         f"the top level holds only {', '.join(RUNNER_KEYS)}")
    return {k: v for k, v in cfg.items() if isinstance(v, dict)}


class Run:
    """One run's parameters: ``run["sweep"]["image"]`` ..., then ``run.ready()`` before measuring."""

    def __init__(self, name: str, path: Path, plan: bool):
        self.name, self.path, self.plan = name, path, plan
        self.params = Params(parameters(tomllib.loads(path.read_text())))

    def __getitem__(self, key: str):
        return self.params[key]

    def ready(self) -> None:
        unread = self.params.unread()
        if unread:
            raise SystemExit(f"{self.path}: keys the experiment does not use: {', '.join(unread)}")
        if self.plan:
            print(json.dumps(self.params.resolved(), indent=1))
            raise SystemExit(0)

    def command(self) -> str:
        """How to run it again: the runner with the TOML kept beside the result."""
        return f"python -m experiments.run {self.name} --config {self.path}"


def start(name: str, argv=None, parser: argparse.ArgumentParser | None = None) -> tuple[Run, argparse.Namespace]:
    """Parse ``--config`` (default experiments/NAME.toml) and ``--plan`` plus the script's own modes."""
    ap = parser or argparse.ArgumentParser(description=f"experiment {name}: its parameters are its TOML")
    ap.add_argument("--config", type=Path, default=HERE / f"{name}.toml", help="the TOML to run")
    ap.add_argument("--plan", action="store_true", help="print the resolved parameters and stop")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    return Run(name, args.config, args.plan), args


def dumps(cfg: dict) -> str:
    """TOML text of a config (strings, numbers, booleans, lists of them, nested tables)."""
    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"{v!r} has no TOML form here")

    lines, tables = [], []
    for k, v in cfg.items():
        (tables if isinstance(v, dict) else lines).append(k)
    out = [f"{k} = {value(cfg[k])}" for k in lines]

    def table(prefix: str, d: dict) -> None:
        simple = [k for k, v in d.items() if not isinstance(v, dict)]
        out.append(f"\n[{prefix}]")
        out.extend(f"{json.dumps(k) if not k.replace('_', '').replace('-', '').isalnum() else k} = {value(d[k])}"
                   for k in simple)
        for k, v in d.items():
            if isinstance(v, dict):
                table(f"{prefix}.{json.dumps(k) if not k.replace('_', '').replace('-', '').isalnum() else k}", v)

    for k in tables:
        table(k, cfg[k])
    return "\n".join(out) + "\n"


def override(cfg: dict, assignment: str) -> None:
    """``section.key=value`` (the value in TOML syntax, a bare word taken as a string) into cfg."""
    path, _, raw = assignment.partition("=")
    if not _ or "." not in path:
        raise ValueError(f"--set {assignment!r}: expected section.key=value")
    try:
        val = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        val = raw
    *tables, key = path.split(".")
    node = cfg
    for t in tables:
        if not isinstance(node.get(t), dict):
            raise ValueError(f"--set {path}: no table [{'.'.join(tables)}] in the config")
        node = node[t]
    if key not in node:
        raise ValueError(f"--set {path}: no such key in the config (a run takes only the keys its TOML has)")
    node[key] = val
