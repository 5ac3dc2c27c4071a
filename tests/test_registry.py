"""Model resolution: entry points first, then RecBole; and RecBole's own entry points see ours."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recbole_ext import registry
from recbole_ext.errors import UnknownNameError
from recbole_ext.models import SeqTransformer

from .conftest import TINY_DATA

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_plugin"


def test_our_models_and_recbole_baselines_resolve():
    cls, info = registry.resolve_model("SeqTransformer")
    assert cls is SeqTransformer and info.source == "recbole-ext"
    for name in ("SASRec", "BERT4Rec", "GRU4Rec", "CORE", "SASRecF", "FDSA", "FEARec"):
        cls, info = registry.resolve_model(name)
        assert cls.__name__ == name and info.source == "recbole"


def test_unknown_model_lists_close_names():
    with pytest.raises(UnknownNameError, match=r"unknown model 'SASrec'.*did you mean 'SASRec'"):
        registry.resolve_model("SASrec")


def test_our_names_never_shadow_recbole():
    assert registry.shadowed_names() == []


def test_recbole_config_loads_our_default_yaml_by_name(in_tmp):
    from recbole.config import Config

    config = Config(model="SeqTransformer", dataset="ml-100k", config_dict={"train_neg_sample_args": None})
    assert config.model_class is SeqTransformer
    assert config["backbone"] == "sasrec" and config["n_layers"] == 2 and config["dropout_impl"] == "fast"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The fixture package pip-installed into its own directory (the test environment is untouched)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(FIXTURE)],
        check=True, capture_output=True,
    )
    return target


def test_third_party_model_trains_through_the_cli(plugin_site, tmp_path):
    config = tmp_path / "meanpool.yaml"
    config.write_text(f"extends: {TINY_DATA}\nmodel: MeanPoolRec\nembedding_size: 8\noutput_dir: {tmp_path / 'runs'}\n")
    env = {**os.environ, "PYTHONPATH": f"{plugin_site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    listing = subprocess.run([sys.executable, "-m", "recbole_ext", "list"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ["MeanPoolRec", "plugin", "tiny-plugin"] in [line.split() for line in listing.stdout.splitlines()]
    result = subprocess.run([sys.executable, "-m", "recbole_ext", "run", "--config", str(config)],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "test: recall@10=" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["status"] == "finished" and metrics["model"] == "MeanPoolRec"
    assert "embedding_size: 8" in (run_dir / "config.yaml").read_text()


def test_third_party_model_unknown_key_is_an_error(plugin_site, tmp_path):
    config = tmp_path / "meanpool.yaml"
    config.write_text(f"extends: {TINY_DATA}\nmodel: MeanPoolRec\nembeding_size: 8\n")
    env = {**os.environ, "PYTHONPATH": str(plugin_site)}
    result = subprocess.run([sys.executable, "-m", "recbole_ext", "run", "--config", str(config)],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown key 'embeding_size' (did you mean 'embedding_size'?)" in result.stderr
