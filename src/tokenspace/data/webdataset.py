"""Webdataset shards (tar files of ``key.jpg`` + ``key.txt`` members) with random access by row.

Large collections (CC12M, LAION subsets) ship as webdataset tars. Reading them needs no webdataset
package: a tar is a sequence of 512-byte headers and member data, so one pass over the headers (no
image is decoded) gives each sample's byte offsets, and any row is then one seek + read. Random access
is what the trainer's group-aware sampler and exact resume need, and what lets each DDP rank read only
its own shard of a global batch.

Naming follows webdataset: a member ``dir/abc.def.jpg`` belongs to sample key ``dir/abc`` with field
``def.jpg``; samples are the runs of consecutive members sharing a key. A sample needs an image field
(jpg, jpeg, png, webp, ppm, bmp) and a text field (txt, caption); others are skipped and counted.
"""
from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import sys
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tokenspace.atomic import atomic_path
from tokenspace.data.images import ImageLoadError, _on_white, check_image, load_image, open_checked
from tokenspace.data.manifest import Record

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "ppm", "bmp")
TEXT_EXTS = ("txt", "caption")


def expand_shards(spec: str | Sequence[str]) -> list[str]:
    """``shard-{000000..000099}.tar`` brace ranges (webdataset syntax), globs, or lists of either."""
    if not isinstance(spec, str):
        return [p for s in spec for p in expand_shards(s)]
    m = re.search(r"\{(\d+)\.\.(\d+)\}", spec)
    if m:
        lo, hi = m.group(1), m.group(2)
        width = len(lo)
        return [p for i in range(int(lo), int(hi) + 1)
                for p in expand_shards(spec[:m.start()] + str(i).zfill(width) + spec[m.end():])]
    if any(c in spec for c in "*?["):
        return sorted(glob.glob(spec))
    return [spec]


def _split_key(name: str) -> tuple[str, str]:
    d, base = os.path.split(name)
    stem, _, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


@dataclass
class TarCollection:
    """Samples of a list of shards: ``keys[i]``, ``texts[i]`` and the image bytes' location."""

    shards: list[str]
    keys: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    shard_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [N]
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [N] image data offset
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [N] image data bytes
    skipped: int = 0  # samples without an image or a text

    @classmethod
    def open(cls, spec: str | Sequence[str], rank: int = 0, world: int = 1,
             gather: Callable[[object], list] | None = None) -> TarCollection:
        """Scan the shards' headers. Under data parallelism each of ``world`` ranks scans every
        world-th shard from its ``rank`` and ``gather`` (e.g. ``torch.distributed.all_gather_object``
        wrapped to return the list) brings all ranks' parts together, so start-up reads each header
        once across the job instead of once per rank; every rank ends with the same collection."""
        specs = [spec] if isinstance(spec, str) else list(spec)
        per_spec = [expand_shards(s) for s in specs]
        empty = [s for s, found in zip(specs, per_spec) if not found]
        if empty:  # else the collection silently lacks that pattern's shards
            raise ValueError(f"{empty[0]}: no shard file matches this pattern")
        shards = [p for found in per_spec for p in found]
        missing = [s for s in shards if not os.path.exists(s)]
        if missing:
            raise FileNotFoundError(f"{len(missing)} shard(s) not found, e.g. {missing[0]}")
        part = cls._scan_part(shards, rank, world)
        parts = gather(part) if world > 1 and gather is not None else [part]
        if world > 1 and gather is None:
            raise ValueError("world > 1 needs a gather function to merge the ranks' scans")
        scanned = {si: rows for p in parts for si, rows in p.items()}
        c = cls(shards)
        shard_of, offset, size = [], [], []
        for si in range(len(shards)):
            for key, text, off, n in scanned[si]:
                if text is None or off is None:
                    c.skipped += 1
                    continue
                c.keys.append(key)
                c.texts.append(text)
                shard_of.append(si)
                offset.append(off)
                size.append(n)
        c.shard_of = np.asarray(shard_of, np.int32)
        c.offset = np.asarray(offset, np.int64)
        c.size = np.asarray(size, np.int64)
        return c

    @staticmethod
    def _scan_part(shards: list[str], rank: int, world: int) -> dict[int, list]:
        """{shard number: [(key, text, image offset, image size), ...]} for this rank's shards."""
        return {si: list(_scan(shards[si])) for si in range(rank, len(shards), world)}

    def __len__(self) -> int:
        return len(self.keys)

    def image_bytes(self, i: int) -> bytes:
        # one open handle per shard and process (opening a file per image costs as much as decoding it)
        handles = self.__dict__.setdefault("_handles", {})
        si = int(self.shard_of[i])
        if si not in handles:
            if len(handles) >= 64:  # bound the open files when reading across many shards
                handles.pop(next(iter(handles))).close()
            handles[si] = open(self.shards[si], "rb")  # noqa: SIM115 - kept open across calls
        f = handles[si]
        f.seek(int(self.offset[i]))
        return f.read(int(self.size[i]))

    def image(self, i: int):
        """Row i's image (PIL, RGB); ImageLoadError when it cannot be decoded."""
        return decode_image_bytes(self.image_bytes(i), f"{self.shards[self.shard_of[i]]}:{self.keys[i]}")


def decode_image_bytes(data: bytes, where: str):
    """Image bytes -> RGB PIL image, transparency composited on white as for image files
    (data.images.load_image); ImageLoadError(where, cause) when they cannot be decoded."""
    try:
        img = open_checked(io.BytesIO(data), where)  # a bomb in a shard: refused as too large, no raw warning
        img.load()
        return _on_white(img)
    except ImageLoadError:
        raise
    except Exception as e:  # PIL raises many types for broken data
        # PIL names the in-memory file ("cannot identify image file <_io.BytesIO object at 0x...>")
        raise ImageLoadError(where, "not a readable image (" + _OBJECT_REPR.sub("", str(e)) + ")") from e


_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")


def _scan(path: str) -> Iterable[tuple[str, str | None, int | None, int]]:
    """(key, text, image offset, image size) per sample of one tar, reading headers and texts only."""
    key, text, off, n = None, None, None, 0
    with tarfile.open(path, "r:") as tar:  # "r:": uncompressed, so offsets are file offsets
        for m in tar:
            if not m.isfile():
                continue
            k, ext = _split_key(m.name)
            if k != key:
                if key is not None:
                    yield key, text, off, n
                key, text, off, n = k, None, None, 0
            last = ext.rsplit(".", 1)[-1]
            if last in IMAGE_EXTS and off is None:
                off, n = m.offset_data, m.size
            elif last in TEXT_EXTS and text is None:
                text = tar.extractfile(m).read().decode("utf-8", "replace").strip()
        if key is not None:
            yield key, text, off, n


class LazyPixels:
    """Rows of a TarCollection as normalised pixels, decoded on demand: ``pixels[idx]`` ->
    [len(idx), 3, S, S] float32. Stands in for cached grids when the image tower trains end to end.
    An undecodable image becomes a blank one (counted in ``bad``): a batch must keep its shape."""

    def __init__(self, collection: TarCollection, image_size: int, mean, std):
        self.c, self.size, self.mean, self.std = collection, image_size, mean, std
        self.bad = 0

    def __len__(self) -> int:
        return len(self.c)

    def __getitem__(self, idx) -> np.ndarray:
        from tokenspace.data.preprocess import pixels  # start-up: torch, which only decoding to pixels needs

        imgs = []
        for i in np.atleast_1d(idx):
            try:
                imgs.append(self.c.image(int(i)))
            except ImageLoadError:
                self.bad += 1
                imgs.append(Image.new("RGB", (self.size, self.size), (255, 255, 255)))
        return pixels(imgs, self.size, self.mean, self.std).numpy()


def write_shards(samples: Iterable[tuple[str, bytes, str]], pattern: str, per_shard: int = 10000,
                 image_ext: str = "png") -> list[str]:
    """Write (key, image bytes, text) samples as webdataset tars named ``pattern % shard_number``."""
    return _write_members((((image_ext, image), ("txt", text.encode())), key) for key, image, text in samples)(
        pattern, per_shard)


def _write_members(samples: Iterable[tuple[tuple[tuple[str, bytes], ...], str]]):
    """(members as (field, data) pairs, key) per sample -> a writer(pattern, per_shard) -> shard paths.
    Each shard is written under a temporary name and renamed when whole: a killed run leaves whole
    shards only (a half tar would read as a shard with its last sample cut)."""
    def write(pattern: str, per_shard: int) -> list[str]:
        paths: list[str] = []
        stack = contextlib.ExitStack()
        tar, count = None, 0
        try:
            for members, key in samples:
                if tar is None or count == per_shard:
                    stack.close()  # the previous shard: closed, then renamed into place
                    stack = contextlib.ExitStack()
                    paths.append(pattern % len(paths))
                    tmp = stack.enter_context(atomic_path(paths[-1]))
                    tar, count = stack.enter_context(tarfile.open(tmp, "w")), 0
                for ext, data in members:
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                count += 1
        except BaseException:
            stack.__exit__(*sys.exc_info())  # the shard being written is removed, not renamed
            raise
        stack.close()
        return paths

    return write


# ----------------------------------------------------------------- shards from a folder or a manifest
# what `tokenspace shards` reads: the reader's image fields go in byte for byte; these others are
# decoded by data/images.py (GIF's first frame, TIFF, SVG rendered) and stored as PNG
CONVERTED_EXTS = ("gif", "tif", "tiff", "svg", "svgz")
SIDECAR_EXT = "txt"


@dataclass
class ShardSource:
    """One sample to write: its key (the index id it becomes), image file, caption and metadata."""

    key: str
    image: Path
    caption: str
    metadata: dict | None = None
    where: str = ""  # how to name it in a message: the file, or the manifest line
    caption_from: str = "manifest"  # where the caption came from: manifest, sidecar or file name


@dataclass
class ShardReport:
    """What ``write_sample_shards`` did: the shards, and how many samples took each road."""

    shards: list[str] = field(default_factory=list)
    written: int = 0
    converted: int = 0  # stored as PNG (GIF, TIFF, SVG)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where, reason): unreadable images
    captions: dict[str, int] = field(default_factory=dict)  # caption origin -> count


def _key_of(rel: Path) -> str:
    """A relative path -> a webdataset key: no extension, and no dot (a dot starts the field name, so
    ``a.b.png`` would read as key ``a`` with field ``b.png``), forward slashes."""
    return rel.with_suffix("").as_posix().replace(".", "_")


def _caption_from_name(path: Path) -> str:
    """The file's name as words (``red_heart-2.png`` -> ``red heart 2``), for an image with no caption."""
    return " ".join(re.split(r"[_\-\s.]+", path.stem)).strip()


def _sidecar(path: Path) -> str | None:
    side = path.with_suffix(f".{SIDECAR_EXT}")
    if not side.is_file():
        return None
    return side.read_text(encoding="utf-8", errors="replace").strip()


def _image_ext(path: Path) -> str:
    return path.suffix.lower().lstrip(".")


def folder_sources(folder: str | os.PathLike) -> list[ShardSource]:
    """Every image under ``folder`` (recursively, in path order) with its caption: the text of the
    sidecar file beside it (``cat.jpg`` -> ``cat.txt``) when there is one, else its file name's words.
    The key is the path under ``folder`` without the extension (``pets/cat``)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: {'a file, not a folder' if root.exists() else 'no such folder'}")
    known = set(IMAGE_EXTS) | set(CONVERTED_EXTS)
    images = sorted(p for p in root.rglob("*") if p.is_file() and _image_ext(p) in known
                    and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not images:
        raise ValueError(f"{root}: no images (looked for {', '.join('.' + e for e in sorted(known))})")
    out = []
    for p in images:
        caption = _sidecar(p)
        out.append(ShardSource(_key_of(p.relative_to(root)), p,
                               caption if caption is not None else _caption_from_name(p), None, str(p),
                               "sidecar" if caption is not None else "file name"))
    return _unique_keys(out)


MANIFEST_PATH_FIELDS = ("image", "path")
MANIFEST_TEXT_FIELDS = ("caption", "text")
MANIFEST_KEY_FIELDS = ("key", "id")


def manifest_sources(manifest: str | os.PathLike) -> list[ShardSource]:
    """A JSONL manifest, one object a line: the image (``image`` or ``path``, relative to the
    manifest's folder), its caption (``caption`` or ``text``; absent: the sidecar .txt, else the file
    name's words), an optional ``key`` (or ``id``: the index id; default the image path without its
    extension) and any other fields, kept as the sample's metadata (``KEY.json`` in the shard)."""
    manifest = Path(manifest)
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest}: {'a folder, not a file' if manifest.exists() else 'no such file'}")
    base = manifest.parent
    out = []
    with open(manifest, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{manifest}:{n}"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{where}: not a JSON object ({e})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            row = dict(row)
            path_field = next((k for k in MANIFEST_PATH_FIELDS if k in row), None)
            if path_field is None or not isinstance(row[path_field], str) or not row[path_field].strip():
                raise ValueError(f"{where}: needs the image file as \"image\" (or \"path\"), a non-empty string")
            rel = row.pop(path_field)
            path = (base / rel) if not Path(rel).is_absolute() else Path(rel)
            if not path.is_file():
                raise FileNotFoundError(f"{where}: image {path} not found"
                                        + (" (paths are relative to the manifest's folder)" if not Path(rel).is_absolute() else ""))
            text_field = next((k for k in MANIFEST_TEXT_FIELDS if k in row), None)
            if text_field is not None:
                caption = row.pop(text_field)
                if not isinstance(caption, str):
                    raise ValueError(f"{where}: \"{text_field}\" must be a string, got {type(caption).__name__}")
                origin = "manifest"
            else:
                caption = _sidecar(path)
                origin = "sidecar" if caption is not None else "file name"
                caption = caption if caption is not None else _caption_from_name(path)
            key_field = next((k for k in MANIFEST_KEY_FIELDS if k in row), None)
            if key_field is not None:
                key = row.pop(key_field)
                if not isinstance(key, str) or not key.strip():
                    raise ValueError(f"{where}: \"{key_field}\" must be a non-empty string")
                if "." in key or key.startswith("/") or key.endswith("/"):
                    raise ValueError(f"{where}: key {key!r} cannot hold a dot or start or end with '/' "
                                     "(in a webdataset shard a dot starts the field name: a.b.png is key a)")
            else:
                try:
                    key = _key_of(path.resolve().relative_to(base.resolve()))
                except ValueError:  # an image outside the manifest's folder: its name
                    key = _key_of(Path(path.name))
            out.append(ShardSource(key.strip(), path, caption.strip(), row or None, where, origin))
    if not out:
        raise ValueError(f"{manifest}: no rows")
    return _unique_keys(out)


def source_records(sources: Sequence[ShardSource]) -> list[Record]:
    """``sources`` (``folder_sources``, ``manifest_sources``) as the records `index build` encodes straight
    from the files, no shards between: the same keys (index ids) and captions `tokenspace shards` writes.
    The image stays where it is (a GIF, TIFF or SVG is decoded by the loader, as a data spec's is)."""
    return [Record(s.key, str(s.image), s.caption, "all") for s in sources]


def _unique_keys(sources: list[ShardSource]) -> list[ShardSource]:
    seen: dict[str, ShardSource] = {}
    for s in sources:
        if s.key in seen:
            raise ValueError(f"two images have the key {s.key!r} ({seen[s.key].where} and {s.where}): keys are the "
                             "index ids and must be unique; rename one (or give each manifest row its own \"key\")")
        seen[s.key] = s
    return sources


def _image_member(src: ShardSource) -> tuple[str, bytes, bool]:
    """(field, bytes, converted) of one image: the reader's formats as they are (only their header is
    checked), the others decoded and stored as PNG. ImageLoadError when it cannot be read."""
    ext = _image_ext(src.image)
    if ext in IMAGE_EXTS:
        check_image(src.image)
        return ("jpg" if ext == "jpeg" else ext), src.image.read_bytes(), False
    buf = io.BytesIO()
    load_image(src.image).save(buf, format="PNG")
    return "png", buf.getvalue(), True


def write_sample_shards(sources: Sequence[ShardSource], folder: str | os.PathLike, per_shard: int = 1000,
                        prefix: str = "shard") -> ShardReport:
    """``sources`` as webdataset tars ``folder/prefix-000000.tar``, ...: per sample ``KEY.<image ext>``,
    ``KEY.txt`` (the caption) and ``KEY.json`` (its metadata, when it has any). An unreadable image is
    skipped and reported, not written (``tokenspace encode`` would skip it too, later and less clearly).
    A folder already holding ``prefix-*.tar`` files is refused: new shards would mix with old ones."""
    if per_shard < 1:
        raise ValueError(f"per_shard must be at least 1, got {per_shard}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file; give a folder for the shards")
    old = sorted(folder.glob(f"{prefix}-*.tar")) if folder.is_dir() else []
    if old:
        raise ValueError(f"{folder} already holds shards ({old[0].name}, ...): give an empty or new folder")
    report = ShardReport()

    def samples():
        for src in sources:
            try:
                ext, data, converted = _image_member(src)
            except ImageLoadError as e:
                report.skipped.append((src.where, e.reason))
                continue
            report.captions[src.caption_from] = report.captions.get(src.caption_from, 0) + 1
            report.written += 1
            report.converted += converted
            members = [(ext, data), ("txt", src.caption.encode("utf-8"))]
            if src.metadata:
                members.append(("json", json.dumps(src.metadata, ensure_ascii=False, sort_keys=True).encode("utf-8")))
            yield tuple(members), src.key

    report.shards = _write_members(samples())(str(folder / f"{prefix}-%06d.tar"), per_shard)
    return report


def shard_pattern(shards: Sequence[str]) -> str:
    """The brace pattern that names ``shards`` (``dir/shard-{000000..000003}.tar``), as `encode` reads it."""
    if len(shards) == 1:
        return shards[0]
    first, last = shards[0], shards[-1]
    m1, m2 = re.search(r"(\d+)\.tar$", first), re.search(r"(\d+)\.tar$", last)
    return f"{first[:m1.start(1)]}{{{m1.group(1)}..{m2.group(1)}}}.tar"
