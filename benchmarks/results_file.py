"""Where a benchmark's results go, one rule for every script in ``benchmarks/``.

A path the user names (``--json PATH``, or the script's own option) wins; otherwise the script's
committed file under ``benchmarks/results/``. A ``--quick`` run is a smoke test whose numbers mean
nothing, so it writes nowhere unless told to: it can never overwrite a committed measurement.
"""
from __future__ import annotations

import json
from pathlib import Path


def results_target(given: str | Path | None, quick: bool, default: Path) -> Path | None:
    """The file to write, or ``None`` for a ``--quick`` run that named none."""
    if given:
        return Path(given)
    return None if quick else default


def write_results(path: str | Path, payload) -> Path:
    """Write ``payload`` as indented JSON (paths as text), creating the folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path
