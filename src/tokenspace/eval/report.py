"""Markdown result tables and ResultsDoc, which owns named sections of docs/results.md.

Tables: rows = systems, columns = metrics, one number format per metric (rates as percentages with one
decimal, Clarity with three, counts with one), so every table in the doc reads the same way.

ResultsDoc: each command regenerates only its own section, between ``<!-- begin:NAME -->`` and
``<!-- end:NAME -->``, and the section states the command that produced it. Updates hold a file lock
and write atomically, so two commands finishing at once cannot lose each other's section.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenspace.atomic import write_text
from tokenspace.eval.plots import line_plot, modality_plot, save_heatmaps, scatter_plot  # noqa: F401 (re-export)


def metric_format(name: str) -> tuple[str, bool]:
    """(format spec, shown as %) for a metric name."""
    if name in ("clarity", "modality_mean"):  # cosines / ratios the papers print with 3 decimals
        return ".3f", False
    if "recall" in name or re.search(r"acc\d", name) or "_frac" in name:  # rates in [0, 1]
        return ".1f", True
    if name.startswith("flops"):
        return ".3g", False
    if re.search(r"nnz|l0|features|dims", name):
        return ".1f", False
    return ".4g", False


def format_value(name: str, value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    v = float(value)
    if math.isnan(v):
        return "n/a"
    spec, pct = metric_format(name)
    return format(v * 100 if pct else v, spec)


def _header(name: str) -> str:
    return f"{name} (%)" if metric_format(name)[1] else name


def markdown_table(results: Mapping[str, Mapping[str, float]], columns: Sequence[str] | None = None,
                   first_column: str = "system", headers: Mapping[str, str] | None = None) -> str:
    """Rows = systems (dict order), columns = metrics (given order, else first-seen order)."""
    if columns is None:
        columns = list(dict.fromkeys(k for row in results.values() for k in row))
    headers = headers or {}
    lines = ["| " + " | ".join([first_column] + [headers.get(c, _header(c)) for c in columns]) + " |",
             "|" + "---|" + "---:|" * len(columns)]
    for system, row in results.items():
        cells = [format_value(c, row.get(c)) for c in columns]
        lines.append("| " + " | ".join([str(system).replace("|", "\\|")] + cells) + " |")
    return "\n".join(lines) + "\n"


def _markers(name: str) -> tuple[str, str]:
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", name):
        raise ValueError(f"section name {name!r} must be [A-Za-z0-9_.:-]+ (it goes into an HTML comment)")
    return f"<!-- begin:{name} -->", f"<!-- end:{name} -->"


class ResultsDoc:
    """A markdown file made of independently regenerated sections.

    >>> doc = ResultsDoc("docs/results.md")
    >>> doc.update("retrieval", markdown_table(rows), command="tokenspace eval retrieval --recipe stair-tiny")
    """

    def __init__(self, path, title: str = "Results"):
        self.path = Path(path)
        self.title = title

    def read(self) -> str:
        return self.path.read_text(encoding="utf-8") if self.path.exists() else f"# {self.title}\n"

    def section(self, name: str) -> str | None:
        """Current body of a section (between its markers), or None."""
        begin, end = _markers(name)
        m = re.search(re.escape(begin) + r"\n?(.*?)" + re.escape(end), self.read(), flags=re.DOTALL)
        return m.group(1) if m else None

    def sections(self) -> list[str]:
        return re.findall(r"<!-- begin:([A-Za-z0-9_.:-]+) -->", self.read())

    def relpath(self, target) -> str:
        """Path of ``target`` (e.g. a PNG) relative to the doc, for markdown links."""
        return os.path.relpath(Path(target).resolve(), self.path.parent.resolve()).replace(os.sep, "/")

    def render(self, body: str, command: str, heading: str | None = None) -> str:
        when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        parts = [f"## {heading}\n"] if heading else []
        parts.append(f"_Produced by `{command}` ({when})._\n")
        parts.append(body.rstrip("\n") + "\n")
        return "\n".join(parts)

    def update(self, name: str, body: str, command: str, heading: str | None = None) -> None:
        """Replace (or append) section ``name`` with ``body``; ``command`` is recorded above it."""
        if not command:
            raise ValueError("every section must record the command that produced it")
        begin, end = _markers(name)
        block = f"{begin}\n{self.render(body, command, heading)}{end}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _Lock(self.path.with_name(self.path.name + ".lock")):
            text = self.read()
            pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), flags=re.DOTALL)
            if pattern.search(text):
                text = pattern.sub(lambda _: block, text, count=1)
            else:
                text = text.rstrip("\n") + "\n\n" + block + "\n"
            write_text(self.path, text)


class _Lock:
    """Exclusive advisory lock on a side file (POSIX fcntl), released on exit."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self._f = open(self.path, "a")
        fcntl.flock(self._f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._f, fcntl.LOCK_UN)
        self._f.close()
