"""Shared fixtures: a seconds-long ml-100k config (RecBole ships ml-100k, so no download)."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import recbole_ext  # noqa: F401  (applies compat before any test imports RecBole)

TESTS = Path(__file__).parent
TINY_CONFIG = TESTS / "configs" / "tiny_ml100k.yaml"
TINY_DATA = TESTS / "configs" / "tiny_data.yaml"
REPO = TESTS.parent


def load_script(relative_path: str, name: str | None = None):
    """A script of the repository (``scripts/x.py``, ``benchmarks/x.py``: not a package) as a fresh module."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tiny_config() -> Path:
    return TINY_CONFIG


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run in a temporary directory so nothing (runs/, saved/, log/) lands in the checkout."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(autouse=True, scope="session")
def _own_check_cache(tmp_path_factory):
    """Passed atomic-file checks are remembered in a cache folder (data/atomic.py): the suite's,
    subprocesses included, stay out of the user's."""
    from recbole_ext.data.atomic import CACHE_DIR_ENV

    os.environ[CACHE_DIR_ENV] = str(tmp_path_factory.mktemp("check-cache"))
    yield


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yield


def tiny_recbole_config(model="SeqTransformer", **overrides):
    """A RecBole Config (through our resolver) for the tiny ml-100k setting."""
    from recbole_ext.config import resolve
    from recbole_ext.runner import recbole_config

    resolved = resolve(TINY_DATA, [f"model={model}"] + [f"{k}={v}" for k, v in overrides.items()])
    return recbole_config(resolved, checkpoint_dir=Path(os.getcwd()) / "saved")
