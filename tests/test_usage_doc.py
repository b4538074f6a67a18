"""docs/usage.md lists every command and option of the `tokenspace` parser, and nothing it lacks."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from tokenspace.cli import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def _commands(parser: argparse.ArgumentParser, name: str = ""):
    """(command name, its options: long flags or positional names) for every leaf command."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    opts = [(a.option_strings[-1] if a.option_strings else a.dest) for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    yield name, opts
    for sub in subs:
        for child, p in sub.choices.items():
            yield from _commands(p, f"{name} {child}".strip())


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]
    return {p.split("\n", 1)[0].strip(): p for p in parts}


def test_every_command_and_option_is_documented_with_an_example():
    sections = _sections()
    for command, options in _commands(build_parser()):
        if command == "index":  # a group: its actions have their own sections
            continue
        title = command or "Global options"
        assert title in sections, f"docs/usage.md has no section '## {title}'"
        text = sections[title]
        for opt in options:
            assert f"`{opt}" in text, f"'## {title}' does not document {opt}"
        if command:
            assert f"tokenspace {command}" in text and "```bash" in text, f"'## {title}' has no example"


def test_no_documented_option_is_missing_from_the_parser():
    sections = _sections()
    known = dict(_commands(build_parser()))
    for command, options in known.items():
        title = command or "Global options"
        if title not in sections:
            continue
        rows = re.findall(r"^\| `(-[-\w]+)", sections[title], flags=re.M)
        assert set(rows) <= set(options), f"'## {title}' documents options the parser lacks: {set(rows) - set(options)}"
