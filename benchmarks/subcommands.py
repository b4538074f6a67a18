"""One command for a family of benchmarks: ``python -m benchmarks.<family> SUBCOMMAND [its options]``.

Each subcommand's code stays in its own module (its ``cli(argv)``, its options and docstring), so a
family is one entry point without one file holding every job; ``SUBCOMMAND --help`` prints its options."""
from __future__ import annotations

import importlib
import sys


def dispatch(family: str, doc: str, subcommands: dict[str, str], argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in subcommands:
        width = max(map(len, subcommands))
        lines = [f"  {name:{width}s}  {_summary(module)}" for name, module in subcommands.items()]
        print(f"usage: python -m benchmarks.{family} {{{','.join(subcommands)}}} [options]\n\n{doc}\n\n"
              + "\n".join(lines), file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown subcommand {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(f"benchmarks.{subcommands[argv[0]]}")
    sys.argv = [f"python -m benchmarks.{family} {argv[0]}", *argv[1:]]  # argparse's usage line names the subcommand
    return module.cli(argv[1:]) or 0


def _summary(module: str) -> str:
    """The module's first docstring line, read without importing it (a family's help stays instant)."""
    import ast
    from pathlib import Path

    path = Path(__file__).resolve().parent / f"{module}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return f"{doc.splitlines()[0] if doc else ''} (benchmarks/{module}.py)"
