"""Recipe overrides are read, never altered: one overrides dict can build several recipes; `--set KEY=VALUE`
has one parser, shared by the CLI and torchrun's entry."""
import pytest

from tokenspace.train import distributed
from tokenspace.train.recipe import Recipe, parse_overrides


def test_loss_override_is_not_consumed():
    loss = {"lambda_image": 1e-2, "lambda_text": 1e-2, "flops_warmup": 100}
    first = Recipe.load("stair-emoji", loss=loss)
    second = Recipe.load("stair-emoji", loss=loss)
    assert loss == {"lambda_image": 1e-2, "lambda_text": 1e-2, "flops_warmup": 100}
    assert first.lambda_image == second.lambda_image == 1e-2
    assert first.flops_warmup == second.flops_warmup == 100


def test_set_values_are_yaml_the_recipes_own_syntax():
    got = parse_overrides(["batch_size=64", "loss={lambda: 1.0e-2}", "name=a=b", "stages=[]", "precision="])
    assert got == {"batch_size": 64, "loss": {"lambda": 1e-2}, "name": "a=b", "stages": [], "precision": None}
    assert parse_overrides(None) == {} and parse_overrides([]) == {}
    assert parse_overrides(["batch_size=8", "batch_size=16"]) == {"batch_size": 16}  # the last one wins, as argparse


def test_bad_set_options_are_one_line_errors_naming_the_option():
    for bad in ("batch_size", "=64", " =64"):
        with pytest.raises(ValueError, match="^--set takes KEY=VALUE, got "):
            parse_overrides([bad])
    with pytest.raises(ValueError) as e:
        parse_overrides(["batch_size=[unclosed"])
    msg = str(e.value)
    assert msg.startswith("--set batch_size=[unclosed: not a YAML value (") and "line" in msg and "\n" not in msg


def test_torchrun_entry_reports_a_bad_set_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as e:
        distributed.main(["--recipe", "stair-emoji", "--out", str(tmp_path), "--set", "batch_size"])
    assert str(e.value.code) == "--set takes KEY=VALUE, got 'batch_size'"


def test_dotted_set_keys_change_one_field_and_keep_the_rest():
    # stair-emoji: model "stair-emoji" (a config name), loss {lambda: 1e-3, flops_warmup: 100, ...}
    base = Recipe.load("stair-emoji")
    got = parse_overrides(["model.extra.image_revive_grad=0.5", "loss.flops_warmup=7", "loss.lambda_image=2.0e-2"])
    assert got == {"model": {"extra": {"image_revive_grad": 0.5}},
                   "loss": {"flops_warmup": 7, "lambda_image": 2e-2}}
    r = Recipe.load("stair-emoji", **got)
    assert r.model == {"config": "stair-emoji", "extra": {"image_revive_grad": 0.5}}
    assert r.flops_warmup == 7 and r.flops_warmup_per_stage == base.flops_warmup_per_stage
    # the side given on its own wins over the file's `lambda`, the other side keeps it
    assert (r.lambda_image, r.lambda_text) == (2e-2, base.lambda_text)
    # a plain mapping still replaces the file's: the file's flops_warmup is gone (the default)
    plain = Recipe.load("stair-emoji", **parse_overrides(["loss={lambda: 1.0e-2}"]))
    assert plain.lambda_image == plain.lambda_text == 1e-2 and plain.flops_warmup != 100


def test_dotted_set_key_on_a_key_the_file_lacks_or_unknown():
    r = Recipe.load("stair-emoji", **parse_overrides(["data.eval=[emoji:val]"]))
    assert r.data["eval"] == ["emoji:val"] and r.data["train"] == Recipe.load("stair-emoji").data["train"]
    with pytest.raises(ValueError, match="unknown recipe keys: \\['nonsense'\\]"):
        Recipe.load("stair-emoji", **parse_overrides(["nonsense.x=1"]))


def test_bad_dotted_set_options_are_one_line_errors():
    for bad in ("model..extra=1", "model.=1", ".model=1"):
        with pytest.raises(ValueError, match="^--set takes KEY=VALUE, got "):
            parse_overrides([bad])
    with pytest.raises(ValueError, match="^--set batch_size.x=1: batch_size is set to 64 by an earlier --set, not to a mapping$"):
        parse_overrides(["batch_size=64", "batch_size.x=1"])
