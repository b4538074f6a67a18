"""Training the top of the image tower on cached trunk activations (recipe.train_image_from)."""
import numpy as np
import pytest
import torch

from tokenspace.data.grids import cache_image_grids, grids_from_trunk
from tokenspace.data.images import load_image
from tokenspace.models.towers import ImageTower, build_image_tower
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer

EFFNET = {"type": "efficientnet-lite0", "weights": None, "image_size": 64}


@pytest.fixture(scope="module")
def effnet():
    torch.manual_seed(0)
    tower = build_image_tower(EFFNET).eval()
    # non-trivial BatchNorm statistics, so an eval/train mode slip would show
    with torch.no_grad():
        for m in tower.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return tower


@pytest.mark.parametrize("at", [0, 5, 11, 15, 16])
def test_trunk_then_top_equals_the_full_tower(effnet, at):
    pixels = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        full = effnet(pixels)
        split = effnet.top(effnet.trunk(pixels, at), at)
    assert split.shape == full.shape
    torch.testing.assert_close(split, full, atol=1e-5, rtol=1e-5)


def test_split_index_reads_negative_indices_and_head(effnet):
    assert effnet.n_blocks == 16
    assert effnet.split_index(-1) == 15 and effnet.split_index(-2) == 14
    assert effnet.split_index("head") == 16 and effnet.split_index(11) == 11
    for bad in (17, -17, "last", 1.5, True):
        with pytest.raises(ValueError, match="train_image_from"):
            effnet.split_index(bad)
    assert list(effnet.top_parameters(16)) == list(effnet.net._conv_head.parameters()) + list(
        effnet.net._bn1.parameters())


def _stair(make_model):
    m = make_model(image_tower=dict(EFFNET, image_size=32))
    with torch.no_grad():  # an untrained BN head would otherwise pass gradients of ~0
        for mod in m.image_tower.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
    return m


def test_cached_trunk_path_gives_the_full_backbone_output(make_model, tiny_pairs, tmp_path):
    """Cache at block k, run the top: the same image embedding as the full tower on pixels (1e-5)."""
    m = _stair(make_model).eval()
    paths, _ = tiny_pairs
    at = m.image_tower.split_index(-2)
    trunk = cache_image_grids(m, paths, tmp_path / "f", progress=False, at=at)
    assert trunk.grids.dtype == np.float32 and trunk.grids.shape[1] == 192  # input of block 14
    with torch.no_grad():
        full = m.image_embed(m.image_grid(m.preprocess([load_image(p) for p in paths])))
        via_cache = m.image_embed(torch.from_numpy(grids_from_trunk(m, trunk.grids, at)))
        via_top = m.image_embed(m.image_tower.top(torch.from_numpy(np.array(trunk.grids)), at))
    torch.testing.assert_close(via_cache, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(via_top, full, atol=1e-5, rtol=1e-5)


def test_grid_cache_follows_the_tower_weights(make_model, tiny_pairs, tmp_path):
    """A model whose tower was trained must not be served the pretrained tower's cached grids."""
    m = make_model()
    paths, _ = tiny_pairs
    first = np.asarray(cache_image_grids(m, paths, tmp_path / "f", progress=False).grids).copy()
    with torch.no_grad():
        m.image_tower.net[-2].bias.add_(1.0)
    again = np.asarray(cache_image_grids(m, paths, tmp_path / "f", progress=False).grids)
    assert not np.allclose(first, again)
    with torch.no_grad():
        expect = m.image_grid(m.preprocess([load_image(p) for p in paths]))
    np.testing.assert_allclose(again, expect.numpy(), atol=1e-2)  # float16 storage
    assert len(list((tmp_path / "f").iterdir())) == 2  # two weight digests, two caches


def _trunk_data(m, at, n=12):
    rng = np.random.default_rng(0)
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    pixels = torch.from_numpy(rng.standard_normal((n, 3, 32, 32)).astype(np.float32))
    with torch.no_grad():
        trunk = m.image_tower.eval().trunk(pixels, at).numpy()
    return PairData.from_texts(trunk, [f"a {words[i % len(words)]}" for i in range(n)])


def _recipe(stages, **kw):
    return Recipe(name="t", model="tiny", stages=stages, batch_size=4, lambda_image=1e-3, lambda_text=1e-3, **kw)


def test_gradients_reach_the_trained_blocks_and_not_the_frozen_ones(make_model, tmp_path):
    m = _stair(make_model)
    tower = m.image_tower
    at = tower.split_index(-2)  # blocks 14, 15 + conv head
    data = _trunk_data(m, at)
    before = {k: v.clone() for k, v in tower.state_dict().items()}
    trainer = Trainer(m, _recipe([Stage("joint", steps=2, lr=1e-2)], train_image_from=-2), data, tmp_path,
                      progress=False)
    seen = {}

    def grab(_mod, _args):  # gradients as the optimizer sees them, just before its step
        seen.update({id(p): p.grad is not None and bool(p.grad.abs().sum() > 0) for p in tower.parameters()})

    orig = trainer._optimizer

    def optimizer_with_hook(params):
        opt = orig(params)
        opt.register_step_pre_hook(lambda o, a, k: grab(None, None))
        return opt

    trainer._optimizer = optimizer_with_hook
    trainer.fit()
    top = {id(p) for p in tower.top_parameters(at)}
    assert top and all(seen[i] for i in top if i in seen) and all(i in seen for i in top)
    assert not any(seen[id(p)] for p in tower.parameters() if id(p) not in top)
    after = tower.state_dict()
    for name, t in after.items():
        trained = name.startswith(("net._blocks.14.", "net._blocks.15.", "net._conv_head.", "net._bn1.")) and \
            not name.endswith(("running_mean", "running_var", "num_batches_tracked"))
        assert torch.equal(t, before[name]) != trained, name  # trained weights moved; the rest did not
    # BatchNorm statistics stay ImageNet's (eval mode): the final-grid cache computes the same forward
    for name in ("net._bn1.running_mean", "net._blocks.15._bn0.running_var"):
        assert torch.equal(after[name], before[name])


def test_stage2_freezes_the_tower_top_too(make_model, tmp_path):
    m = _stair(make_model)
    at = m.image_tower.split_index("head")
    data = _trunk_data(m, at)
    before = {k: v.clone() for k, v in m.image_tower.state_dict().items()}
    Trainer(m, _recipe([Stage("frozen-image", steps=2, lr=1e-2, freeze_image=True)], train_image_from="head"),
            data, tmp_path, progress=False).fit()
    assert all(torch.equal(v, before[k]) for k, v in m.image_tower.state_dict().items())


def test_unsplittable_tower_gives_a_clear_error():
    class Whole(ImageTower):  # a tower that does not declare blocks
        pass

    with pytest.raises(ValueError, match="cannot be split"):
        Whole().split_index(3)


def test_image_lr_scale_sets_the_tower_top_rate(make_model, tmp_path):
    m = _stair(make_model)
    at = m.image_tower.split_index(-1)
    r = _recipe([Stage("joint", steps=1, lr=1e-2)], train_image_from=-1, image_lr_scale=0.1)
    t = Trainer(m, r, _trunk_data(m, at), tmp_path, progress=False)
    opt = t._optimizer(t._trainable(r.stages[0]))
    top = {id(p) for p in m.image_tower.top_parameters(at)}
    scales = {id(p): g["lr_scale"] for g in opt.param_groups for p in g["params"]}
    assert top <= set(scales) and all(scales[i] == 0.1 for i in top)
    assert all(scales[id(p)] == 1.0 for p in m.image_transform.parameters())


def test_pipeline_trains_the_top_and_evaluates_with_it(tmp_path, tiny_pairs, tiny_vocab, make_config):
    """pipeline.train caches the trunk, trains the top and evaluates through it; a later evaluation of the
    trained model reads final grids cached under the trained weights, equal to the trained top's output."""
    import json

    from tokenspace import pipeline
    from tokenspace.data.manifest import Record, write_manifest

    paths, texts = tiny_pairs
    recs = [Record(f"i{i}", str(p), t, "train" if i % 3 else "val") for i, (p, t) in enumerate(zip(paths, texts))]
    manifest = write_manifest(recs, tmp_path / "tiny.jsonl")
    tiny_vocab.save(tmp_path / "vocab.txt")
    make_config("stair", len(tiny_vocab), vocab=str(tmp_path / "vocab.txt"),
                image_tower=dict(EFFNET, image_size=32)).save(tmp_path / "model.json")
    r = Recipe.from_dict({"name": "top", "model": str(tmp_path / "model.json"), "batch_size": 4,
                          "data": {"train": [f"{manifest}:train"], "eval": [f"{manifest}:val"]},
                          "train_image_from": -1, "stages": [{"name": "joint", "steps": 3, "lr": 1e-2}]})
    home = tmp_path / "home"
    untrained = pipeline.build_seeded(r)
    model = pipeline.train(r, tmp_path / "run", home=home, progress=False)
    assert any('"eval"' in x for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines())
    val = pipeline.load_split(f"{manifest}:val")
    at = model.image_tower.split_index(-1)
    via_top = grids_from_trunk(model, pipeline.image_grids(model, val, home, False, at=at).grids, at)
    cached = pipeline.image_grids(model, val, home, False).grids.astype(np.float32)
    before = pipeline.image_grids(untrained, val, home, False).grids.astype(np.float32)
    np.testing.assert_allclose(cached, via_top, atol=2e-3 * np.abs(via_top).max())  # float16 storage
    assert np.abs(cached - before).max() > 0.05 * np.abs(before).max()  # the top moved; the cache followed
    assert json.loads((tmp_path / "run" / "recipe.json").read_text())["train_image_from"] == -1


def test_one_cache_has_one_filler_at_a_time(make_model, tiny_pairs, tmp_path, monkeypatch):
    """A slow filler and a second one that starts while it runs, on the same cache. Without a lock both
    fill rows and each saves its own `ok` mask over the other's, so one can read back rows as unreadable
    (seen: 32 of 4,768 OpenClipart rows dropped); with it, the second waits and reads a complete cache.
    Threads, not forked processes: flock locks an open file description, so two threads that each open
    the lock file contend as two processes do, and a thread cannot be left hanging after the test (a
    forked child of a process with torch's thread pool can deadlock and keep pytest from exiting)."""
    import threading
    import time

    import tokenspace.data.images as images

    m = make_model().eval()
    paths = [str(p) for p in tiny_pairs[0]]
    real, loads, count = images.load_image, [], threading.Lock()

    def slow_load(p):
        with count:
            loads.append(p)
        time.sleep(0.1)
        return real(p)

    monkeypatch.setattr(images, "load_image", slow_load)
    results: dict[int, int] = {}

    def fill(n, start_after):
        time.sleep(start_after)
        results[n] = int(cache_image_grids(m, paths, tmp_path, batch_size=1, progress=False).ok.sum())

    threads = [threading.Thread(target=fill, args=(n, s), daemon=True) for n, s in ((0, 0.0), (1, 0.3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a filler did not finish"
    assert results == {0: len(paths), 1: len(paths)}
    assert len(loads) == len(paths)  # every image decoded once: the second filler found the cache done
