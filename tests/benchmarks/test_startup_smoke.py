"""Smoke test of benchmarks/startup.py: its worker builds ml-100k's dataset and loaders with
RecBole's reader and augmentation and with ours, in process, and both give the same number of
training rows."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from recbole.data.dataset import SequentialDataset
from recbole.data.dataset import dataset as recbole_dataset_module

from recbole_ext.data.reading import read_csv

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def test_both_variants_time_the_same_dataset(monkeypatch, in_tmp):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    startup = importlib.import_module("startup")
    try:
        # the "recbole" variant swaps RecBole's loop and reader back in for its process: undo that here
        monkeypatch.setattr(SequentialDataset, "data_augmentation", SequentialDataset.data_augmentation)
        monkeypatch.setattr(recbole_dataset_module, "pd", recbole_dataset_module.pd)
        cells = {}
        for variant in startup.VARIANTS:
            cells[variant] = startup.worker(str(Path(__file__).parents[1] / "configs" / "tiny_ml100k.yaml"), variant)
            assert (recbole_dataset_module.pd.read_csv is read_csv) == (variant == "ours")
    finally:
        sys.modules.pop("startup", None)
    assert cells["recbole"]["training_rows"] == cells["ours"]["training_rows"] > 0
    assert all(cell["create_dataset_s"] > 0 and cell["data_preparation_s"] > 0 for cell in cells.values())
