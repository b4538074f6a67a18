"""The memory bound on concurrent image uploads (serve/uploads.py: PixelBudget): decoded pixels in flight
never exceed the budget, an upload that does not fit gets a 503 with Retry-After, and the peak RSS of a
burst of concurrent uploads stays near one upload's, measured here with small images and a small budget.

(A fresh server given 8 simultaneous 25-megapixel RGBA PNGs went from 0.6 to 4.5 GB: decoding ran
outside the model's lock, so nothing bounded it. The full-size probe and its numbers: docs/usage.md.)"""
from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest
from PIL import Image

from tokenspace.serve import uploads

SIDE = 1500  # a 1500 x 1500 RGBA PNG: 2.25 megapixels, 9 MB decoded, about 20 MB in flight


def rgba_png(side: int = SIDE) -> bytes:
    """A small file with a large transparent raster (half the rows half transparent), as the probe's."""
    a = np.zeros((side, side, 4), np.uint8)
    a[..., 0], a[..., 3] = 200, 255
    a[: side // 2, :, 3] = 128
    buf = io.BytesIO()
    Image.fromarray(a, "RGBA").save(buf, format="PNG")
    return buf.getvalue()


def peak_rss_during(fn) -> tuple[int, object]:
    """(the process's peak RSS in bytes while ``fn()`` ran, above its RSS before, ``fn()``'s result): the
    kernel's high-water mark, reset first (/proc/self/clear_refs), else sampled every millisecond."""
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def hwm() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))

    base = rss()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        peak, done = [base], threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss())
                time.sleep(0.001)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            result = fn()
        finally:
            done.set()
            sampler.join()
        return peak[0] - base, result
    result = fn()
    return hwm() - base, result


def burst(client, data: bytes, n: int) -> list:
    """``n`` uploads of ``data`` at once, each from its own thread; their responses."""
    start = threading.Barrier(n)
    out = [None] * n

    def one(i):
        start.wait()
        out[i] = client.post("/search/image", files={"file": ("q.png", data, "image/png")})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.fixture
def slow_service(served):
    """The served tiny world's service, its image search held 0.2 s: every upload of a burst is in flight
    at once."""
    service = served[0]
    search_image = service.search_image

    def slow(image, k=10):
        time.sleep(0.2)
        return search_image(image, k)

    service.search_image = slow
    return service


def test_concurrent_uploads_stay_within_the_pixel_budget(slow_service):
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    data = rgba_png()
    one_upload = SIDE * SIDE * 9  # bytes at the peak: the decoded raster, the RGB image, the model's copy
    app = build_app(slow_service, upload_pixels=SIDE * SIDE)  # room for one upload at a time
    with TestClient(app) as client:
        burst(client, data, 2)  # warm: the threads, the allocator's arenas, the first model call
        held = []
        inner = slow_service.search_image
        slow_service.search_image = lambda image, k=10: (held.append(app.state.upload_budget.held), inner(image, k))[1]
        grown, responses = peak_rss_during(lambda: burst(client, data, 16))
    codes = sorted(r.status_code for r in responses)
    assert set(codes) == {200, 503} and codes.count(200) >= 1, codes
    assert max(held) <= SIDE * SIDE and app.state.upload_budget.held == 0
    busy = next(r for r in responses if r.status_code == 503)
    assert busy.headers["retry-after"] == "1"
    assert busy.json()["detail"].startswith("the server is decoding other uploads") and "retry in 1 s" in busy.json()["detail"]
    # 16 uploads decoded at once would add about 16 x 20 MB; the budget lets one through at a time
    assert grown < 3 * one_upload + 20e6, f"peak RSS grew {grown / 1e6:.0f} MB for a burst of 16 uploads"


def test_budget_refuses_without_decoding_and_releases_on_every_way_out():
    budget = uploads.PixelBudget(100)
    with budget.hold(60):
        assert budget.held == 60
        with pytest.raises(uploads.UploadError) as e:
            with budget.hold(41):
                pass
        assert e.value.status == 503 and e.value.headers == {"Retry-After": "1"}
        with budget.hold(40):
            assert budget.held == 100
    assert budget.held == 0
    with pytest.raises(RuntimeError):
        with budget.hold(100):
            raise RuntimeError("the model failed")
    assert budget.held == 0
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            uploads.PixelBudget(bad)

    with pytest.raises(uploads.UploadError) as e:  # more than the whole budget: never fits
        with budget.hold(101):
            pass
    assert e.value.status == 413 and budget.held == 0

    # a full budget: the upload is closed undecoded, and a decode error also gives its pixels back
    budget = uploads.PixelBudget(2000)
    opened = uploads.open_upload(rgba_png(40))
    with budget.hold(1000), pytest.raises(uploads.UploadError) as e:
        uploads.decode_within(budget, opened, lambda image: image)
    assert e.value.status == 503
    with pytest.raises(ValueError, match="closed"):
        opened.load()
    truncated = rgba_png(40)[:-40]
    with pytest.raises(uploads.UploadError) as e:
        uploads.decode_within(budget, uploads.open_upload(truncated), lambda image: image)
    assert e.value.status == 415 and budget.held == 0


def test_large_uploads_give_their_freed_memory_back(served, monkeypatch):
    """Freed image blocks stayed in each request thread's malloc arena: bounded bursts still grew the
    server by a budget's worth per new thread (0.7 -> 1.8 GB over five bursts of 32). A large upload
    trims the heap once it is done; a small one does not pay for it."""
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    trims = []
    monkeypatch.setattr(uploads, "give_back_freed_memory", lambda: trims.append(1))
    monkeypatch.setattr(uploads, "TRIM_PIXELS", 50 * 50)
    with TestClient(build_app(served[0])) as client:
        for side, trimmed in ((40, 0), (50, 1), (60, 2)):
            assert client.post("/search/image", files={"file": ("q.png", rgba_png(side), "image/png")}).status_code == 200
            assert len(trims) == trimmed
    monkeypatch.undo()
    uploads.give_back_freed_memory()  # the real one runs (glibc) or does nothing, and never raises


def test_an_upload_larger_than_the_whole_budget_is_413(served):
    from fastapi.testclient import TestClient

    from tokenspace.serve.app import build_app

    with TestClient(build_app(served[0], upload_pixels=30 * 30)) as client:
        r = client.post("/search/image", files={"file": ("q.png", rgba_png(40), "image/png")})
        assert r.status_code == 413 and r.json()["detail"] == "the image is 40 x 40 pixels; the limit is 900 pixels"
        assert client.post("/search/image", files={"file": ("q.png", rgba_png(30), "image/png")}).status_code == 200


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P", "RGB", "L"])
def test_decoding_a_strip_at_a_time_gives_the_same_pixels(mode, monkeypatch):
    """The composite on white, strip by strip, is pixel for pixel the full-size alpha_composite's."""
    monkeypatch.setattr(uploads, "STRIP_PIXELS", 500)  # many strips, a partial last one
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (61, 37, 4), dtype=np.uint8), "RGBA")
    img = img.convert(mode) if mode != "P" else img.convert("RGB").convert("P", palette=Image.ADAPTIVE, colors=16)
    if mode == "P":
        img.info["transparency"] = 3
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    ref = Image.open(io.BytesIO(buf.getvalue()))
    if ref.mode in ("RGBA", "LA") or "transparency" in ref.info:
        white = Image.new("RGBA", ref.size, (255, 255, 255, 255))
        want = Image.alpha_composite(white, ref.convert("RGBA")).convert("RGB")
    else:
        want = ref.convert("RGB")
    got = uploads.decode_image(buf.getvalue())
    assert got.mode == "RGB" and np.array_equal(np.asarray(got), np.asarray(want))


def test_serve_help_states_the_budget_and_its_defaults_match():
    from tokenspace.cli import build_parser
    from tokenspace.cli import serve as serve_cli

    assert (serve_cli.UPLOAD_PIXELS, serve_cli.MAX_UPLOAD_PIXELS) == (uploads.UPLOAD_PIXEL_BUDGET,
                                                                       uploads.MAX_UPLOAD_PIXELS)
    sv = build_parser(["serve"])._subparsers._group_actions[0].choices["serve"]
    assert "memory bound" in sv.format_help() and sv.parse_args([]).upload_pixels == uploads.UPLOAD_PIXEL_BUDGET
