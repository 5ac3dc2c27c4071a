"""User-facing errors: each renders as one line naming the file, line or key at fault.

The CLI prints ``str(error)`` for any :class:`RecboleExtError` and exits non-zero, so a
message must stand on its own and say how to fix the problem.
"""
from __future__ import annotations

import difflib
from typing import Iterable


class RecboleExtError(Exception):
    """Base class of every error the CLI reports as a one-line message."""

    exit_code = 2


class ConfigError(RecboleExtError):
    """A config file or value is wrong (unknown key, wrong type, out of range, bad YAML)."""


class UnknownNameError(ConfigError):
    """A model, part or loss name that nothing registers."""


class DatasetMissingError(RecboleExtError):
    """Atomic files a run needs are not on disk."""


class CheckpointError(RecboleExtError):
    """A checkpoint cannot be read safely."""


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """`` (did you mean 'x'?)`` for the closest candidates, or '' when none is close."""
    pool = list(candidates)
    close = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in pool}
        close = [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)]
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


class DataFormatError(RecboleExtError):
    """An input or atomic file is malformed, or a conversion cannot follow the requested protocol."""
