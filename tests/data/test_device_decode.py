"""The device decode path (data/device_decode.py, encode.py's ``decode="device"``) on the CPU: the same
pixels as the host path's reader and letterbox, the same encoded rows. nvJPEG itself needs a GPU: its
pixels are compared with Pillow's in benchmarks/gpu_run.py's ``encode`` section."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from tokenspace import encode
from tokenspace.data import device_decode as dd
from tokenspace.data.images import load_image
from tokenspace.data.loader import Preprocess
from tokenspace.data.webdataset import TarCollection, write_shards


def _photo(h: int, w: int, seed: int, mode: str = "RGB") -> Image.Image:
    """A smooth random picture with some hard edges (every 7th row noise): what resampling can get wrong."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 8), max(2, w // 8), 3), dtype=np.uint8)
    a = np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC)).copy()
    a[::7] = rng.integers(0, 256, a[::7].shape)
    return Image.fromarray(a).convert(mode)


def _jpeg(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


@pytest.fixture
def files(tmp_path):
    """JPEGs (baseline, progressive, grey, CMYK), PNGs, an unreadable JPEG: shrunk, enlarged, odd shapes."""
    out = []
    for i, (h, w) in enumerate([(375, 500), (40, 30), (64, 64), (333, 517), (5, 300), (100, 100)]):
        p = tmp_path / f"{i}.{'jpg' if i % 2 == 0 else 'png'}"
        if p.suffix == ".jpg":
            p.write_bytes(_jpeg(_photo(h, w, i)))
        else:
            _photo(h, w, i).save(p)
        out.append(p)
    (tmp_path / "grey.jpg").write_bytes(_jpeg(_photo(50, 70, 7, "L")))
    (tmp_path / "prog.jpg").write_bytes(_jpeg(_photo(70, 50, 8), progressive=True))
    (tmp_path / "cmyk.jpg").write_bytes(_jpeg(_photo(50, 70, 9, "CMYK")))
    whole = _jpeg(_photo(60, 80, 10))
    (tmp_path / "cut.jpg").write_bytes(whole[:len(whole) // 3])  # its header reads, its data does not
    return out + [tmp_path / n for n in ("grey.jpg", "prog.jpg", "cut.jpg", "cmyk.jpg")]


@pytest.mark.parametrize("shape", [(375, 500, 224, 168), (64, 64, 128, 128), (40, 30, 24, 32), (333, 517, 224, 144),
                                   (7, 300, 224, 5), (100, 100, 100, 50), (1, 1, 3, 2)])
def test_the_exact_resize_is_pillows_bicubic_to_the_bit(shape):
    h, w, nw, nh = shape
    img = _photo(h, w, h * w)
    want = np.asarray(img.resize((nw, nh), Image.BICUBIC))
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1)[None].double()
    got = dd.resize_exact(x, nh, nw)[0].permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(got, want)


def test_the_device_letterbox_gives_the_host_paths_pixels(files):
    prep = Preprocess(96, (127.0, 120.0, 110.0), (128.0, 60.0, 70.0))
    imgs, want = [], []
    for p in files:
        if p.name == "cut.jpg":
            continue
        img = load_image(p)
        imgs.append(torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1))
        want.append(prep(img))
    got = dd.letterbox(imgs, prep.image_size, prep.mean, prep.std)
    assert got.shape == (len(imgs), 3, 96, 96) and got.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(got, torch.stack(want))


def test_jpeg_headers_say_which_files_the_device_decodes(files):
    by_name = {p.name: dd.jpeg_header(p.read_bytes()) for p in files}
    assert by_name["0.jpg"][:5] == (375, 500, 3, 8, 0xC0)
    assert by_name["prog.jpg"].sof == 0xC2 and by_name["grey.jpg"].components == 1
    assert by_name["1.png"] is None
    assert dd.device_decodable(by_name["0.jpg"]) and dd.device_decodable(by_name["prog.jpg"])
    assert dd.device_decodable(by_name["grey.jpg"])
    assert not dd.device_decodable(by_name["cmyk.jpg"])  # 4 components: Pillow's conversion, on the host
    assert not dd.device_decodable(by_name["1.png"])
    assert dd.jpeg_header(b"") is None and dd.jpeg_header(b"\xff\xd8\xff") is None
    rgb = bytearray(_jpeg(_photo(20, 20, 1)))  # component ids 'R', 'G', 'B': an RGB-coded JPEG stays on the host
    h = dd.jpeg_header(bytes(rgb))
    at = bytes(rgb).index(bytes([0xFF, 0xC0])) + 10
    rgb[at], rgb[at + 3], rgb[at + 6] = 82, 71, 66
    assert dd.jpeg_header(bytes(rgb)).component_ids == (82, 71, 66) and h.component_ids == (1, 2, 3)
    assert not dd.device_decodable(dd.jpeg_header(bytes(rgb)))
    big = dd.JpegHeader(10_000, 5_000, 3, 8, 0xC0, None)  # over images.MAX_PIXELS: refused as the host refuses
    assert not dd.device_decodable(big)


def test_a_raw_batch_decodes_and_leaves_out_what_no_reader_can_read(files):
    ds = dd.RawFiles(files, jpeg_bytes=True)
    batch = dd.collate_raw([ds[i] for i in range(len(ds))])
    kinds = dict(zip(batch["keys"], batch["kinds"].tolist()))
    names = {str(p): p.name for p in files}
    assert {names[k] for k, v in kinds.items() if v == dd.JPEG} == {"0.jpg", "2.jpg", "4.jpg", "grey.jpg", "prog.jpg",
                                                                    "cut.jpg"}
    assert batch["skipped"] == 0 and len(batch["data"]) == int(batch["offsets"][-1])
    imgs, keep, failed = dd.decode_batch(batch, "cpu")  # no GPU: Pillow reads the JPEG bytes
    assert [names[k] for k in failed] == ["cut.jpg"]
    assert [names[batch["keys"][p]] for p in keep] == [p.name for p in files if p.name != "cut.jpg"]
    for p, img in zip(keep, imgs):
        want = np.asarray(load_image(batch["keys"][p])).transpose(2, 0, 1)
        np.testing.assert_array_equal(img.numpy(), want)


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.values, b.values)  # to the bit


@pytest.mark.parametrize("top_n", [None, 5])
@pytest.mark.parametrize("jpeg_bytes", [False, True])
def test_encode_files_gives_the_same_rows_on_the_device_and_host_paths(make_model, files, monkeypatch, top_n,
                                                                      jpeg_bytes):
    model = make_model()
    model.image_top_n = top_n
    ref, kept = encode.encode_files(model, files, batch_size=4, workers=0, decode="host")
    # jpeg_bytes: JPEGs travel as bytes to decode_batch (on a CPU, Pillow stands in for nvJPEG); else workers
    # decode them, as on a GPU without torchvision
    monkeypatch.setattr(encode, "_jpeg_bytes", lambda m, jpeg: jpeg_bytes)
    profile = {}
    got, kept2 = encode.encode_files(model, files, batch_size=4, workers=0, decode="device", profile=profile)
    assert kept2 == kept == [i for i, p in enumerate(files) if p.name != "cut.jpg"]
    _same(got, ref)
    assert set(profile) == {"read", "decode", "resize", "tower", "heads", "top-n"}
    if top_n:
        assert (np.diff(got.indptr) == top_n).all()


def test_decode_auto_is_the_host_path_on_a_cpu_and_bad_options_are_refused(make_model):
    model = make_model()
    assert encode.decode_path(model, "auto") == "host" and encode.decode_path(model, "device") == "device"
    with pytest.raises(ValueError, match="decode must be one of"):
        encode.decode_path(model, "gpu")
    with pytest.raises(ValueError, match="precision must be one of"):
        encode.encode_files(model, [], precision="int8")
    with pytest.raises(ValueError, match="jpeg must be one of"):
        encode.encode_files(model, [], decode="device", jpeg="libjpeg")
    assert not encode._jpeg_bytes(model, "nvjpeg")  # a CPU model: the workers decode (Pillow)


def test_a_lower_precision_encode_runs_and_puts_the_heads_back(make_model, files):
    model = make_model()
    model.image_top_n = 5
    ref, _ = encode.encode_files(model, files[:4], batch_size=4, workers=0, decode="device")
    got, _ = encode.encode_files(model, files[:4], batch_size=4, workers=0, decode="device", precision="bf16")
    assert model.compute_dtype == torch.float32
    assert (np.diff(got.indptr) == 5).all()
    # bf16 rounds the tower's activations: the rows move a little, they do not become others
    overlap = [len(set(ref.row(i)[0]) & set(got.row(i)[0])) for i in range(len(ref))]
    assert np.mean(overlap) >= 3


def test_encode_to_index_on_the_device_path_writes_the_host_paths_index(make_model, tmp_path, monkeypatch):
    samples = []
    for i in range(11):
        img = _photo(30 + 3 * i, 40, i)
        if i % 3:
            data = _jpeg(img)
        else:
            buf = io.BytesIO()
            img.save(buf, "PNG")
            data = buf.getvalue()
        samples.append((f"k{i:02d}", data if i != 4 else b"not an image", f"caption {i}"))
    write_shards(samples, str(tmp_path / "s-%03d.tar"), per_shard=6)
    c = TarCollection.open(str(tmp_path / "s-*.tar"))
    model = make_model()
    model.image_top_n = 4
    ref = encode.encode_to_index(model, c, tmp_path / "idx-host", tmp_path / "parts-host", part_size=4, batch_size=3,
                                 workers=0, decode="host")
    monkeypatch.setattr(encode, "_jpeg_bytes", lambda m, jpeg: True)
    got = encode.encode_to_index(model, c, tmp_path / "idx-dev", tmp_path / "parts-dev", part_size=4, batch_size=3,
                                 workers=0, decode="device")
    assert got.ids() == ref.ids() == [k for k, _, _ in samples if k != "k04"]
    _same(got.get(got.ids()), ref.get(ref.ids()))
    assert sorted(p.name for p in (tmp_path / "parts-dev").glob("part-*")) == \
        sorted(p.name for p in (tmp_path / "parts-host").glob("part-*"))
