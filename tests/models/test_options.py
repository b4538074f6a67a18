"""Per-family typed options (models/options.py): ModelConfig.extra is checked against the family's
declared options when a config is built or loaded, so a misspelt key is an error, never a default."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar  # at module level: dataclasses spot a string "ClassVar" annotation by it

import pytest

from tokenspace.models.config import ModelConfig, list_configs
from tokenspace.models.options import (
    FAMILY_OPTIONS,
    SparseClipOptions,
    StairOptions,
    TaggerOptions,
    VisualSpartaOptions,
)

REPO = Path(__file__).resolve().parents[2]


def test_every_shipped_config_and_release_folder_still_loads():
    # the format did not change: extra stays a dict in config.json, parsed into the family's options
    for name in list_configs():
        config = ModelConfig.load(name)
        assert isinstance(config.options, FAMILY_OPTIONS[config.family])
    folders = sorted(REPO.glob("models/*/config.json"))
    assert folders, "the release model folder is part of the repo"
    for path in folders:
        ModelConfig.load(path)
    assert ModelConfig.load("stair-emoji").options == StairOptions(image_revive_grad=0.1)
    assert ModelConfig.load("sparse-clip-vitb32").options == SparseClipOptions(text_pooling="eos")
    assert ModelConfig.load("visualsparta-paper").options.ffn == 3072


@pytest.mark.parametrize("family, known", [
    ("sparse-clip", "relu, topk, l1, text_pooling"),
    ("stair", "image_head_mid, image_bias_init, image_revive_grad, image_top_n, text_top_n"),
    ("visualsparta", "layers, heads, ffn, dropout, max_cells, bias_init, top_n, label_fragments"),
    ("dense", ""),
])
def test_an_unknown_key_names_the_family_and_its_options(make_config, family, known):
    with pytest.raises(ValueError) as e:
        make_config(family, extra={"relu_": False})
    assert str(e.value).startswith(f"unknown option 'relu_' for family {family} (known: {known})")
    assert "\n" not in str(e.value)


def test_a_close_match_is_suggested(make_config):
    with pytest.raises(ValueError, match=r"known: relu, topk, l1, text_pooling\); did you mean 'relu'\?$"):
        make_config("sparse-clip", extra={"relu_": False})
    with pytest.raises(ValueError, match=r"^unknown options 'topK', 'l2' for family sparse-clip .*'topk'"):
        make_config("sparse-clip", extra={"topK": 4, "l2": 1.0})


def test_values_are_typed_and_checked_when_the_config_is_built(make_config):
    for family, extra, match in [
        ("sparse-clip", {"relu": "yes"}, "relu must be true or false"),
        ("sparse-clip", {"topk": 2.5}, "topk must be an integer"),
        ("sparse-clip", {"text_pooling": "cls"}, "text_pooling must be one of"),
        ("stair", {"image_bias_init": "zero"}, "image_bias_init must be 'mlm' or a number"),
        ("stair", {"image_revive_grad": "0.1"}, "image_revive_grad must be a number"),
        ("visualsparta", {"layers": 1.5}, "layers must be an integer"),
        ("visualsparta", {"label_fragments": {"kk": 2}}, "unknown option 'kk' for visualsparta extra.label_fragments"),
        ("tagger", {"pool": "max"}, "tagger pool must be one of"),
    ]:
        with pytest.raises(ValueError, match=match):
            make_config(family, extra=extra)
    # YAML and JSON spell 1.0 as 1: numbers are converted to the declared type
    assert make_config("stair", extra={"image_revive_grad": 1}).options.image_revive_grad == 1.0
    assert isinstance(make_config("stair", extra={"image_revive_grad": 1}).options.image_revive_grad, float)
    assert VisualSpartaOptions.parse({"layers": 3.0}).layers == 3
    assert TaggerOptions.parse({}).pool == "cells"


def test_a_config_file_with_a_typo_is_named(tmp_path):
    d = ModelConfig.load("sparse-clip-emoji").to_dict()
    d["extra"] = {"topk_": 8}
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=rf"^{path}: unknown option 'topk_' for family sparse-clip"):
        ModelConfig.load(path)


def test_a_registered_family_is_checked_against_its_declared_options(make_config, tiny_vocab):
    from tokenspace.models.dense import DenseModel
    from tokenspace.models.options import FamilyOptions
    from tokenspace.models.registry import FAMILIES, build_model, register_family

    @dataclass(frozen=True)
    class WideOptions(FamilyOptions):
        family: ClassVar[str] = "wide-dense"
        width_mult: int = 2

    class WideDense(DenseModel):
        family = "wide-dense"
        Options = WideOptions

    class Plain(DenseModel):  # declares nothing: inherits DenseOptions, which has no keys
        family = "plain-dense"

    try:
        register_family("wide-dense", WideDense)
        register_family("plain-dense", Plain)
        model = build_model(make_config("wide-dense", extra={"width_mult": 3}), vocab=tiny_vocab)
        assert model.config.options.width_mult == 3
        with pytest.raises(ValueError, match=r"^unknown option 'width' for family wide-dense \(known: width_mult\)"):
            make_config("wide-dense", extra={"width": 3})
        with pytest.raises(ValueError, match=r"^unknown option 'width_mult' for family plain-dense \(known: \)"):
            make_config("plain-dense", extra={"width_mult": 3})
    finally:
        for name in ("wide-dense", "plain-dense"):
            FAMILIES.pop(name, None)
            FAMILY_OPTIONS.pop(name, None)


def test_options_reassigned_after_the_config_is_built_are_checked_by_the_model(make_model):
    # benchmarks change cfg.extra in place (tagger_zeroshot's arms): the model parses it again
    config = ModelConfig.load("sparse-clip-emoji")
    config.extra = {"relu_": False}
    with pytest.raises(ValueError, match="unknown option 'relu_' for family sparse-clip"):
        config.options  # noqa: B018 - the property parses
