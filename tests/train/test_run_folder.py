"""A new run never trains over a folder holding a run: without resume, Trainer.fit refuses a folder with a
checkpoint, a model/ or a non-empty log.jsonl before writing anything in it (recipe.json included)."""
import json

import numpy as np
import pytest

from tokenspace.train import scale
from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import PairData, Trainer, check_run_folder


def tiny_data(n=12):
    words = ["red dog", "blue cat", "green car", "red tree", "blue house", "green sun"]
    grids = np.random.default_rng(0).standard_normal((n, 16, 2, 2)).astype(np.float16)
    return PairData.from_texts(grids, [f"a {words[i % len(words)]}" for i in range(n)])


def recipe(*steps):
    return Recipe(name="t", model="tiny", stages=[Stage(f"s{i}", steps=n) for i, n in enumerate(steps or (2,))],
                  batch_size=4)


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_run_into_the_same_folder_is_refused_and_changes_nothing(make_model, tmp_path):
    Trainer(make_model(), recipe(), tiny_data(), tmp_path / "run", progress=False).fit()
    before = snapshot(tmp_path / "run")
    with pytest.raises(ValueError) as e:
        Trainer(make_model(), recipe(3), tiny_data(), tmp_path / "run", progress=False).fit()
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'run'} already holds a training run (checkpoint/, model/, log.jsonl)")
    assert "--resume" in msg and "--out" in msg and "\n" not in msg
    assert snapshot(tmp_path / "run") == before  # recipe.json, log.jsonl, model/ and checkpoint/ as they were
    # --resume continues it (here with a stage more): the log keeps one row per step
    Trainer(make_model(), recipe(2, 1), tiny_data(), tmp_path / "run", progress=False).fit(resume=True)
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]


@pytest.mark.parametrize("make, what", [
    (lambda d: (d / "checkpoint").mkdir() or (d / "checkpoint" / "trainer.json").write_text("{}"), "checkpoint/"),
    (lambda d: (d / "checkpoint.old").mkdir() or (d / "checkpoint.old" / "trainer.json").write_text("{}"),
     "checkpoint/"),
    (lambda d: (d / "model").mkdir(), "model/"),
    (lambda d: (d / "log.jsonl").write_text('{"step": 1}\n'), "log.jsonl"),
])
def test_each_kind_of_run_file_is_recognised(tmp_path, make, what):
    make(tmp_path)
    with pytest.raises(ValueError, match=f"already holds a training run \\({what}\\)"):
        check_run_folder(tmp_path, resume=False)
    check_run_folder(tmp_path, resume=True)


def test_folders_without_a_run_are_fine_and_a_file_is_refused(tmp_path):
    check_run_folder(tmp_path / "new", resume=False)
    (tmp_path / "log.jsonl").write_text("")  # an empty log (a run that failed before its first step)
    (tmp_path / "recipe.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    check_run_folder(tmp_path, resume=False)
    (tmp_path / "f").write_text("x")
    for resume in (False, True):
        with pytest.raises(ValueError, match="f: is a file, not a run folder"):
            check_run_folder(tmp_path / "f", resume=resume)


def test_scale_train_refuses_before_loading_any_data(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()

    def no_data(*a, **kw):  # the refusal must come first: loading data can take minutes
        raise AssertionError("data loaded")

    monkeypatch.setattr(scale, "load_pairs", no_data)
    monkeypatch.setattr(scale.pairs, "build_seeded", no_data)
    with pytest.raises(ValueError, match="already holds a training run"):
        scale.train(recipe(), tmp_path)


@pytest.mark.parametrize("damage", ["model/model.safetensors", "optimizer.pt", "trainer.json"])
def test_resuming_from_a_damaged_checkpoint_names_it(make_model, tmp_path, damage):
    Trainer(make_model(), recipe(), tiny_data(), tmp_path / "run", progress=False).fit()
    f = tmp_path / "run" / "checkpoint" / damage
    f.write_bytes(f.read_bytes()[:20])  # cut short
    with pytest.raises(ValueError) as e:
        Trainer(make_model(), recipe(2, 1), tiny_data(), tmp_path / "run", progress=False).fit(resume=True)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'run' / 'checkpoint'}: a damaged checkpoint (") and "\n" not in msg
    assert msg.endswith("move it aside to restart the run")
