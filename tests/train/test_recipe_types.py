"""Recipe values are type-checked when the recipe is built: a wrong type is one ValueError naming the key
and the type it wants, never a raw TypeError half-way into training (or after it started)."""
import json

import pytest

from tokenspace.train.recipe import Recipe, Stage, StagePlan, parse_overrides

BASE = {"name": "t", "model": "stair-emoji", "batch_size": 4, "data": {"train": ["emoji:train"]},
        "stages": [{"name": "c", "steps": 2}]}


def load_with(tmp_path, *sets):
    p = tmp_path / "r.yaml"
    p.write_text(json.dumps(BASE))  # JSON is YAML
    return Recipe.load(p, **parse_overrides(sets))


@pytest.mark.parametrize("option, words", [
    ("batch_size=abc", "recipe batch_size: expected an integer, not 'abc'"),
    ("batch_size=", "recipe batch_size: expected an integer, not null"),
    ("batch_size=2.5", "recipe batch_size: expected an integer, not 2.5"),
    ("batch_size=true", "recipe batch_size: expected an integer, not true"),
    ("seed=abc", "recipe seed: expected an integer, not 'abc'"),
    ("stages=5", "recipe stages: expected a list, not 5"),
    ("stages=[5]", "recipe stages[0]: expected a mapping with keys ['name', 'steps'"),
    ("stages=[{name: c}]", "recipe stages[0] ('c'): missing ['steps']"),
    ("stages=[{name: c, steps: 2, foo: 1}]", "recipe stages[0] ('c'): unknown keys ['foo']"),
    ("stages=[{name: c, steps: x}]", "recipe stage 'c' steps: expected an integer, not 'x'"),
    ("stages=[{name: c, steps: 2, lr: 1e-3}]", "recipe stage 'c' lr: expected a number, not '1e-3' (YAML reads"),
    ("loss=5", "recipe loss: expected a mapping"),
    ("data=5", "recipe data: expected a mapping, not 5"),
    ("data.train=5", "recipe data.train: expected a data spec"),
    ("data.eval=[5]", "recipe data.eval: expected a data spec"),
    ("name.x=1", "recipe name: expected a string, not {'x': 1}"),
    ("plan=7", "recipe plan: expected a plan mapping"),
    ("plan={steps: 3}", "recipe plan: unknown keys ['steps']"),
    ("plan={dense_steps: 3, ratio: [1, 2]}", "recipe plan.ratio: expected a list of 3 numbers, not [1, 2]"),
    ("betas=[0.9]", "recipe betas: expected a list of 2 numbers"),
    ("lambda_image=abc", "recipe lambda_image: expected a number, not 'abc'"),
    ("train_image_tower=1", "recipe train_image_tower: expected true or false, not 1"),
    ("flops_reference_batch=2.5", "recipe flops_reference_batch: expected an integer or null, not 2.5"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key(tmp_path, option, words):
    with pytest.raises(ValueError) as e:
        load_with(tmp_path, option)
    assert str(e.value).startswith(words) and "\n" not in str(e.value)


def test_good_values_still_load_and_ints_count_as_floats(tmp_path):
    r = load_with(tmp_path, "lambda_image=1", "stages=[{name: c, steps: 2, lr: 1}]", "data.eval=emoji:test",
                  "flops_reference_batch=16", "train_image_from=-2")
    assert r.lambda_image == 1.0 and isinstance(r.lambda_image, float)
    assert r.stages == [Stage("c", 2, 1.0)] and isinstance(r.stages[0].lr, float)
    assert r.data["eval"] == "emoji:test" and r.flops_reference_batch == 16 and r.train_image_from == -2
    plan = load_with(tmp_path, "plan={dense_steps: 4, ratio: [1, 1, 2]}").plan
    assert plan == StagePlan(4, ratio=(1.0, 1.0, 2.0))


@pytest.mark.parametrize("text, words", [("", "not an empty file"), ("- a\n- b\n", "not ['a', 'b']"),
                                         ("just a string\n", "not 'just a string'")])
def test_a_recipe_file_that_is_not_a_mapping_is_named(tmp_path, text, words):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        Recipe.load(p)
    assert str(e.value).startswith(f"{p}: a recipe is a mapping") and words in str(e.value)


def test_from_dict_refuses_a_non_mapping():
    with pytest.raises(ValueError, match="^a recipe is a mapping"):
        Recipe.from_dict([1, 2])


def test_json_recipes_load_and_a_saved_recipe_json_round_trips(tmp_path):
    p = tmp_path / "ok.json"
    p.write_text(json.dumps(BASE))
    r = Recipe.load(p)
    assert r.batch_size == 4 and r.stages == [Stage("c", 2)]
    # a run's recipe.json (json.dumps: eps is 1e-08, which YAML 1.1 would read as a string)
    saved = tmp_path / "recipe.json"
    saved.write_text(json.dumps(Recipe.load("stair-emoji").to_dict(), indent=2))
    assert Recipe.load(saved) == Recipe.load("stair-emoji")
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": ')
    with pytest.raises(ValueError, match=f"^{broken}: not valid JSON"):
        Recipe.load(broken)


def test_an_unknown_recipe_name_says_what_a_recipe_is():
    with pytest.raises(KeyError, match=r"\.yaml/\.yml/\.json file"):
        Recipe.load("no-such-recipe")
