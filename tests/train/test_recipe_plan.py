"""STAIR's compute split (paper Sec. 4.2) as a recipe stage plan, and the recipe's new options."""
import pytest

from tokenspace.train.recipe import Recipe, Stage, StagePlan


def test_paper_split_gives_stage3_the_dense_budget_and_stages_1_2_on_top():
    # the paper: dense CLIP 600K steps; STAIR 300K / 300K / 600K, stage 3 at 1e-4 (stages 1-2 at 1e-3)
    plan = StagePlan(dense_steps=600_000, split="paper", ratio=(1, 1, 2), lr=1e-3, stage3_lr=1e-4, warmup_steps=10_000)
    assert plan.steps() == (300_000, 300_000, 600_000)
    s = plan.stages()
    assert [x.name for x in s] == ["masked-text", "frozen-image", "joint"]
    assert [x.lr for x in s] == [1e-3, 1e-3, 1e-4]
    assert s[0].restrict_text and s[1].freeze_image and not (s[2].restrict_text or s[2].freeze_image)
    assert all(x.warmup_steps == 10_000 for x in s)
    assert sum(x.steps for x in s) == 2 * 600_000


def test_equal_split_fits_the_same_ratio_into_the_dense_budget():
    assert StagePlan(300, split="equal").steps() == (75, 75, 150)
    assert StagePlan(300, split="equal", ratio=(2, 1, 9)).steps() == (50, 25, 225)  # stair-emoji's plan
    assert StagePlan(301, split="equal", ratio=(1, 1, 1)).steps() == (100, 100, 101)  # remainder to stage 3
    assert StagePlan(300, split="paper", ratio=(2, 1, 9)).steps() == (67, 33, 300)
    assert StagePlan(300, warmup_steps=100, ratio=(0.1, 0.1, 1)).stages()[0].warmup_steps == 30  # <= the stage


@pytest.mark.parametrize("bad", [dict(split="half"), dict(ratio=(1, 1)), dict(ratio=(1, 1, 0)), dict(dense_steps=0)])
def test_bad_plans_are_rejected(bad):
    with pytest.raises(ValueError, match="plan"):
        StagePlan(**{"dense_steps": 300, **bad})


def test_recipe_from_a_plan_round_trips_and_rejects_a_conflicting_stage_list():
    r = Recipe(name="x", model="m", plan={"dense_steps": 300, "lr": 2e-3, "stage3_lr": 2e-4})
    assert [s.steps for s in r.stages] == [150, 150, 300] and r.total_steps == 600
    assert Recipe.from_dict(r.to_dict()).stages == r.stages  # recipe.json holds both; they agree
    with pytest.raises(ValueError, match="either"):
        Recipe(name="x", model="m", plan={"dense_steps": 300}, stages=[Stage("one", 10)])


def test_overriding_stages_replaces_a_recipe_file_plan():
    r = Recipe.load("stair-emoji-paper", stages=[{"name": "one", "steps": 5}])
    assert r.plan is None and [s.name for s in r.stages] == ["one"]
    r = Recipe.load("stair-emoji", plan={"dense_steps": 300})
    assert r.total_steps == 600


def test_shipped_stair_recipes_follow_the_paper_compute_split():
    dense = Recipe.load("dense-emoji").total_steps
    for name in ("stair-emoji-paper", "stair-emoji-split"):
        r = Recipe.load(name)
        assert r.stages[2].steps == dense and r.total_steps > dense, name
        assert r.stages[2].lr < r.stages[0].lr == r.stages[1].lr, name  # stage 3 at a lower lr


def test_train_image_from_options():
    r = Recipe(name="x", model="m", stages=[Stage("a", 1)], train_image_tower=True)
    assert r.train_image_from == "all"
    assert Recipe(name="x", model="m", stages=[Stage("a", 1)], train_image_from="all").train_image_tower
    assert Recipe(name="x", model="m", stages=[Stage("a", 1)], train_image_from=-2).train_image_from == -2
    for bad in ("last", 1.5, True):
        with pytest.raises(ValueError, match="train_image_from"):
            Recipe(name="x", model="m", stages=[Stage("a", 1)], train_image_from=bad)
    with pytest.raises(ValueError, match="contradicts"):
        Recipe(name="x", model="m", stages=[Stage("a", 1)], train_image_tower=True, train_image_from=3)


def test_loss_keys_for_the_flops_options():
    r = Recipe.from_dict({"name": "x", "model": "m", "stages": [{"name": "a", "steps": 1}],
                          "loss": {"lambda": 1e-3, "flops_warmup": 5, "flops_warmup_per_stage": False,
                                   "flops_reference_batch": 16384}})
    assert (r.flops_warmup, r.flops_warmup_per_stage, r.flops_reference_batch) == (5, False, 16384)
    assert Recipe(name="x", model="m", stages=[Stage("a", 1)]).flops_warmup_per_stage  # the paper's reading
    with pytest.raises(ValueError, match="flops_reference_batch"):
        Recipe(name="x", model="m", stages=[Stage("a", 1)], flops_reference_batch=1)
