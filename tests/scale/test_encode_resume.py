"""40,000 tiny images as webdataset shards -> an index, killed mid-way and resumed."""
import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from tokenspace.data.webdataset import LazyPixels, TarCollection, expand_shards, write_shards
from tokenspace.encode import encode_to_index
from tokenspace.index import InvertedIndex
from tokenspace.sparse import SparseBatch

# 20 parts over 10 shards, as at 100,000 images: the kill lands mid-way and the resume crosses shard ends
N, PER_SHARD, PART = 40_000, 4_000, 2_000


def _blobs(k=512, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        buf = io.BytesIO()
        # PPM: webdataset's uncompressed format, decoded ~3x faster than PNG (the test's main cost)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buf, format="PPM")
        out.append(buf.getvalue())
    return out


def _samples(n, blobs):
    words = ["red dog", "blue cat", "green car", "big tree"]
    for i in range(n):
        yield f"s{i:07d}", blobs[(i * 7919) % len(blobs)], f"a {words[i % 4]}"


def _model(tmp_path, tiny_vocab):
    import torch

    from tokenspace.models.config import ModelConfig
    from tokenspace.models.registry import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(name="enc", family="stair", image_tower={"type": "tiny-cnn", "channels": 16, "image_size": 8},
                      text_tower={"type": "transformer-mlm", "vocab_size": len(tiny_vocab), "width": 16,
                                  "layers": 1, "heads": 2, "max_len": 16}, max_text_len=16)
    model = build_model(cfg, vocab=tiny_vocab)
    with torch.no_grad():
        model.image_bias.add_(1.0)  # a few active tokens per image, so rows differ
    return model.save_pretrained(tmp_path / "model")


def test_tar_collection_reads_webdataset_naming(tmp_path):
    blobs = _blobs(4)
    paths = write_shards(((f"dir/k{i}.x", blobs[i % 4], f"text {i}") for i in range(5)), str(tmp_path / "s-%03d.tar"),
                         per_shard=2)
    assert expand_shards(str(tmp_path / "s-{000..002}.tar")) == paths
    with open(paths[0], "ab") as f:  # trailing junk after the end-of-archive blocks is ignored
        f.write(b"\0" * 1024)
    c = TarCollection.open(str(tmp_path / "s-*.tar"))
    assert c.keys == [f"dir/k{i}" for i in range(5)] and c.texts[3] == "text 3"
    assert c.image(2).size == (8, 8)
    px = LazyPixels(c, 8, (127.5,) * 3, (127.5,) * 3)[np.array([0, 4])]
    assert px.shape == (2, 3, 8, 8) and px.dtype == np.float32


@pytest.mark.slow
def test_encode_40k_images_killed_and_resumed_equals_an_uninterrupted_run(tmp_path, tiny_vocab):
    t0 = time.time()
    pattern = str(tmp_path / "shards" / "shard-%06d.tar")
    shards = write_shards(_samples(N, _blobs()), pattern, per_shard=PER_SHARD, image_ext="ppm")
    spec = str(tmp_path / "shards" / "shard-{000000..000009}.tar")
    model_dir = _model(tmp_path, tiny_vocab)
    t_gen = time.time() - t0

    # 1. a run killed after a few parts reached the index
    idx, work = tmp_path / "index", tmp_path / "parts"
    cmd = [sys.executable, "-m", "tokenspace.cli", "encode", "--model", str(model_dir), "--shards", spec,
           "--index", str(idx), "--work", str(work), "--part-size", str(PART),
           # the library calls below encode with PyTorch's tower; the command's default (auto) would take
           # ONNX Runtime's, equal only to 1e-4 (tests/train/test_scale_loader.py), not bit for bit
           "--tower", "torch"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        man = idx / "MANIFEST.json"
        if man.exists() and len(json.loads(man.read_text())["segments"]) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = InvertedIndex.load(idx)
    assert 0 < len(partial) < N
    killed_parts = len(list(work.glob("part-*.npz")))

    # 2. the rerun finishes the job
    from tokenspace.models.registry import load

    model = load(model_dir)
    resumed = encode_to_index(model, TarCollection.open(shards), idx, work, part_size=PART)
    # 3. the uninterrupted reference
    reference = encode_to_index(model, TarCollection.open(spec), tmp_path / "ref", tmp_path / "ref-parts",
                                part_size=PART)
    for index in (resumed, InvertedIndex.load(idx)):
        ids = index.ids()
        assert len(ids) == len(set(ids)) == len(index) == N  # every row once
        assert ids == reference.ids()
        assert index.stats()["nnz"] == reference.stats()["nnz"]
    pick = [f"s{i:07d}" for i in np.random.default_rng(1).choice(N, 500, replace=False)]
    a, b = resumed.get(pick), reference.get(pick)
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.values, b.values)
    q = SparseBatch.from_dense(np.eye(len(tiny_vocab), dtype=np.float32)[8:12])
    for ha, hb in zip(resumed.search(q, k=5), reference.search(q, k=5)):
        assert [h.id for h in ha] == [h.id for h in hb]
    print(f"\ngenerate {t_gen:.1f}s, killed after {killed_parts} parts, total {time.time() - t0:.1f}s")


def test_cli_encode_indexes_shards_and_resumes_as_a_noop(tmp_path, tiny_vocab, capsys):
    """`tokenspace encode` is the library's encode_to_index: same rows, and a rerun adds nothing."""
    from tokenspace.cli import main

    model_dir = _model(tmp_path, tiny_vocab)
    write_shards(_samples(60, _blobs(8)), str(tmp_path / "c-%03d.tar"), per_shard=25)
    argv = ["encode", "--model", str(model_dir), "--shards", str(tmp_path / "c-{000..002}.tar"),
            "--index", str(tmp_path / "idx"), "--part-size", "16"]
    assert main(argv) == 0
    assert "indexed 60 of 60" in capsys.readouterr().out
    assert main(argv) == 0  # every part is already on disk and in the index
    index = InvertedIndex.load(tmp_path / "idx")
    assert len(index) == 60 and sorted(index.ids()) == [f"s{i:07d}" for i in range(60)]
    assert len(list((tmp_path / "idx.parts").glob("part-*.npz"))) == 4
