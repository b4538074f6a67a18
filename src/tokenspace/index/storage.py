"""On-disk format of the inverted index: immutable segment folders, tombstone files, a manifest.

Layout of an index folder (format version 8: chunked uint16 posting doc ids and impact heads, see segment.py; the
manifest's schema is manifest.py)::

    MANIFEST.json            the commit point: lists the live files with their size and crc32
    vocab-000007.txt         optional, one token per line (names the dims; needed for where= strings),
                             written at generation 7 (before version 8: vocab.txt)
    seg-000001/<array>.npy   one .npy per segment array (see segment.ARRAYS), never rewritten
    seg-000001/metadata.jsonl  optional: one JSON object (the row's fields) a line (metadata.py)
    seg-000001.del-000007.npy  uint8[n] tombstones of segment 1, written at generation 7

Commit protocol (a crash at any point leaves the previous or the new index, never a mix):
new segment folders are written under a temporary name, every file fsync'ed, then renamed; tombstone,
prior, hub bank and vocabulary files get a fresh name per generation (no file the old manifest names is
ever replaced, whatever index the folder held: ``numbers_in_use`` picks names above every one there);
finally MANIFEST.json is written to a temporary file, fsync'ed
and atomically renamed over the old one, and the folder fsync'ed. Files the manifest does not name
(older tombstones, half-written temporaries) are removed after the commit and ignored on load.

Integrity: the manifest carries its own crc32 and, for every file, its byte size and crc32. Load
checks every size (cheap; catches truncation) and, unless ``verify=False``, every crc32, which reads
each file once (about 0.5-1 GB/s with zlib, i.e. a few seconds for a 1M-document index; the read
also warms the page cache). Any mismatch raises IndexCorruptError: a damaged index is never searched.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tokenspace import atomic

FORMAT = "tokenspace-inverted"
# 3: the document count n and per-segment row metadata (manifest.py); 4: the impact heads (segment.HEADS;
# an older segment gets them computed at load); 5: the optional hub prior (a query bank and each segment's
# per-document prior, manifest.HubPrior); 6: the optional collection info (the model that encoded the rows
# and the default ranking, manifest.Manifest.info); 7: approx_mass; 8: the vocabulary file named per
# generation (vocab-NNNNNN.txt: a save over another index never replaces the vocab.txt its manifest names
# before the commit); 9: a segment may leave out its residual lists (segment.RESIDUAL; built with
# residual_lists=False, derived from the forward store when exact search first needs them); 10: impact
# bands taken out of the main lists instead of nested heads beside them (segment.BANDS; an older segment
# is split at load); 2 to 9 are still read
VERSION = 10
READABLE = (2, 3, 4, 5, 6, 7, 8, 9, 10)
VOCAB = "vocab.txt"  # the vocabulary file of versions 2 to 7 (an in-place save of one keeps it)
VOCAB_FILE = re.compile(r"vocab(-[0-9]{6})?\.txt")
# what changed in each version, for the error that asks to rebuild an older index
_OLDER = {1: "int32 posting doc ids and forward term ids, before the compressed postings of version 2"}
MANIFEST = "MANIFEST.json"
_CRC_CHUNK = 1 << 24
_MAX_HEADER = 1 << 16  # an .npy header is a few hundred bytes


class IndexCorruptError(ValueError):
    """An index file is missing, truncated, altered, or of an unknown format version."""


# ----------------------------------------------------------------------------- checksums
def file_crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)  # releases the GIL: files are checked in parallel
    return crc


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_array(path: Path, array: np.ndarray) -> dict:
    """Write one .npy, fsync it, return its manifest entry {bytes, crc32}. The crc32 is of the header read
    back and the array's own bytes (the file is the header then those bytes): reading the whole file
    back was ~20 ms of saving a 100K-document index."""
    array = np.ascontiguousarray(array)
    with open(path, "wb") as f:  # a plain writer: numpy writes the array from memory (tofile), no copy
        np.lib.format.write_array(f, array, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    head = size - array.nbytes
    if not 0 < head <= _MAX_HEADER:  # not laid out as expected: the file's own bytes
        return {"bytes": size, "crc32": file_crc32(path)}
    with open(path, "rb") as f:
        header = f.read(head)
    return {"bytes": size, "crc32": zlib.crc32(array.reshape(-1).view(np.uint8), zlib.crc32(header))}


def write_segment(root: Path, name: str, arrays: dict[str, np.ndarray], texts: dict[str, str] | None = None) -> dict:
    """Write a segment folder atomically (temp folder + rename): one .npy per array and one UTF-8 file
    per text (file name -> content); returns the file entries by relative path within the folder."""
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    files = {}
    for key, arr in arrays.items():
        files[f"{key}.npy"] = write_array(tmp / f"{key}.npy", arr)
    for fname, text in (texts or {}).items():
        with open(tmp / fname, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        files[fname] = {"bytes": (tmp / fname).stat().st_size, "crc32": file_crc32(tmp / fname)}
    _fsync_dir(tmp)
    final = root / name
    if final.exists():  # a leftover of a crashed commit the manifest never named
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    return files


def write_text(path: Path, text: str) -> dict:
    atomic.write_text(path, text)
    return {"bytes": path.stat().st_size, "crc32": file_crc32(path)}


def vocab_file(generation: int) -> str:
    """The name of the vocabulary file written at ``generation``."""
    return f"vocab-{generation:06d}.txt"


_SEG_NUMBER = re.compile(r"(?:\.tmp-)?seg-([0-9]+)")
_GEN_NUMBER = re.compile(r"(?:seg-[0-9]+\.(?:del|prior)|hub|vocab)-([0-9]+)")


def numbers_in_use(root: Path) -> tuple[int, int]:
    """The highest segment number and the highest generation any entry of ``root`` carries (0 when none):
    a save into a folder it did not load picks names above both, so it never writes over a file the
    folder's manifest names, whatever index (another vocabulary, dimension or format version, or a
    manifest it cannot read) is there. IndexCorruptError when a folder stands where the manifest goes: no
    commit could replace it, so nothing is written."""
    if (root / MANIFEST).is_dir():
        raise IndexCorruptError(f"{root / MANIFEST}: unreadable manifest (a folder): remove it to save here")
    seg = gen = 0
    try:
        names = [p.name for p in root.iterdir()]
    except FileNotFoundError:
        return 0, 0
    for name in names:
        if m := _SEG_NUMBER.match(name):
            seg = max(seg, int(m[1]))
        if m := _GEN_NUMBER.match(name):
            gen = max(gen, int(m[1]))
    return seg, gen


# ----------------------------------------------------------------------------- manifest
def _manifest_crc(body: dict) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


def write_manifest(root: Path, body: dict) -> None:
    """Atomically replace MANIFEST.json: this rename is the commit."""
    body = dict(body, format=FORMAT, version=VERSION)
    doc = dict(body, manifest_crc32=_manifest_crc(body))
    atomic.write_text(root / MANIFEST, json.dumps(doc, indent=1, sort_keys=True))
    _fsync_dir(root)  # the rename itself must reach the disk before the commit counts


def read_manifest(root: Path) -> dict:
    """The manifest's JSON object once its format, checksum and version are right; its shape is checked
    by manifest.parse (read it through manifest.read). Every failure is an IndexCorruptError naming the file."""
    path = root / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"{root}: no {MANIFEST} (not a tokenspace index folder)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # json's parser recurses once per nesting level
        raise IndexCorruptError(f"{path}: unreadable manifest (nested too deeply)") from None
    except (OSError, ValueError) as e:  # a folder in its place, not UTF-8, not JSON
        raise IndexCorruptError(f"{path}: unreadable manifest ({e})") from None
    if not isinstance(doc, dict):
        kind = {type(None): "null", list: "an array", str: "a string", bool: "a boolean"}.get(type(doc), "a number")
        raise IndexCorruptError(f"{path}: unreadable manifest ({kind}, not a JSON object)")
    if doc.get("format") != FORMAT:
        raise IndexCorruptError(f"{path}: not a {FORMAT} index manifest (format={str(doc.get('format'))[:40]!r})")
    crc = doc.pop("manifest_crc32", None)
    if not isinstance(crc, int) or isinstance(crc, bool):
        raise IndexCorruptError(f"{path}: manifest_crc32: missing or not an int (manifest damaged or edited)")
    if _manifest_crc(doc) != crc:
        raise IndexCorruptError(f"{path}: manifest checksum mismatch")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise IndexCorruptError(f"{path}: version: expected an int, got {str(version)[:20]!r} (manifest damaged or edited)")
    if version in _OLDER:
        # no converter: rebuilding from the vectors is as fast as converting them would be
        raise IndexCorruptError(
            f"{root}: an index in format version {version} ({_OLDER[version]}); this tokenspace "
            f"reads versions {READABLE[0]}-{VERSION}: rebuild the index from its vectors (tokenspace index build, "
            "or InvertedIndex.build(...).save(...))")
    if version not in READABLE:
        raise IndexCorruptError(f"{path}: format version {str(version)[:20]} (this code reads {READABLE})")
    return doc


def check_files(root: Path, entries: dict[str, dict], verify: bool) -> None:
    """Sizes always, crc32 when verify: raise IndexCorruptError naming the first bad file."""
    for rel, meta in entries.items():
        p = root / rel
        if not p.exists():
            raise IndexCorruptError(f"{p}: missing (named by the manifest)")
        size = p.stat().st_size
        if size != meta["bytes"]:
            raise IndexCorruptError(f"{p}: {size} bytes, manifest says {meta['bytes']} (truncated?)")
    if verify:
        rels = list(entries)
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            crcs = list(pool.map(lambda r: file_crc32(root / r), rels))
        for rel, crc in zip(rels, crcs):
            if crc != entries[rel]["crc32"]:
                raise IndexCorruptError(f"{root / rel}: crc32 mismatch (file altered or damaged)")


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file written by write_text (each line ends with a newline)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise IndexCorruptError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    return text.split("\n")[:-1]


def load_array(path: Path, mmap: bool) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise IndexCorruptError(f"{path}: unreadable array ({e})") from e


def remove_unreferenced(root: Path, keep: set[str]) -> None:
    """Delete segment folders, tombstones, vocabulary files and temporaries the manifest does not name."""
    for p in root.iterdir():
        if p.name == MANIFEST or p.name in keep:
            continue
        # temporaries: segment folders (.tmp-*), tokenspace.atomic's files (.<stem>.*.tmp<suffix>) and
        # the older <name>.tmp; an earlier generation's vocabulary (or a version 7 index's vocab.txt)
        if (p.name.startswith((".tmp-", "seg-")) or p.name.endswith(".tmp") or _atomic_temp(p.name)
                or VOCAB_FILE.fullmatch(p.name)):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


_SEGMENT_TEMP = re.compile(r"\.tmp-seg-\d+-(\d+)")  # write_segment's .tmp-<segment>-<pid>


def sweep_temporary(root: str | os.PathLike) -> list[str]:
    """Remove the segment folders half-written by saves whose process is gone (``.tmp-seg-NNNNNN-<pid>``:
    a save killed before its commit), so they do not stay until the next complete save. A folder of a
    live process (a save running now, in this process or another) is left alone, and so is anything the
    folder's owner may not remove (a read-only index: nothing is swept, nothing fails). For a load to call
    before it reads the manifest; returns the names removed."""
    removed = []
    try:
        entries = list(Path(root).iterdir())
    except OSError:
        return removed
    for p in entries:
        m = _SEGMENT_TEMP.fullmatch(p.name)
        try:
            if m is None or p.is_symlink() or not p.is_dir() or _alive(int(m[1])):
                continue
        except OSError:  # gone meanwhile
            continue
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            removed.append(p.name)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's; or no pid at all: leave it
        return True
    return True


def _atomic_temp(name: str) -> bool:
    """A temporary file left by tokenspace.atomic when a write was killed (.<stem>.<random>.tmp<suffix>)."""
    return name.startswith(".") and ".tmp" in name
