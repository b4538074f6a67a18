"""The scale path's devices and workers: a training step and an encode fed by DataLoader workers, every
tensor on the model's device, no image decoded in the main process, one corrupt JPEG skipped and
counted, and a resume that stays exact while the workers prefetch ahead of the sampler."""
import io
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from tokenspace.data import webdataset as wdsmod
from tokenspace.data.webdataset import LazyPixels, TarCollection, write_shards
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.scale import ScaleTrainer
from tokenspace.train.trainer import PairData

COLORS = {"red": (220, 30, 30), "blue": (30, 30, 220), "green": (30, 200, 30)}
SHAPES = ["dog", "cat", "car", "tree"]
BAD = 7  # this sample's JPEG is cut short


def _shards(tmp_path, n=24) -> str:
    def samples():
        for i in range(n):
            c, s = list(COLORS)[i % 3], SHAPES[i % 4]
            img = np.full((32, 32, 3), 255, np.uint8)
            q = (i % 4) * 8
            img[q:q + 8, q:q + 8] = COLORS[c]
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG")
            data = buf.getvalue()
            yield f"k{i:04d}", data[:60] if i == BAD else data, f"a {c} {s}"

    write_shards(samples(), str(tmp_path / "wds" / "shard-%03d.tar"), per_shard=10, image_ext="jpg")
    return f"{tmp_path}/wds/shard-{{000..002}}.tar"


class _Devices(TorchFunctionMode):
    """Records the device of every tensor passed to or returned by a torch function."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten((args, kwargs, out))[0]:
            if isinstance(t, torch.Tensor):
                self.seen.add(t.device)
        return out


@pytest.fixture
def decode_pids(tmp_path, monkeypatch):
    """Each image decode appends its process id to a file (forked workers inherit the patch)."""
    log = tmp_path / "decode-pids.txt"
    real = wdsmod.decode_image_bytes

    def spy(data, where):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        return real(data, where)

    monkeypatch.setattr(wdsmod, "decode_image_bytes", spy)
    return lambda: {int(x) for x in log.read_text().split()} if log.exists() else set()


def _data(spec, size=32):
    c = TarCollection.open(spec)
    return PairData.from_texts(LazyPixels(c, size, (127.5,) * 3, (127.5,) * 3), c.texts)


def _recipe(steps=3, **kw):
    return Recipe(name="t", model="tiny", stages=[Stage("joint", steps=steps, lr=1e-3)], batch_size=6,
                  lambda_image=1e-3, lambda_text=1e-3, train_image_tower=True, **kw)


def test_training_steps_take_pixels_from_workers_on_the_models_device(make_model, tmp_path, decode_pids):
    data = _data(_shards(tmp_path))
    trainer = ScaleTrainer(make_model(), _recipe(), data, tmp_path / "run", progress=False, workers=1,
                           device="cpu")
    with _Devices() as mode:
        model = trainer.fit()
    assert mode.seen == {trainer.device}
    assert all(p.device == trainer.device for p in model.parameters())
    pids = decode_pids()
    assert pids and os.getpid() not in pids  # every decode ran in a worker
    assert trainer.predicted == 3 and trainer.mispredicted == 0  # prefetched batches were the sampler's
    rows = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(r["loss"]) for r in rows)


def test_the_corrupt_image_is_counted_and_blanked(make_model, tmp_path):
    data = _data(_shards(tmp_path))
    trainer = ScaleTrainer(make_model(), _recipe(steps=1), data, tmp_path / "run", progress=False,
                           workers=0, device="cpu")
    x, _, _ = trainer._inputs(np.array([BAD, 0, 1, 2, 3, 4]))
    assert trainer.skipped == 1
    # the blank stands where the JPEG was: the white square, normalised ((255 - 127.5) / 127.5 = 1)
    torch.testing.assert_close(x[0], torch.ones_like(x[0]))
    np.testing.assert_allclose(x[1:].numpy(), data.inputs[np.array([0, 1, 2, 3, 4])], atol=1e-6)


class _Stop(Exception):
    pass


def test_resume_with_prefetching_workers_is_exact(make_model, tmp_path):
    spec = _shards(tmp_path)
    r = _recipe(steps=5, checkpoint_every=2)
    full = ScaleTrainer(make_model(), r, _data(spec), tmp_path / "full", progress=False, workers=1,
                        device="cpu").fit()

    def crash(model):
        raise _Stop

    part = ScaleTrainer(make_model(), Recipe(**{**r.to_dict(), "eval_every": 3}), _data(spec),
                        tmp_path / "cut", evaluate=crash, progress=False, workers=1, device="cpu")
    with pytest.raises(_Stop):  # dies at step 3, one step after its last checkpoint (step 2)
        part.fit()
    again = ScaleTrainer(make_model(), r, _data(spec), tmp_path / "cut", progress=False, workers=1, device="cpu")
    resumed = again.fit(resume=True)
    assert again.predicted == 3 and again.mispredicted == 0  # the shadow sampler resumed in step
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_encode_parts_decodes_in_workers_on_the_models_device(make_model, tmp_path, decode_pids):
    from tokenspace.encode import encode_to_index

    spec = _shards(tmp_path)
    model = make_model()
    c = TarCollection.open(spec)
    with _Devices() as mode:
        index = encode_to_index(model, c, tmp_path / "idx", tmp_path / "parts", part_size=10, batch_size=4,
                                workers=1)
    assert mode.seen == {model.device}
    pids = decode_pids()
    assert pids and os.getpid() not in pids
    keep = [i for i in range(len(c)) if i != BAD]
    assert index.ids() == [c.keys[i] for i in keep]  # the corrupt one is not indexed
    ref = model.encode_image([c.image(i) for i in keep])
    got = index.get([c.keys[i] for i in keep])
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_allclose(got.values, ref.values, rtol=1e-5, atol=1e-6)


def _open_on_rank(rank: int, world: int, spec: str, port: int, out: str) -> None:
    import torch.distributed as dist

    from tokenspace.train.scale import _all_gather

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        c = TarCollection.open(spec, rank, world, gather=_all_gather)
        with open(f"{out}.{rank}", "w") as f:
            json.dump({"keys": c.keys, "offset": c.offset.tolist()}, f)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_share_the_header_scan_and_agree(tmp_path):
    import socket

    import torch.multiprocessing as mp

    spec = _shards(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_open_on_rank, args=(2, spec, port, str(tmp_path / "scan")), nprocs=2)
    whole = TarCollection.open(spec)
    for r in range(2):
        got = json.loads((tmp_path / f"scan.{r}").read_text())
        assert got == {"keys": whole.keys, "offset": whole.offset.tolist()}


def test_onnx_tower_encodes_as_pytorch_does(make_model, tmp_path):
    pytest.importorskip("onnxruntime")  # installed by the `onnx` extra (make install)
    pytest.importorskip("onnx")
    import torch

    from tokenspace.encode import encode_files, image_tower

    paths = []
    for i in range(6):
        p = tmp_path / f"i{i}.png"
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(p)
        paths.append(p)
    model = make_model()
    ref, kept = encode_files(model, paths, batch_size=4, workers=0)
    got, kept2 = encode_files(model, paths, batch_size=4, workers=0, tower="onnx")
    assert kept == kept2 == list(range(6))
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_allclose(got.values, ref.values, atol=1e-4)
    # the export is reused while the weights are unchanged, and redone after they change
    first = image_tower(model, "auto")
    assert first is not None and image_tower(model, "onnx") is first
    with torch.no_grad():
        next(model.image_tower.parameters()).mul_(1.5)
    again = image_tower(model, "auto")
    assert again is not first
    torch.testing.assert_close(again(torch.ones(1, 3, 32, 32)), model.image_tower(torch.ones(1, 3, 32, 32)),
                               atol=1e-4, rtol=0)


def test_onnx_tower_missing_or_mismatched_is_a_clear_error_or_a_fallback(make_model, monkeypatch, caplog):
    import sys

    from tokenspace import encode
    from tokenspace.encode import image_tower

    model = make_model()
    with pytest.raises(ValueError, match="tower must be one of 'auto', 'torch', 'onnx'"):
        image_tower(model, "tensorrt")
    assert image_tower(model, "torch") is None

    def mismatch(m):
        raise RuntimeError("the ONNX image tower differs from PyTorch by 3.0e-02 > 0.0001")

    monkeypatch.setattr(encode, "_onnxruntime_missing", lambda: None)
    monkeypatch.setattr(encode, "OnnxImageTower", mismatch)
    with pytest.raises(RuntimeError, match="could not be used: the ONNX image tower differs"):
        image_tower(model, "onnx")
    with caplog.at_level("WARNING", logger="tokenspace.encode"):
        assert image_tower(model, "auto") is None  # auto falls back to PyTorch and says why
    assert "differs from PyTorch" in caplog.text

    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(RuntimeError, match=r"pip install 'tokenspace\[onnx\]'"):
        image_tower(model, "onnx")
    assert image_tower(model, "auto") is None
