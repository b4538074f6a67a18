"""Checkpoints inside a stage: a Ctrl-C loses at most ``checkpoint_every`` steps (default 50;
they came only at stage ends: a Ctrl-C at step 165 of 300 lost 90 steps); a resume says where it resumes,
refuses a changed stage plan, and says so when there is nothing to resume."""
from __future__ import annotations

import json
import logging

import pytest
from test_run_folder import tiny_data  # tests/train/test_run_folder.py

from tokenspace.train.recipe import Recipe, Stage
from tokenspace.train.trainer import Trainer


def recipe(*stages, **kw):
    return Recipe(name="t", model="tiny", batch_size=4, stages=[Stage(n, steps=s) for n, s in stages], **kw)


def interrupted_at(make_model, folder, plan, at: int):
    """A run of ``plan`` stopped by a Ctrl-C during its step ``at`` (1-based)."""
    trainer = Trainer(make_model(), plan, tiny_data(), folder, progress=False)
    step, calls = trainer.step, []

    def step_or_interrupt(*a, **kw):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return step(*a, **kw)

    trainer.step = step_or_interrupt
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()


def test_a_ctrl_c_loses_at_most_checkpoint_every_steps(make_model, tmp_path):
    assert recipe(("a", 1)).checkpoint_every == 50  # the default
    interrupted_at(make_model, tmp_path / "run", recipe(("a", 120)), at=78)
    state = json.loads((tmp_path / "run" / "checkpoint" / "trainer.json").read_text())
    assert (state["stage"], state["step"]) == (0, 50)  # 27 steps lost, not 77


def test_resume_says_where_and_refuses_a_changed_plan(make_model, tmp_path, caplog):
    run = tmp_path / "run"
    interrupted_at(make_model, run, recipe(("a", 6), ("b", 4), checkpoint_every=2), at=9)  # in stage b
    with caplog.at_level(logging.INFO, logger="tokenspace.train.trainer"):
        for changed, words in (((("a", 6), ("b", 5)), "stage 2 (b): steps 4 then, 5 now"),
                               ((("a", 6), ("c", 4)), "stages a (6 steps), b (4 steps) then, a (6 steps), c (4")):
            with pytest.raises(ValueError, match="another stage plan") as e:
                Trainer(make_model(), recipe(*changed, checkpoint_every=2), tiny_data(), run,
                        progress=False).fit(resume=True)
            assert words in str(e.value) and "--out" in str(e.value)
        Trainer(make_model(), recipe(("a", 6), ("b", 4), checkpoint_every=2), tiny_data(), run,
                progress=False).fit(resume=True)
    assert f"resuming {run} at stage 2 of 2 (b), step 2 of 4: step 8 of 10" in caplog.text
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == list(range(1, 11))


def test_resume_with_nothing_to_resume_says_so(make_model, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="tokenspace.train.trainer"):
        Trainer(make_model(), recipe(("a", 2)), tiny_data(), tmp_path / "new", progress=False).fit(resume=True)
    assert f"{tmp_path / 'new'} holds no checkpoint; training from the start" in caplog.text
