"""The plain-torch BERT a saved folder is rebuilt with: same parameters, same outputs as transformers'
BertForMaskedLM, and loading a saved folder imports no transformers."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tokenspace.models import registry
from tokenspace.models.light_bert import LightBertModel, LightPredictionTransform, supported
from tokenspace.models.towers import BertMLMTower, light_text_towers

CONFIG = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 32, "max_position_embeddings": 24}


def _pair(config=CONFIG):
    heavy = BertMLMTower(config=config)
    with light_text_towers():
        light = BertMLMTower(config=config)
    assert isinstance(light.bert, LightBertModel) and isinstance(light.mlm_transform, LightPredictionTransform)
    assert not isinstance(heavy.bert, LightBertModel)
    return heavy.eval(), light.eval()


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_same_parameters_and_outputs_as_transformers(act):
    heavy, light = _pair({**CONFIG, "hidden_act": act})
    assert set(light.state_dict()) == set(heavy.state_dict())
    light.load_state_dict(heavy.state_dict())  # strict: the same names and shapes
    ids = torch.randint(1, 50, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 5:] = 0  # a padded row: its padded keys are masked in both
    mask[2, 2:] = 0
    with torch.no_grad():
        a, b = heavy(ids, mask), light(ids, mask)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(light.mlm_transform(b), heavy.mlm_transform(a), rtol=1e-5, atol=1e-5)


def test_config_for_exports_and_unsupported_configs():
    _, light = _pair()
    assert light.bert.config.to_dict()["hidden_size"] == 16  # a transformers BertConfig, on demand
    assert not supported({**CONFIG, "position_embedding_type": "relative_key"})
    assert not supported({**CONFIG, "hidden_act": "swish"})
    with light_text_towers():  # not covered: transformers' model is built instead
        tower = BertMLMTower(config={**CONFIG, "position_embedding_type": "relative_key"})
    assert not isinstance(tower.bert, LightBertModel)


def test_too_long_input_is_refused():
    _, light = _pair()
    with pytest.raises(ValueError, match="exceed the model's 24 positions"):
        light(torch.ones(1, 30, dtype=torch.long), torch.ones(1, 30, dtype=torch.long))


def test_saved_folder_loads_light_and_equal(tmp_path, tiny_vocab):
    from tests.conftest import tiny_config

    model = registry.build_model(tiny_config(vocab_size=len(tiny_vocab)), vocab=tiny_vocab).eval()
    model.save_pretrained(tmp_path / "m")
    loaded = registry.from_pretrained(tmp_path / "m")
    assert isinstance(loaded.text_tower.bert, LightBertModel)
    texts = ["a red dog", "dogs"]
    a, b = model.encode_text(texts), loaded.encode_text(texts)
    assert (a.indptr == b.indptr).all() and (a.indices == b.indices).all()
    torch.testing.assert_close(torch.as_tensor(b.values), torch.as_tensor(a.values), rtol=1e-5, atol=1e-6)
    # a fresh process: loading and encoding imports nothing of transformers
    code = ("import sys\nfrom tokenspace.models import registry\n"
            f"m = registry.from_pretrained({str(tmp_path / 'm')!r})\nm.encode_text('a red dog')\n"
            "print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_traced_graph_keeps_the_padding_mask():
    """An exported graph (ONNX traces the module) must not freeze the unpadded example's shortcut."""
    _, light = _pair()
    ids = torch.randint(1, 50, (2, 7))
    full = torch.ones(2, 7, dtype=torch.long)
    with torch.no_grad():
        traced = torch.jit.trace(light, (ids, full), check_trace=False)
        padded = full.clone()
        padded[0, 4:] = 0
        torch.testing.assert_close(traced(ids, padded), light(ids, padded))


def test_skip_init_leaves_torch_as_it_was():
    import torch.nn.init as init

    from tokenspace.models.towers import skip_init

    before = init.normal_
    with skip_init():
        t = torch.full((3,), 7.0)
        assert init.normal_(t) is t and bool((t == 7).all())  # left as it was
        layer = torch.nn.Linear(2, 2)  # built, not initialised (a saved state dict follows)
    assert init.normal_ is before
    torch.manual_seed(0)
    assert torch.nn.Linear(4, 4).weight.abs().max() > 0  # initialised again outside
    del layer


def test_portable_spec_is_the_same_from_either_bert_and_needs_no_transformers(tmp_path, tiny_vocab):
    from tests.conftest import tiny_config

    heavy, light = _pair()
    assert light.portable_spec() == heavy.portable_spec()
    assert light.portable_spec()["config"]["hidden_size"] == 16 and light.portable_spec()["weights"] is None
    model = registry.build_model(tiny_config(vocab_size=len(tiny_vocab)), vocab=tiny_vocab).eval()
    model.save_pretrained(tmp_path / "m")
    code = ("import sys, json\nfrom tokenspace.models import registry\n"
            f"m = registry.from_pretrained({str(tmp_path / 'm')!r})\n"
            f"m.save_pretrained({str(tmp_path / 'again')!r})\n"
            "print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # saved again without importing transformers
    import json
    first = json.loads((tmp_path / "m" / "config.json").read_text())
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["text_tower"] == first["text_tower"]
