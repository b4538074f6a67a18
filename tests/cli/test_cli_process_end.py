"""The command as its own process: a read-only command ends without the interpreter's teardown
(cli/__init__.py: _end_of_process), and loses nothing doing so: every line reaches a pipe or a file,
buffered or not, and the exit code is the command's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _command() -> list[str]:
    script = Path(sys.executable).with_name("tokenspace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tokenspace"]


def test_a_search_process_keeps_its_output_and_exit_code(world, tmp_path):
    env = dict(os.environ, TOKENSPACE_HOME=str(world.home))
    env.pop("PYTHONUNBUFFERED", None)  # a pipe: Python buffers stdout, so a lost flush would show here
    args = [*_command(), "search", "--index", str(world.index), "a red dog", "a blue cat", "-k", "3"]
    piped = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.count("query: ") == 2 and piped.stdout.rstrip().splitlines()[-1].lstrip().startswith(
        ("3.", "matched")), piped.stdout
    out = tmp_path / "hits.txt"
    with open(out, "w") as f:
        to_file = subprocess.run(args, stdout=f, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert to_file.returncode == 0 and out.read_text() == piped.stdout
    bad = subprocess.run([*_command(), "search", "--index", str(tmp_path / "nowhere"), "q"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert bad.returncode == 1 and "no index at" in bad.stderr
