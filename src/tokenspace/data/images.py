"""Image loading: every supported file becomes an RGB PIL image, or a clear ImageLoadError.

Raster formats go through Pillow; SVG is rendered with cairosvg. Transparent pixels are composited on
white, because emoji and clip-art PNGs are transparent and a black background (what a plain
``convert("RGB")`` gives) changes what the image looks like.
"""
from __future__ import annotations

import io
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from PIL import Image, UnidentifiedImageError

SVG_SIZE = 256  # longest side, in pixels, of a rendered SVG
# Larger rasters are refused before decoding: a 20,990 x 29,700 clip-art PNG takes 2.5 GB and a minute
# to decode only to be shrunk to 224 px (and Pillow itself refuses some as decompression bombs).
MAX_PIXELS = 40_000_000


class ImageLoadError(OSError):
    """An image that cannot be read; ``path`` and ``reason`` say which and why."""

    def __init__(self, path, reason: str):
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"cannot load image {self.path}: {reason}")


def _render_svg(path: str, size: int) -> Image.Image:
    import cairosvg  # lazy: rendering needs libcairo, which raster-only users never load

    # Render once at natural size to learn the aspect, then at the size we want on the longest side.
    png = cairosvg.svg2png(url=path)
    with warnings.catch_warnings():  # our own rendering, and only its header is read: not a bomb to warn of
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        w, h = Image.open(io.BytesIO(png)).size
    kw = {"output_width": size} if w >= h else {"output_height": size}
    return Image.open(io.BytesIO(cairosvg.svg2png(url=path, **kw)))


def _on_white(img: Image.Image) -> Image.Image:
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        img = img.convert("RGBA")
        bg = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, img).convert("RGB")
    return img.convert("RGB")


def open_checked(fp, where, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """``Image.open(fp)`` (the header only) with its size checked against ``max_pixels`` by us.

    Pillow warns of a possible decompression bomb from 89 megapixels and refuses from 179; a
    168-megapixel OpenClipart drawing made `make demo` print that raw warning. Our own limit is lower,
    so every image Pillow would warn of is refused here anyway, as an ImageLoadError that callers
    count and report ("skipped N unreadable images"): Pillow's warning is silenced for this call, and
    its error becomes the same "too large" reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(fp)
    except Image.DecompressionBombError as e:
        size = re.search(r"\((\d+) pixels\)", str(e))
        raise ImageLoadError(where, "too large to decode"
                             + (f" ({int(size.group(1)):,} pixels)" if size else "")) from None
    if img.width * img.height > max_pixels:
        raise ImageLoadError(where, f"too large to decode ({img.width} x {img.height} pixels)")
    return img


def check_image(path: str | os.PathLike, max_pixels: int = MAX_PIXELS) -> None:
    """ImageLoadError unless ``path`` is an image Pillow recognises, within ``max_pixels`` (reads the
    header only: a cheap check before copying a file's bytes somewhere, e.g. into a shard)."""
    path = os.fspath(path)
    try:
        if os.path.getsize(path) == 0:
            raise ImageLoadError(path, "empty file (0 bytes)")
        with open_checked(path, path, max_pixels) as img:
            if img.width == 0 or img.height == 0:
                raise ImageLoadError(path, "image has zero width or height")
    except ImageLoadError:
        raise
    except FileNotFoundError:
        raise ImageLoadError(path, "file not found") from None
    except UnidentifiedImageError:
        raise ImageLoadError(path, "not a recognised image format") from None
    except Exception as e:  # Pillow raises many types for corrupt headers
        raise ImageLoadError(path, f"{type(e).__name__}: {e}") from e


def load_image(path: str | os.PathLike, svg_size: int = SVG_SIZE, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Load PNG / JPEG / WebP / GIF (first frame) / SVG as RGB; transparency composited on white.

    Raises ImageLoadError (with the path and the cause) for missing, empty, corrupt, unknown or
    oversized (more than ``max_pixels``) files.
    """
    path = os.fspath(path)
    try:
        if os.path.getsize(path) == 0:
            raise ImageLoadError(path, "empty file (0 bytes)")
        if path.lower().endswith((".svg", ".svgz")):
            img = _render_svg(path, svg_size)
        else:
            img = open_checked(path, path, max_pixels)
        img.load()  # force decoding now, so truncated files fail here and not in a worker later
        if img.width == 0 or img.height == 0:
            raise ImageLoadError(path, "image has zero width or height")
        return _on_white(img)
    except ImageLoadError:
        raise
    except FileNotFoundError:
        raise ImageLoadError(path, "file not found") from None
    except UnidentifiedImageError:
        raise ImageLoadError(path, "not a recognised image format") from None
    except Exception as e:  # Pillow and cairosvg raise many types for corrupt data
        raise ImageLoadError(path, f"{type(e).__name__}: {e}") from e


@dataclass
class LoadResult:
    """Images that loaded, their positions in the input, and what was skipped and why."""

    images: list = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (index, path, reason)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)


def load_images(paths: Sequence[str | os.PathLike], svg_size: int = SVG_SIZE, size: int | None = None) -> LoadResult:
    """Load many images, skipping (and counting) the ones that fail instead of raising.

    ``size``: if given, each image is resized to ``size x size`` (bicubic) after loading.
    """
    res = LoadResult()
    for i, p in enumerate(paths):
        try:
            img = load_image(p, svg_size=svg_size)
        except ImageLoadError as e:
            res.skipped.append((i, e.path, e.reason))
            continue
        if size is not None:
            img = img.resize((size, size), Image.BICUBIC)
        res.images.append(img)
        res.kept.append(i)
    return res
