"""Uploaded bytes -> a PIL image, or a clear error saying why not (size, pixels, not an image).

The checks run before decoding: the byte cap before anything is parsed, the pixel cap on the header
alone, so a small file that claims a huge raster (a decompression bomb) is refused without decoding it.
"""
from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError

MAX_UPLOAD_BYTES = 8 * 1024 * 1024
MAX_UPLOAD_PIXELS = 25_000_000
# the formats the API promises; Pillow would also open EPS (through Ghostscript, if installed), TIFF,
# BMP, ICO, ...: an upload is decoded only by one of these four plugins
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
KINDS = "a PNG, JPEG, WebP or GIF image"


class UploadError(ValueError):
    """Why an upload was refused; ``status`` is the HTTP status that says it (413 or 415)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def decode_image(data: bytes, max_bytes: int = MAX_UPLOAD_BYTES, max_pixels: int = MAX_UPLOAD_PIXELS) -> Image.Image:
    """Decode a raster upload (PNG, JPEG, WebP, GIF first frame) as RGB on white. The messages are ours:
    Pillow's own name its internals (plugins, Ghostscript, its pixel limit)."""
    if not data:
        raise UploadError("the upload is empty (0 bytes)", 415)
    if len(data) > max_bytes:
        raise UploadError(f"the upload is {len(data):,} bytes; the limit is {max_bytes:,}", 413)
    try:
        img = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError:
        # PIL refuses rasters over 2x its own pixel limit while reading the header: also too large
        raise UploadError(f"the image is too large; the limit is {max_pixels:,} pixels", 413) from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise UploadError(f"the upload is not {KINDS}", 415) from None
    w, h = img.size
    if w * h > max_pixels:
        raise UploadError(f"the image is {w} x {h} pixels; the limit is {max_pixels:,} pixels", 413)
    try:
        img.load()
    except (OSError, ValueError, Image.DecompressionBombError):
        raise UploadError(f"the image could not be decoded: its {img.format} data is truncated or damaged", 415) from None
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        # transparent drawings (emoji) on white, as the collection's images were encoded
        rgba = img.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    return img.convert("RGB")
