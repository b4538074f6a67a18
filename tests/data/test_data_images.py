import pytest
from PIL import Image

from tokenspace.data.images import ImageLoadError, load_image, load_images

SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10">'
       '<rect x="0" y="0" width="10" height="10" fill="#ff0000"/></svg>')


@pytest.fixture
def files(tmp_path):
    rgba = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    rgba.putpixel((1, 1), (0, 0, 255, 255))
    rgba.save(tmp_path / "alpha.png")
    Image.new("RGB", (6, 4), (10, 200, 10)).save(tmp_path / "photo.jpg", quality=95)
    Image.new("L", (5, 5), 128).save(tmp_path / "gray.webp")
    pal = Image.new("P", (4, 4), 0)
    pal.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    pal.info["transparency"] = 0
    pal.save(tmp_path / "pal.gif", transparency=0)
    (tmp_path / "pic.svg").write_text(SVG)
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20)
    (tmp_path / "empty.png").write_bytes(b"")
    good = (tmp_path / "alpha.png").read_bytes()
    (tmp_path / "truncated.png").write_bytes(good[: len(good) // 2])
    return tmp_path


def test_transparent_png_on_white(files):
    img = load_image(files / "alpha.png")
    assert img.mode == "RGB" and img.getpixel((0, 0)) == (255, 255, 255)
    assert img.getpixel((1, 1)) == (0, 0, 255)


def test_jpeg_webp_gif(files):
    jpg = load_image(files / "photo.jpg")
    assert jpg.size == (6, 4) and jpg.mode == "RGB" and abs(jpg.getpixel((2, 2))[1] - 200) < 10
    assert load_image(files / "gray.webp").getpixel((0, 0)) == (128, 128, 128)
    assert load_image(files / "pal.gif").getpixel((0, 0)) == (255, 255, 255)  # transparent index -> white


def test_svg_rendered_keeping_aspect(files):
    img = load_image(files / "pic.svg", svg_size=64)
    assert img.size == (64, 32) and img.mode == "RGB"
    assert img.getpixel((5, 5)) == (255, 0, 0) and img.getpixel((60, 5)) == (255, 255, 255)


@pytest.mark.parametrize("name, reason", [
    ("corrupt.png", ""), ("empty.png", "empty file"), ("truncated.png", ""), ("missing.png", "not found"),
])
def test_bad_files_raise_with_path_and_reason(files, name, reason):
    with pytest.raises(ImageLoadError) as e:
        load_image(files / name)
    assert e.value.path.endswith(name) and reason in e.value.reason and name in str(e.value)


def test_load_images_skips_and_counts(files):
    names = ["alpha.png", "corrupt.png", "photo.jpg", "empty.png", "pic.svg"]
    res = load_images([files / n for n in names], size=16)
    assert res.kept == [0, 2, 4] and len(res.images) == 3 and res.n_skipped == 2
    assert [i for i, _, _ in res.skipped] == [1, 3]
    assert all(im.size == (16, 16) for im in res.images)


def test_oversized_raster_refused_before_decoding(files):
    with pytest.raises(ImageLoadError, match="too large to decode \\(8 x 8 pixels\\)"):
        load_image(files / "alpha.png", max_pixels=63)
    assert load_image(files / "alpha.png", max_pixels=64).size == (8, 8)


def test_a_large_svg_renders_without_a_decompression_bomb_warning(files, monkeypatch):
    """An SVG is rendered once at its natural size to learn its aspect: that rendering is ours and only
    its header is read, so Pillow's bomb warning (above MAX_IMAGE_PIXELS) is not the user's business."""
    import warnings

    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)  # the 20 x 10 drawing's 200 pixels warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        img = load_image(files / "pic.svg", svg_size=8)  # 8 x 4: under the limit
    assert img.size == (8, 4)
