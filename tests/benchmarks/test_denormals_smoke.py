"""Smoke test of benchmarks/denormals.py: its worker gives the requested share of filters subnormal
weights and times both passes in this process (flushed, as ``import recbole_ext`` left it)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def test_worker_times_a_model_with_the_requested_subnormal_share(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    try:
        denormals = importlib.import_module("denormals")
        cell = denormals.worker(batch=4, steps=1, dead=0.25)
    finally:
        sys.modules.pop("denormals", None)
    assert cell["subnormal_weight_share"] == 0.25  # 2 of the 8 filters of every height
    assert cell["forward_s"] > 0 and cell["train_step_s"] > 0
    assert cell["flushed_in_all_threads"]
