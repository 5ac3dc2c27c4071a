"""A preset is a SeqTransformer subclass whose default YAML extends SeqTransformer's."""
from __future__ import annotations

from pathlib import Path

import pytest

from recbole_ext import registry
from recbole_ext.config import resolve
from recbole_ext.models import SeqTransformer

from ..conftest import TINY_DATA


class SinusoidalPreset(SeqTransformer):
    DEFAULT_CONFIG = Path(__file__).parent / "SinusoidalPreset.yaml"


@pytest.fixture
def registered(monkeypatch):
    info = registry.ModelInfo("SinusoidalPreset", "recbole-ext", f"{__name__}:SinusoidalPreset")
    monkeypatch.setitem(registry.plugin_models(), "SinusoidalPreset", info)


def test_preset_defaults_extend_the_transformer_defaults(registered):
    resolved = resolve(TINY_DATA, ["model=SinusoidalPreset"])
    assert resolved.model_class is SinusoidalPreset
    assert resolved.values["position"] == "sinusoidal" and resolved.values["n_layers"] == 1
    assert resolved.values["attention"] == "softmax" and resolved.values["hidden_size"] == 64  # inherited


def test_recbole_config_sees_the_whole_preset_chain(registered, in_tmp):
    from recbole.config import Config

    config = Config(model="SinusoidalPreset", dataset="ml-100k", config_dict={"train_neg_sample_args": None})
    assert config.model_class is SinusoidalPreset
    assert config["position"] == "sinusoidal" and config["backbone"] == "sasrec" and config["n_layers"] == 1


@pytest.fixture
def yaml_preset_dir(tmp_path, monkeypatch):
    from recbole_ext.models import presets

    (tmp_path / "SinusoidalYaml.yaml").write_text(
        f"# A preset written as YAML only.\nextends: {SeqTransformer.DEFAULT_CONFIG}\nposition: sinusoidal\nn_layers: 1\n"
    )
    monkeypatch.setattr(registry, "PRESET_DIR", tmp_path)
    monkeypatch.setattr(presets, "PRESETS", tmp_path)
    registry.plugin_models.cache_clear()
    presets.preset_class.cache_clear()
    yield tmp_path
    registry.plugin_models.cache_clear()
    presets.preset_class.cache_clear()


def test_a_yaml_file_in_presets_is_a_registered_model(yaml_preset_dir):
    model_class, info = registry.resolve_model("SinusoidalYaml")
    assert issubclass(model_class, SeqTransformer) and model_class.__name__ == "SinusoidalYaml"
    assert info.target == "recbole_ext.models.presets:SinusoidalYaml" and info.load() is model_class
    assert model_class.__doc__ == "A preset written as YAML only."
    resolved = resolve(TINY_DATA, ["model=SinusoidalYaml"])
    assert resolved.values["position"] == "sinusoidal" and resolved.values["n_layers"] == 1
