"""A missing or wrong RecBole is a one-line ImportError that says how to fix it."""
from __future__ import annotations

import importlib.metadata

import pytest

from recbole_ext import requirements


@pytest.mark.parametrize("found", ["1.2.0", None])
def test_wrong_or_missing_recbole_version(monkeypatch, found):
    def fake_version(name):
        if found is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return found

    monkeypatch.setattr(requirements.importlib.metadata, "version", fake_version)
    with pytest.raises(ImportError) as error:
        requirements.check_recbole_version()
    message = str(error.value)
    assert "\n" not in message and "pip install --no-deps recbole==1.2.1" in message
    assert (found or "not installed") in message


def test_installed_version_passes():
    assert requirements.check_recbole_version() == "1.2.1"
