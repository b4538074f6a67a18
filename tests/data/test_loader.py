"""DataLoader input pipelines (data/loader.py) on tiny shards written here, one JPEG corrupt."""
import io
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from tokenspace.data.loader import (
    Preprocess,
    SkipCounter,
    files_loader,
    loader_options,
    rows_loader,
    stream_shards,
)
from tokenspace.data.preprocess import pixels
from tokenspace.data.webdataset import TarCollection, write_shards

PREP = Preprocess(16, (120.0, 110.0, 100.0), (60.0, 50.0, 40.0))
BAD = "k0005"  # the corrupt JPEG


def _image(i: int) -> Image.Image:
    rng = np.random.default_rng(i)
    # non-square: the letterbox of data.preprocess must run in the worker
    return Image.fromarray(rng.integers(0, 255, (20, 12 + i % 5, 3), dtype=np.uint8))


def _jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    _image(i).save(buf, format="JPEG", quality=95)
    data = buf.getvalue()
    return data[:40] + b"\x00garbage" if f"k{i:04d}" == BAD else data


@pytest.fixture
def shards(tmp_path):
    samples = ((f"k{i:04d}", _jpeg(i), f"caption {i}") for i in range(14))
    paths = write_shards(samples, str(tmp_path / "s-%02d.tar"), per_shard=4, image_ext="jpg")
    assert len(paths) == 4
    return str(tmp_path / "s-{00..03}.tar")


def _expected(key: str) -> torch.Tensor:
    i = int(key[1:])
    img = Image.open(io.BytesIO(_jpeg(i))).convert("RGB")  # the decoded JPEG, as the pipeline sees it
    return pixels([img], PREP.image_size, PREP.mean, PREP.std)[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_loader_decodes_in_order_and_counts_the_corrupt_sample(shards, workers):
    c = TarCollection.open(shards)
    batches = list(rows_loader(c, PREP, batch_size=5, workers=workers))
    rows = torch.cat([b["index"] for b in batches]).tolist()
    assert rows == [i for i in range(14) if c.keys[i] != BAD]
    assert sum(b["skipped"] for b in batches) == 1
    for b in batches:
        assert b["pixels"].shape == (len(b["index"]), 3, 16, 16)
        for k, x in zip(b["keys"], b["pixels"]):
            torch.testing.assert_close(x, _expected(k), rtol=0, atol=1e-5)


def test_rows_loader_blank_keeps_the_batch_shape(shards):
    c = TarCollection.open(shards)
    (b,) = list(rows_loader(c, PREP, rows=[4, 5, 6], batch_size=3, workers=0, on_bad="blank"))
    assert b["index"].tolist() == [4, 5, 6] and b["skipped"] == 1
    torch.testing.assert_close(b["pixels"][1], PREP.blank())


def test_stream_shards_splits_by_rank_and_worker(shards):
    seen, skipped = [], 0
    for rank in range(2):
        keys = []
        for b in stream_shards(shards, PREP, batch_size=3, workers=2, rank=rank, world=2):
            keys += b["keys"]
            skipped += b["skipped"]
            assert b["pixels"].shape[1:] == (3, 16, 16)
            assert all(t == f"caption {int(k[1:])}" for k, t in zip(b["keys"], b["texts"]))
        # rank r reads shards r and r + 2 (4 samples each, the last shard 2)
        shard_of = {int(k[1:]) // 4 for k in keys}
        assert shard_of == {rank, rank + 2}
        seen += keys
    assert sorted(seen) == [f"k{i:04d}" for i in range(14) if f"k{i:04d}" != BAD]
    assert skipped == 1


def test_stream_shards_shuffle_buffer_permutes_but_keeps_every_sample(shards):
    plain = [k for b in stream_shards(shards, PREP, batch_size=4, workers=0) for k in b["keys"]]
    mixed = [k for b in stream_shards(shards, PREP, batch_size=4, workers=0, shuffle=8, seed=1)
             for k in b["keys"]]
    assert sorted(plain) == sorted(mixed) and plain != mixed


def test_stream_shards_missing_shard_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        stream_shards(str(tmp_path / "x-{0..1}.tar"), PREP)


def test_files_loader_skips_and_logs_a_corrupt_file(tmp_path, caplog):
    paths = []
    for i in range(4):
        p = tmp_path / f"f{i}.jpg"
        p.write_bytes(_jpeg(i) if i != 2 else b"not a jpeg")
        paths.append(p)
    counter = SkipCounter("images")
    with caplog.at_level(logging.WARNING, logger="tokenspace.data"):
        batches = [counter(b) for b in files_loader(paths, PREP, batch_size=3, workers=0)]
    assert torch.cat([b["index"] for b in batches]).tolist() == [0, 1, 3]
    assert counter.total == 1
    assert any("f2.jpg" in r.getMessage() for r in caplog.records)


def test_pinned_memory_only_for_gpu_consumers():
    assert loader_options("cuda", 2)["pin_memory"] is True
    assert loader_options("cpu", 2)["pin_memory"] is False
    assert "prefetch_factor" not in loader_options("cpu", 0)
    with pytest.raises(ValueError, match="workers"):
        loader_options("cpu", -1)


def test_transparent_png_in_a_shard_is_composited_on_white_as_from_a_file(tmp_path):
    from tokenspace.data.images import load_image

    img = Image.new("RGBA", (8, 8), (0, 0, 0, 0))
    img.putpixel((3, 3), (200, 10, 10, 255))
    img.save(tmp_path / "t.png")
    write_shards([("t", (tmp_path / "t.png").read_bytes(), "dot")], str(tmp_path / "p-%d.tar"), image_ext="png")
    from_tar = TarCollection.open(str(tmp_path / "p-0.tar")).image(0)
    assert from_tar.getpixel((0, 0)) == (255, 255, 255)
    assert list(from_tar.getdata()) == list(load_image(tmp_path / "t.png").getdata())


def test_ranks_scan_their_share_of_the_headers_and_merge_to_the_same_collection(shards):
    whole = TarCollection.open(shards)
    shard_list = whole.shards
    parts = [TarCollection._scan_part(shard_list, r, 3) for r in range(3)]
    assert sorted(si for p in parts for si in p) == [0, 1, 2, 3]  # each shard scanned by one rank
    merged = TarCollection.open(shards, rank=1, world=3, gather=lambda own: [parts[0], own, parts[2]])
    assert merged.keys == whole.keys and merged.texts == whole.texts
    np.testing.assert_array_equal(merged.offset, whole.offset)
    np.testing.assert_array_equal(merged.shard_of, whole.shard_of)
    with pytest.raises(ValueError, match="gather"):
        TarCollection.open(shards, rank=0, world=2)


def test_a_shard_pattern_that_matches_nothing_is_named(shards, tmp_path):
    # beside a pattern that matches: the collection must not silently lack that pattern's shards
    with pytest.raises(ValueError, match=r"nomatch-\*\.tar: no shard file matches this pattern"):
        TarCollection.open([shards, str(tmp_path / "nomatch-*.tar")])
