"""Render SVG documents to PNG files once, into the cache, so manifests point at plain image files.

Resumable: a PNG that exists (non-empty) is not rendered again; each file is written to a temporary
name and renamed, so an interrupted run never leaves a truncated PNG. Rendering runs in at most
``workers`` processes at lowered priority (the machine is shared). A document cairosvg cannot render
is reported, not fatal.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from multiprocessing import get_context

from tokenspace.atomic import write_bytes
from tokenspace.data.manifest import Record

log = logging.getLogger(__name__)

RENDER_SIZE = 224  # pixels on the longest side: the backbone's input size, so no second resize
MAX_WORKERS = 2


def svg_to_png(svg: str, size: int) -> bytes:
    """PNG bytes of an SVG document at ``size`` x ``size``.

    cairosvg ignores SVG filters: Fluent 3D emoji (2,932 of 3,120 use ``<filter>`` blurs) come out with
    hard seams and stray outlines. resvg implements them, so documents with a filter go through resvg;
    the rest through cairosvg (on 60 icons each of noto, mdi, game-icons and ph the two agree to a mean
    absolute difference below 1/255, at about the same CPU time: docs/data.md).
    """
    if "<filter" in svg:
        import resvg_py  # start-up: only filtered SVGs need resvg

        return bytes(resvg_py.svg_to_bytes(svg_string=svg, width=size, height=size))
    import cairosvg  # start-up: libcairo, loaded on the first render only

    return cairosvg.svg2png(bytestring=svg.encode("utf-8"), output_width=size, output_height=size)


def render_one(job: tuple[str, str, int]) -> str | None:
    """Render ``(svg text, out path, size)``; returns an error message or None."""
    svg, out, size = job
    try:
        png = svg_to_png(svg, size)
        write_bytes(out, png)  # workers write in parallel: each temporary name is unique
        return None
    except Exception as e:  # cairosvg and resvg raise many types on bad documents
        return f"{type(e).__name__}: {e}"[:200]


def _init_worker(niceness: int) -> None:
    try:
        os.nice(niceness)
    except OSError:
        pass


def render_svgs(jobs: Sequence[tuple[str, str | os.PathLike]], size: int = RENDER_SIZE,
                workers: int = MAX_WORKERS, niceness: int = 10, progress: bool = True) -> dict[str, str]:
    """Render ``(svg text, out path)`` pairs whose PNG is missing; returns ``{out path: error}``.

    Icons are square (a non-square viewBox is letterboxed by cairosvg's preserveAspectRatio default).
    """
    todo = [(svg, str(out), size) for svg, out in jobs
            if not (os.path.isfile(out) and os.path.getsize(out) > 0)]
    errors: dict[str, str] = {}
    if not todo:
        return errors
    t0 = time.time()
    workers = max(1, min(workers, MAX_WORKERS, len(todo)))
    level = logging.INFO if progress else logging.DEBUG  # the CLI shows INFO on stderr
    log.log(level, "rendering %d SVGs to PNG (%d workers) ...", len(todo), workers)
    if workers == 1:
        results = map(render_one, todo)
    else:
        pool = get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(niceness,))
        results = pool.imap(render_one, todo, chunksize=16)
    try:
        for i, (job, err) in enumerate(zip(todo, results), 1):
            if err:
                errors[job[1]] = err
            if i % 2000 == 0:
                log.log(level, "  %d/%d rendered (%.0f/s)", i, len(todo), i / (time.time() - t0))
    finally:
        if workers > 1:
            pool.close()
            pool.join()
    log.log(level, "rendered %d in %.0fs, %d failed", len(todo) - len(errors), time.time() - t0, len(errors))
    return errors


def finish(records: list[Record], report: dict, dropped: Counter, jobs: dict, render: bool = True,
           progress: bool = False) -> tuple[list[Record], dict]:
    """Render the SVGs the kept records need, drop records whose image failed, count the splits (the last
    step of every builder: emoji, icons, openclipart, data.build)."""
    failed = {}
    if render and jobs:
        want = [(jobs[r.image][0].svg(jobs[r.image][1]), r.image) for r in records if r.image in jobs]
        failed = render_svgs(want, progress=progress)
    if failed:
        dropped = Counter(dropped)
        dropped["render_failed"] += len(failed)
        records = [r for r in records if r.image not in failed]
    splits = Counter(r.split for r in records)
    report = dict(report, splits=dict(sorted(splits.items())), dropped=dict(sorted(dropped.items())))
    if failed:
        report["render_failures"] = dict(list(failed.items())[:5])
    return records, report
