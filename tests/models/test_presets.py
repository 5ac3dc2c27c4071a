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
