"""The RecBole version every workaround in :mod:`recbole_ext.compat` targets, checked at import
before anything imports RecBole (so a missing or wrong RecBole gives one line, not a traceback)."""
from __future__ import annotations

import importlib.metadata

RECBOLE_VERSION = "1.2.1"


def check_recbole_version() -> str:
    """Fail at import, in one line, unless RecBole 1.2.1 is installed (every patch here targets it)."""
    fix = f"run `pip install --no-deps recbole=={RECBOLE_VERSION}` (or `bash scripts/install.sh`)"
    try:
        found = importlib.metadata.version("recbole")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(f"recbole-ext needs RecBole {RECBOLE_VERSION}, which is not installed: {fix}") from None
    if found != RECBOLE_VERSION:
        raise ImportError(f"recbole-ext needs RecBole {RECBOLE_VERSION}, found {found}: {fix}")
    return found
