"""The `tokenspace` command: a thin layer over the library (each subcommand is a few library calls).

    tokenspace assets install|status         offline weights and data into the cache
    tokenspace data build                    manifests of the offline datasets
    tokenspace train --recipe R --out DIR    train a model (resumable with --resume)
    tokenspace sparsify --dense M --data S.. a sparse head on a frozen dense model (recipe sparsify-dense)
    tokenspace eval --model DIR --data S..   retrieval metrics
    tokenspace shards --images DIR --out D   webdataset shards from a folder of images (or a JSONL manifest)
    tokenspace encode --shards S.. --index I webdataset shards into an index, in resumable parts
    tokenspace index build|stats|export      an inverted index of a collection
    tokenspace search --index DIR "query"    search, with each hit explained token by token
    tokenspace decode --model DIR ...        top tokens of an image or a text
    tokenspace demo                          the main job: train, index, search, report
    tokenspace serve --model M --index I     the HTTP API and web page
    tokenspace export-st MODEL OUT           the text (query) side as a sentence-transformers SparseEncoder
    tokenspace export-onnx MODEL OUT         the image and text encoders as ONNX files

Each command is two modules of this package: tokenspace/cli/<module>.py defines its arguments
(``add_arguments(parser)``; it imports argparse and cli.common only) and tokenspace/cli/run/<module>.py
runs it (``run(args) -> exit code``, importing its library modules at the top). The parser lists every
command by name and help from COMMANDS and imports only the chosen command's arguments module, by name
(as git and transformers do); main() imports the run module, by name, once the arguments parsed. So every
--help answers without torch, numba or fastapi (~0.2 s instead of 2-3 s: benchmarks/cli_startup.py),
and `tokenspace train` loads no web app.
"""
from __future__ import annotations

import argparse
import atexit
import difflib
import gc
import importlib
import logging
import os
import sys
import threading
from collections.abc import Iterable
from types import ModuleType

from tokenspace import __version__
from tokenspace.cli.common import CLIError, UsageError, one_line

__all__ = ["COMMANDS", "CLIError", "build_parser", "command_module", "main", "run_module", "setup_logging"]

log = logging.getLogger("tokenspace")

# command -> (module of this package, one-line help shown by `tokenspace --help`), in --help's order
COMMANDS: dict[str, tuple[str, str]] = {
    "assets": ("assets", "install or check the offline weights and datasets"),
    "data": ("data", "build the dataset manifests"),
    "train": ("train", "train a model from a recipe"),
    "sparsify": ("sparsify", "a sparse, interpretable head on a frozen dense model"),
    "eval": ("eval", "retrieval metrics of a model on data specs"),
    "shards": ("shards", "webdataset shards from a folder of images or a JSONL manifest (for encode)"),
    "encode": ("encode", "encode webdataset shards into an index, in resumable parts"),
    "index": ("index", "build, inspect or export an inverted index"),
    "search": ("search", "search an index by text (or image), explaining every hit"),
    "decode": ("decode", "top tokens of images or texts"),
    "demo": ("demo", "train STAIR and the dense baseline, index, search, report"),
    "serve": ("serve", "HTTP API and web page"),
    "export-st": ("export_st", "a model's text (query) side as a sentence-transformers SparseEncoder folder"),
    "export-onnx": ("export_onnx", "the image and text encoders as ONNX files, checked against PyTorch"),
}


def command_module(name: str) -> ModuleType:
    """The module that defines command ``name``'s arguments (light: no library imported)."""
    return importlib.import_module(f"{__name__}.{COMMANDS[name][0]}")


def run_module(name: str) -> ModuleType:
    """The module that runs command ``name`` (imported now, with its library modules)."""
    return importlib.import_module(f"{__name__}.run.{COMMANDS[name][0]}")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The `tokenspace` parser. ``commands=None``: every command with all its options (tests, docs/usage.md;
    imports every command module). Given names: only those commands get their options, the others are
    listed by name and help, so building it imports no other command's libraries."""
    full = set(COMMANDS) if commands is None else set(commands)
    p = argparse.ArgumentParser(prog="tokenspace", description=__doc__.split("\n")[0],
                                epilog="exit codes: 0 ok (also when the reader of a pipe stops early: | head), 1 runtime error "
                                       "(one line on stderr), 2 usage error")
    p.add_argument("--version", action="version", version=f"tokenspace {__version__}")
    p.add_argument("--home", default=None, help="asset cache (default $TOKENSPACE_HOME or ~/.cache/tokenspace)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="messages on stderr (default info; debug also prints the traceback of an error)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if name in full:
            command_module(name).add_arguments(sub.add_parser(name, help=help_text))
        else:  # a placeholder: its arguments (--help included) are left for the second pass of main()
            sub.add_parser(name, help=help_text, add_help=False)
    return p


def setup_logging(level: str = "info") -> None:
    """The CLI's handler: library modules log through logging.getLogger(__name__) under "tokenspace"."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[tokenspace] %(message)s"))
    root = logging.getLogger("tokenspace")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def main(argv: list[str] | None = None) -> int:
    """The command. ``argv=None`` (the console script, ``python -m tokenspace``): a process that ends
    with this call, so it ends without the interpreter's slow teardown (see ``_end_of_process``)."""
    as_process = argv is None
    code = None
    try:
        try:
            code = _main(sys.argv[1:] if argv is None else list(argv))
            sys.stdout.flush()  # output still buffered meets a closed pipe here, not in the interpreter's exit
        except BrokenPipeError:
            code = _reader_gone()
        return code
    finally:
        if as_process:
            _end_of_process(code)


def _reader_gone() -> int:
    """The reader of stdout closed it (`tokenspace search ... | head -1`): stop quietly, exit 0. Not 141
    (a death by SIGPIPE, as `cat` shows): whether our last write came before or after `head` left is a
    race, so a status that depended on it would fail `set -o pipefail` scripts now and then; the reader
    got what it asked for. stdout is pointed at /dev/null so that the interpreter's last flush of what
    is still buffered cannot print "Exception ignored ... BrokenPipeError" on stderr."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream without a file descriptor (in-process use)
        pass
    return 0


def _chosen(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)command parser argv chose (`index build`'s) and every long flag on the way to it."""
    path = [parser]  # top-level first
    while True:
        subs = [a for a in path[-1]._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = next((subs[0].choices[w] for w in argv if subs and w in subs[0].choices), None)
        if chosen is None:
            break
        path.append(chosen)
    return path[-1], [f for p in path for a in p._actions for f in a.option_strings if f.startswith("--")]


def _check_command(argv: list[str]) -> None:
    """A mistyped command (`tokenspace serach`) named with the nearest one; exit 2. argparse alone lists
    all fourteen."""
    words = iter(argv)
    for w in words:
        if w in ("--home", "--log-level"):  # the global options that take a value
            next(words, None)
        elif not w.startswith("-"):
            near = difflib.get_close_matches(w, COMMANDS, n=1, cutoff=0.6) if w not in COMMANDS else []
            if near:
                build_parser(commands=()).error(f"unknown command {w!r} (did you mean {near[0]}?)")
            return


def _check_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A long flag the command does not have is reported before argparse parses: argparse would first
    complain of the required option it hides (`--modle X`: "--model is required"), with no suggestion."""
    sub, flags = _chosen(parser, argv)
    words = argv[:argv.index("--")] if "--" in argv else argv
    unknown = []
    for w in words:
        name = w.split("=", 1)[0]
        if w.startswith("--") and name not in flags and not any(f.startswith(name) for f in flags):
            unknown.append(w)  # not a flag, nor the abbreviation argparse would accept
    if unknown:
        _unrecognized(parser, argv, unknown)


def _unrecognized(parser: argparse.ArgumentParser, argv: list[str], extra: list[str]) -> None:
    """Arguments the command does not take: the usage of the (sub)command given, each mistyped flag with
    the nearest flag it has (``--prior-wieght`` -> did you mean --prior-weight?); exit 2."""
    sub, flags = _chosen(parser, argv)
    shown = []
    for arg in extra:
        near = difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.6) if arg.startswith("-") else []
        shown.append(f"{arg} (did you mean {near[0]}?)" if near else arg)
    sub.error(f"unrecognized arguments: {' '.join(shown)}")


# commands that write no file: their process may end without the interpreter's module teardown
READ_ONLY = frozenset({"search", "decode"})
_command: str | None = None  # the command _main ran (for _end_of_process)


def _end_of_process(code: int | None) -> None:
    """Shorten the end of a process that has done its work. Its last garbage collections walk the
    millions of objects torch and numba created, only to free memory the process is about to give back
    (0.3-0.4 s of a 2 s `search`; ``gc.freeze`` moves them out of reach, shutdown otherwise unchanged).
    A read-only command that returned goes further: its exit code is kept for ``_exit_after_handlers``,
    which ends the process after every other atexit handler (logging's flush, multiprocessing's and the
    finalizers' clean-up), skipping the module teardown (another 0.1 s). A command that writes files
    never does: an object left unclosed would lose what it buffered."""
    global _fast_exit_code
    gc.freeze()
    if _command in READ_ONLY and isinstance(code, int):
        _fast_exit_code = code


_fast_exit_code: int | None = None  # set by _end_of_process: the code a read-only command's process exits with


def _exit_after_handlers() -> None:
    # registered when this module is imported, before torch, numba or tqdm register theirs: atexit runs
    # handlers last-registered first, so this one runs after all of them, where the interpreter would
    # begin the module teardown
    if _fast_exit_code is None or threading.active_count() > 1:
        return
    try:
        logging.shutdown()  # registered before this module: it would run after this handler
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - e.g. a closed pipe: the ordinary shutdown reports it as always
        return
    os._exit(_fast_exit_code)


atexit.register(_exit_after_handlers)


def _main(argv: list[str]) -> int:
    # pass 1, no command module imported: the global options and the command's name. `tokenspace --help`,
    # --version and usage errors before the command (none given, an unknown one) end here.
    global _command
    _check_command(argv)
    cmd = _command = build_parser(commands=()).parse_known_args(argv)[0].cmd
    parser = build_parser(commands=[cmd])  # the command's arguments module: light
    _check_flags(parser, argv)
    args, extra = parser.parse_known_args(argv)  # usage errors and --help end here, before any library loads
    if extra:
        _unrecognized(parser, argv, extra)
    setup_logging(args.log_level)
    try:
        run = run_module(cmd).run  # the command's libraries (torch, numba, ...): a broken install is one line
        return run(args)
    except UsageError as e:
        parser.exit(2, f"tokenspace {cmd}: error: {e}\n")
    except BrokenPipeError:  # the reader left: main() stops quietly
        raise
    except KeyboardInterrupt:
        print(f"tokenspace {cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a user never sees a traceback; --log-level debug shows it
        log.debug("traceback of the error below", exc_info=True)
        print(f"tokenspace {cmd}: error: {one_line(e)}", file=sys.stderr)
        return 1
