"""Atomic file writes: write beside the target, fsync, then rename over it, so a reader (or a run killed
half-way) sees the old file or the new one, never half of one. The one place that does this: index
segments, manifests, caches, checkpoints and reports all write through here; model folders, exports and
checkpoints are replaced through ``replace_folder``."""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import IO, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in the target's folder for any writer (np.save, torch.save, a library's own
    save): on success it replaces ``path``; on any error it is removed and ``path`` is left as it was.
    The temporary name keeps the target's suffix, so writers that append one (np.save) do not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_temp(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # the writer may not have synced: the rename must not outrun the data
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create_temp(path: Path) -> Path:
    """Create an empty, new temporary file beside ``path`` and return its name.

    Not tempfile.mkstemp: it creates mode 0600, and the rename would hand that mode to the target, so
    every atomically written file (an index's MANIFEST.json, vocab.txt, exports) would be private to
    its owner. Creating with 0o666 lets the kernel apply the umask (and a folder's default ACL) exactly
    as a plain ``open(path, "w")`` would. That also means never reading the umask: the only portable
    way to read it, os.umask(0) then os.umask(old), changes it for the whole process for a moment, so
    a file another thread creates in between would get mode 0666."""
    for _ in range(100):
        # the pattern .<stem>.<random>.tmp<suffix> is what index.storage cleans up after a killed write
        tmp = path.parent / f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:  # 32 random bits: a clash means another writer, so draw again
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"no free temporary name beside {path}")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator[IO]:
    """``open(path, mode)`` that lands all at once when the block ends without an error."""
    if not mode.startswith("w"):
        raise ValueError(f"atomic_open writes a whole file: mode must start with 'w', not {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def new_file_mode(folder: str | os.PathLike) -> int:
    """The permission bits a new file in ``folder`` gets (0o666 less the umask), found by creating one:
    for files a library writes with its own mode (safetensors writes 0600), without reading the umask."""
    probe = _create_temp(Path(folder) / "mode-probe")
    try:
        return probe.stat().st_mode & 0o777
    finally:
        probe.unlink(missing_ok=True)


def temp_folder(path: str | os.PathLike) -> Path:
    """A new empty folder beside ``path`` to build a folder in before renaming it into place. Not
    tempfile.mkdtemp, whose 0700 would make the renamed folder private: os.mkdir applies the umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = path.parent / f".tmp-{path.name}.{secrets.token_hex(4)}"
        try:
            os.mkdir(tmp)
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary folder name beside {path}")


def replace_folder(tmp: str | os.PathLike, dest: str | os.PathLike, aside: str | os.PathLike | None = None) -> Path:
    """Move the finished folder ``tmp`` to ``dest``, replacing what is there. The old ``dest`` is moved
    aside first, not deleted: if the rename into place fails, it comes back; a crash between the two
    renames leaves it at ``aside`` (a free ``.tmp-`` name beside ``dest`` unless given: the trainer names
    its ``checkpoint.old`` to resume from it), never a half-written ``dest``."""
    tmp, dest = Path(tmp), Path(dest)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)  # a previous crash's copy: ``tmp`` is complete and newer
    if dest.exists():
        if aside is None:
            aside = temp_folder(dest)
            os.rmdir(aside)  # only its free name is wanted
        dest.rename(aside)
        try:
            tmp.rename(dest)
        except BaseException:
            Path(aside).rename(dest)
            raise
        shutil.rmtree(aside, ignore_errors=True)
    else:
        tmp.rename(dest)
    return dest


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A private temporary folder ``<tmp>/<prefix><pid>-<random>``, removed on every way out (an error
    and Ctrl-C too). Only a kill (SIGKILL, OOM) leaves one behind: each call first removes the folders
    of ``prefix`` whose process is gone (and, from before the pid was in the name, those over an hour old)."""
    _sweep_scratch(prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sweep_scratch(prefix: str) -> None:
    for p in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        # ours only: <prefix><pid>-<random>, or tempfile's <prefix><8 random> of older tokenspace versions
        # (not, say, <prefix>bench-<random>, another tool's)
        name = re.fullmatch(r"(\d+)-[a-z0-9_]+|[a-z0-9_]{8}", p.name[len(prefix):])
        try:
            if name is None or not p.is_dir() or p.stat().st_uid != os.getuid():
                continue
            if name[1] is not None and _alive(int(name[1])):
                continue
            if name[1] is None and time.time() - p.stat().st_mtime < 3600:
                continue  # an older tokenspace's name, without the pid: it may still be running
        except OSError:  # gone meanwhile
            continue
        shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True
