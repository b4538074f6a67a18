"""The README's commands and code, and the tour's (docs/guide.md, "Using it", where the README's former
walk-through lives), run as written on the tiny world of _cli_world.py: each Python block verbatim (in a
folder holding the files it names, with the tiny model where it loads a model), printing no warning, and
each shell block line by line (in this process, `serve` as a real server) with only the data swapped for
tiny data (the release model, dataset specs, the recipe, the shard pattern, the photo folder; `serve` gets
a free port and is stopped once it answers). `assets install` is the one line not run: it installs the
real offline assets (GBs); tests/test_assets.py covers it. An edit that breaks any line fails here."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _cli_world import Ran, run_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"


def _blocks(lang: str, doc: Path = GUIDE, section: str = "Using it") -> list[str]:
    text = doc.read_text()
    part = text.split(f"\n## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", part, flags=re.S)


def _run(argv: list[str], cwd: Path, home: Path, timeout: float = 600) -> Ran:
    env = dict(os.environ, TOKENSPACE_HOME=str(home), PYTHONUNBUFFERED="1")
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    return Ran(p.returncode, p.stdout, p.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_folders(code: str) -> list[str]:
    """Model folders the block loads by path (release names load from models/ as they are)."""
    return [m for m in re.findall(r"load\(\"([^\"]+)\"\)", code) if "/" in m]


@pytest.mark.parametrize("where", [(GUIDE, "Using it"), (README, "From Python")], ids=["guide", "readme"])
def test_the_python_block_runs_verbatim(world, tmp_path, where):
    (code,) = _blocks("python", *where)
    for folder in _model_folders(code):
        shutil.copytree(world.model, tmp_path / folder)
    for name in re.findall(r"\"([\w-]+\.png)\"", code):
        shutil.copy(world.images[len(name) % len(world.images)], tmp_path / name)
    # the block's own names, checked after it ran: one Hits per query, decode per row;
    # a query's hits may be empty: the test's images are coloured squares, which the
    # release model need not tag with any token of "a sleeping cat" (a sparse search finds no overlap)
    check = ("\nfrom tokenspace.index import Hits"
             "\nassert isinstance(hits, list) and len(hits) == 1 and isinstance(hits[0], Hits), hits"
             "\nprint('ok', len(imgs), index.size if hasattr(index, 'size') else len(index))\n")
    r = _run([sys.executable, "-W", "default", "-c", code + check], tmp_path, world.home)
    assert r.code == 0 and r.out.startswith("ok 2"), r.err
    assert "Warning" not in r.err, r.err  # a reader's first lines print nothing but what they ask for


def _tiny(line: str, world) -> str:
    """The README's data swapped for the tiny world's; everything else as written."""
    swaps = {
        "--recipe stair-emoji": f"--recipe {world.recipe}",
        "openclipart:test:300": f"{world.manifest}:train:3",
        "emoji:test": f"{world.manifest}:test",
        "'shards/{000..099}.tar'": str(world.shards),
        "~/Pictures": str(world.root / "img"),  # `shards` writes shards/ from them; `encode` reads shards/*.tar
    }
    for a, b in swaps.items():
        line = line.replace(a, b)
    return line


def test_the_shell_block_runs_line_by_line_on_tiny_data(world, tmp_path, monkeypatch):
    (block,) = _blocks("bash")
    lines = [ln.split("  #")[0].strip() for ln in block.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    assert lines and all(ln.startswith("tokenspace ") for ln in lines), lines
    script = Path(sys.executable).with_name("tokenspace")
    ran = []
    for line in lines:
        argv = shlex.split(_tiny(line, world))
        if argv[1:3] == ["assets", "install"]:
            continue
        argv[0] = str(script)
        if argv[1] == "serve":
            _serve(argv + ["--port", str(_free_port())], tmp_path, world.home)
        else:  # in this process, as tests/cli/_cli_world.py runs commands; the relative paths from tmp_path
            monkeypatch.chdir(tmp_path)
            r = run_cli(*argv[1:], home=world.home)
            assert r.code == 0, f"{line}\n{r.err}"
        ran.append(argv[1])
    # the walk-through ends with a running page over an index it built itself
    assert {"train", "eval", "index", "search", "decode", "shards", "encode", "serve"} <= set(ran), ran


def _serve(argv: list[str], cwd: Path, home: Path) -> None:
    port = argv[-1]
    env = dict(os.environ, TOKENSPACE_HOME=str(home))
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as resp:
                    body = json.loads(resp.read())
                break
            except OSError:
                time.sleep(0.5)
        assert body is not None and body["size"] > 0, proc.stderr.read() if proc.poll() is not None else "timeout"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err


def test_the_readme_s_own_photos_block_runs_on_a_tiny_folder(world, tmp_path, monkeypatch):
    (block,) = _blocks("bash", README, "Search your own photos")
    lines = [ln.split("  #")[0].strip() for ln in block.splitlines() if ln.strip()]
    assert len(lines) == 3 and all(ln.startswith("tokenspace ") for ln in lines), lines
    script = Path(sys.executable).with_name("tokenspace")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        argv = shlex.split(line.replace("tokenspace-stair-drawings", str(world.model))
                           .replace("~/Pictures", str(world.root / "img")))
        if argv[1] == "serve":
            _serve([str(script), *argv[1:], "--port", str(_free_port())], tmp_path, world.home)
        else:
            r = run_cli(*argv[1:], home=world.home)
            assert r.code == 0, f"{line}\n{r.err}"
            if argv[1] == "search":
                assert r.out.lstrip().startswith("1. "), r.out
