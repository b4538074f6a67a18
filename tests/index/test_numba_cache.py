"""numba's cache falls back to a writable place, or to none, with one note, instead of failing: a process
whose NUMBA_CACHE_DIR and HOME cannot be written (paths under a file: not writable even for root) and
whose numba may not write beside tokenspace (its locators limited to those two places) imports the
index package (where the failure was) and compiles a kernel (one small one: compiling all of them
fresh takes minutes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SEARCH = """
import numpy as np
from tokenspace.index import InvertedIndex, kernels
ok = kernels.check_rows(np.array([0, 2, 3]), np.array([1, 3, 2], np.int32), np.array([1, .5, .7], np.float32))
bad = kernels.check_rows(np.array([0, 2]), np.array([3, 1], np.int32), np.array([1, .5], np.float32))
print("rows", ok, bad)
"""


def _run(tmp_path: Path, code: str, **env) -> subprocess.CompletedProcess:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    base.update(HOME=str(blocker / "home"), NUMBA_CACHE_DIR=str(blocker / "numba"),
                # numba's other place, the __pycache__ beside tokenspace, is writable in a checkout
                NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator,UserWideCacheLocator")
    base.update(env)
    return subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=600)


def test_an_unwritable_cache_falls_back_to_the_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = _run(tmp_path, SEARCH, TMPDIR=str(tmp))
    assert r.returncode == 0 and "rows -1 0" in r.stdout, r.stderr
    assert "no locator" not in r.stderr and "Traceback" not in r.stderr
    notes = [line for line in r.stderr.splitlines() if "numba cannot cache" in line]
    assert len(notes) == 1 and "NUMBA_CACHE_DIR" in notes[0], r.stderr
    cached = tmp / f"tokenspace-numba-{os.getuid()}"
    assert any(cached.rglob("*.nbi")), "the kernels were not cached in the fallback folder"


def test_no_writable_place_at_all_means_no_cache(tmp_path):
    code = "import tempfile\ndef nowhere(): raise FileNotFoundError('no usable temporary directory')\n" \
           "tempfile.gettempdir = nowhere\n" + SEARCH
    r = _run(tmp_path, code)
    assert r.returncode == 0 and "rows -1 0" in r.stdout, r.stderr
    assert "no locator" not in r.stderr and "compiling them in each process" in r.stderr


def test_a_writable_place_is_used_as_numba_would(tmp_path):
    cache = tmp_path / "numba-cache"
    r = _run(tmp_path, SEARCH, NUMBA_CACHE_DIR=str(cache))
    assert r.returncode == 0 and "numba cannot cache" not in r.stderr, r.stderr
    assert any(cache.rglob("*.nbi"))
