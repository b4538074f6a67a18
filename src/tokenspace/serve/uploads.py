"""Uploaded bytes -> a PIL image, or a clear error saying why not (size, pixels, not an image, busy).

The checks run before decoding: the byte cap before anything is parsed, the pixel cap on the header
alone, so a small file that claims a huge raster (a decompression bomb) is refused without decoding it.

Decoded pixels are the service's largest memory: a 110 KB PNG of 5,000 x 5,000 RGBA pixels is 100 MB
once decoded, and 8 such uploads at once took a server from 0.6 to 4.5 GB. ``PixelBudget`` bounds them:
an upload holds its pixel count from before it is decoded until its vector is computed (the model's
preprocessing copies included), and one that does not fit beside the uploads in flight is refused at
once with a 503 and Retry-After (no thread waits, no pixel is decoded). Decoding keeps at most
``BYTES_PER_PIXEL`` bytes per pixel alive: the decoded raster and the RGB image, composited on white a
strip at a time (not a white canvas, a composited copy and its RGB conversion at full size: 20 bytes a
pixel before), and the raster is freed before the model copies the RGB image once more.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO, TypeVar

from PIL import Image, UnidentifiedImageError

MAX_UPLOAD_BYTES = 8 * 1024 * 1024
MAX_UPLOAD_PIXELS = 25_000_000
# decoded pixels of all uploads in flight at once: two at the size cap (about 0.4 GB, BYTES_PER_PIXEL)
UPLOAD_PIXEL_BUDGET = 50_000_000
# the most bytes an upload keeps alive per pixel: the decoded raster (at most 4 a pixel) beside its
# RGB image (Pillow stores RGB in 4), then that image beside the model's preprocessing copy (4 more)
BYTES_PER_PIXEL = 8
RETRY_AFTER_S = 1  # seconds: a 25-megapixel upload is decoded and encoded in about one
# the formats the API promises; Pillow would also open EPS (through Ghostscript, if installed), TIFF,
# BMP, ICO, ...: an upload is decoded only by one of these four plugins
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
KINDS = "a PNG, JPEG, WebP or GIF image"
STRIP_PIXELS = 1 << 20  # pixels composited on white at a time
TRIM_PIXELS = 1_000_000  # uploads this large give their freed memory back to the system (give_back_freed_memory)
TRANSPARENT = ("RGBA", "LA", "PA")
T = TypeVar("T")


class UploadError(ValueError):
    """Why an upload was refused; ``status`` is the HTTP status that says it (413, 415 or 503) and
    ``headers`` what the response adds (Retry-After on a 503)."""

    def __init__(self, message: str, status: int, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})


class PixelBudget:
    """At most ``capacity`` decoded pixels of uploads in flight at once (thread-safe).

    ``hold(pixels)`` takes them for a ``with`` block, or raises UploadError 503 (with Retry-After) when
    they do not fit beside those already held (413 when they exceed the whole budget): a full budget refuses, it never queues, so a burst of
    uploads holds no thread and decodes nothing it cannot keep."""

    def __init__(self, capacity: int = UPLOAD_PIXEL_BUDGET, retry_after: int = RETRY_AFTER_S):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"the upload pixel budget must be a positive int, got {capacity!r}")
        self.capacity, self.retry_after = capacity, retry_after
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Pixels held by the uploads in flight now."""
        return self._held

    @contextmanager
    def hold(self, pixels: int) -> Iterator[None]:
        if pixels > self.capacity:  # never fits: waiting would not help
            raise UploadError(f"the image is {pixels:,} pixels; the limit is {self.capacity:,} pixels", 413)
        with self._lock:
            if self._held + pixels > self.capacity:
                raise UploadError(
                    f"the server is decoding other uploads ({self._held:,} of its {self.capacity:,} pixels in "
                    f"use; this image needs {pixels:,}): retry in {self.retry_after} s",
                    503, {"Retry-After": str(self.retry_after)})
            self._held += pixels
        try:
            yield
        finally:
            with self._lock:
                self._held -= pixels


def open_upload(data: bytes | BinaryIO, max_bytes: int = MAX_UPLOAD_BYTES,
                max_pixels: int = MAX_UPLOAD_PIXELS) -> Image.Image:
    """The upload's image with only its header read (``data``: bytes or a seekable binary file), checked
    against the byte and pixel caps and the four formats; nothing of its raster is decoded yet."""
    fp = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    fp.seek(0, io.SEEK_END)
    size = fp.tell()
    fp.seek(0)
    if not size:
        raise UploadError("the upload is empty (0 bytes)", 415)
    if size > max_bytes:
        raise UploadError(f"the upload is {size:,} bytes; the limit is {max_bytes:,}", 413)
    try:
        img = Image.open(fp, formats=FORMATS)
    except Image.DecompressionBombError:
        # PIL refuses rasters over 2x its own pixel limit while reading the header: also too large
        raise UploadError(f"the image is too large; the limit is {max_pixels:,} pixels", 413) from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise UploadError(f"the upload is not {KINDS}", 415) from None
    w, h = img.size
    if w * h > max_pixels:
        img.close()
        raise UploadError(f"the image is {w} x {h} pixels; the limit is {max_pixels:,} pixels", 413)
    return img


def decode_opened(img: Image.Image) -> Image.Image:
    """Decode an image from ``open_upload`` as RGB (transparency on white) and free its raster: ``img``
    is closed afterwards. At most BYTES_PER_PIXEL bytes a pixel are alive at any time."""
    try:
        try:
            img.load()
        except (OSError, ValueError, Image.DecompressionBombError):
            raise UploadError(f"the image could not be decoded: its {img.format} data is truncated or damaged",
                              415) from None
        if img.mode == "RGB":
            rgb, img = img, None  # handed on as it is (convert would copy it)
            return rgb
        if img.mode in TRANSPARENT or (img.mode == "P" and "transparency" in img.info):
            return _on_white(img)  # transparent drawings (emoji) on white, as the collection's images were encoded
        return img.convert("RGB")
    finally:
        if img is not None:
            img.close()


def decode_image(data: bytes, max_bytes: int = MAX_UPLOAD_BYTES, max_pixels: int = MAX_UPLOAD_PIXELS) -> Image.Image:
    """Decode a raster upload (PNG, JPEG, WebP, GIF first frame) as RGB on white. The messages are ours:
    Pillow's own name its internals (plugins, Ghostscript, its pixel limit)."""
    return decode_opened(open_upload(data, max_bytes, max_pixels))


def decode_within(budget: PixelBudget, opened: Image.Image, use: Callable[[Image.Image], T]) -> T:
    """``use(image)`` on the RGB image of ``opened`` (from ``open_upload``), decoded while ``budget`` holds
    its pixels; the image is freed before they are released. A full budget raises UploadError 503 before
    any pixel is decoded."""
    try:
        with budget.hold(opened.width * opened.height):
            image = decode_opened(opened)
            try:
                return use(image)
            finally:
                image.close()  # its raster freed now, whoever still refers to it: the next upload may use it
                if image.width * image.height >= TRIM_PIXELS:
                    give_back_freed_memory()
    finally:
        opened.close()  # refused by the budget: its file is let go undecoded


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's malloc_trim; elsewhere nothing).

    Each request thread allocates from its own malloc arena, and freed image blocks stayed in it: with
    uploads bounded by the budget, the server still grew by a budget's worth with each new thread that
    decoded one (0.7 -> 1.8 GB over five bursts of 32 uploads). Trimming after each large upload keeps
    the RSS at the idle server's plus what is in flight. A few milliseconds, only for large images."""
    if _libc is not None:
        _libc.malloc_trim(0)


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
        return libc
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows): no trim, nothing to do
        return None


_libc = _glibc()


def _on_white(img: Image.Image) -> Image.Image:
    """``img`` composited on opaque white as RGB: the pixels of ``alpha_composite(white, img.convert("RGBA"))
    .convert("RGB")``, computed a strip of rows at a time into the one RGB image."""
    w, h = img.size
    out = Image.new("RGB", (w, h))
    rows = max(1, STRIP_PIXELS // max(1, w))
    for top in range(0, h, rows):
        box = (0, top, w, min(h, top + rows))
        strip = img.crop(box).convert("RGBA")
        white = Image.new("RGBA", strip.size, (255, 255, 255, 255))
        out.paste(Image.alpha_composite(white, strip).convert("RGB"), box[:2])
    return out
