"""A damaged model folder is a one-line error naming the damaged file, not a bare library error."""

import pytest

import tokenspace
from tokenspace.models.config import ModelConfig


@pytest.fixture
def folder(make_model, tmp_path):
    return make_model("stair").save_pretrained(tmp_path / "m")


def test_truncated_weights_name_the_file(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError) as e:
        tokenspace.load(folder)
    assert str(e.value).startswith(f"{weights}: not a readable safetensors file (truncated or damaged): ")
    weights.write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        tokenspace.load(folder)


def test_weights_of_another_shape_name_the_file(folder, make_model):
    other = make_model("stair", image_tower={"type": "tiny-cnn", "channels": 8, "image_size": 32}).save_pretrained(folder.parent / "other")
    (folder / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    with pytest.raises(ValueError) as e:
        tokenspace.load(folder)
    assert str(e.value).startswith(f"{folder / 'model.safetensors'}: weights do not match") and "\n" not in str(e.value)


@pytest.mark.parametrize("text, words", [("[]", "expected a JSON object (the model config's fields), not an array"),
                                         ("null", "expected a JSON object"),
                                         ("{}", "missing model config keys: ['name', 'family'"),
                                         ("{not json", "Expecting property name"),
                                         ('{"name": "x", "family": "stair", "image_tower": {}, "text_tower": {}, '
                                          '"logit_scale_init": "big"}', "not supported")])
def test_a_bad_config_json_names_the_file(folder, text, words):
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError) as e:
        tokenspace.load(folder)
    assert str(e.value).startswith(f"{folder / 'config.json'}: ") and words in str(e.value)
    with pytest.raises(ValueError, match="config.json: "):
        ModelConfig.load(folder / "config.json")
