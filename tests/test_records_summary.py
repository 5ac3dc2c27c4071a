"""scripts/records_summary.py: the docs' figures about a table's runs, from its records folder."""
from __future__ import annotations

import json
import re
from pathlib import Path

from recbole_ext.repro.records import RECORD_FORMAT

from .conftest import load_script


def record(folder: Path, key: str, model: str, device: str, best: int, epochs: int, recall: float,
           train_s: float, bf16: bool = False, hardware: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"format": RECORD_FORMAT, "key": key, "device": device, "test": {"recall@10": recall},
            "timing": {"train_s_per_epoch": train_s},
            "metrics": {"model": model, "best_epoch": best, "epochs_run": epochs}}
    if hardware:
        data["hardware"] = hardware
    if bf16:
        data["training_precision"] = "bf16 autocast"
    (folder / f"{key}.json").write_text(json.dumps(data))


def test_runs_are_summarised_per_model_and_hardware_and_split_at_a_best_epoch(tmp_path, capsys):
    records = tmp_path / "records"
    record(records, "a1", "SeqTransformer", "cuda:GPU", 10, 25, 0.10, 2.0)
    record(records, "a2", "SeqTransformer", "cuda:GPU", 40, 55, 0.14, 3.0)
    record(records, "a3", "SeqTransformer", "cuda:GPU", 30, 45, 0.12, 1.0)
    record(records, "b1", "EulerFormer", "cpu", 12, 27, 0.11, 80.0, bf16=True, hardware="cpu; CPU A (2 logical cores)")
    record(records, "b2", "EulerFormer", "cpu", 14, 29, 0.13, 60.0, bf16=True, hardware="cpu; CPU B (2 logical cores)")
    assert load_script("scripts/records_summary.py").main([str(records), "--best-before", "20", "--runs"]) == 0
    out = capsys.readouterr().out
    assert "b1                   EulerFormer      cpu                        12     27          11.00" in out
    assert out.index("a1 ") < out.index("a3 ") < out.index("a2 ")  # by model, then by the metric
    # two CPU models are two groups: their timings are not one median
    assert "EulerFormer      cpu; CPU A (2 logical cores) (bf16 autocast)" in out and " 80.00 (80.00-80.00)       27-27" in out
    assert "EulerFormer      cpu; CPU B (2 logical cores) (bf16 autocast)" in out and " 60.00 (60.00-60.00)       29-29" in out
    assert re.search(r"SeqTransformer   cuda:GPU; CPU not recorded \(fp32\) +3 +2.00 \(1.00-3.00\) +25-55", out)
    assert "all 5 runs: 25 to 55 epochs run" in out
    assert "best epoch < 20: 3 runs, mean recall@10 (x100) 11.33" in out
    assert "best epoch >= 20: 2 runs, mean recall@10 (x100) 13.00" in out


def test_no_records_or_a_damaged_one_is_a_one_line_error(tmp_path, capsys):
    script = load_script("scripts/records_summary.py")
    assert script.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"{tmp_path}: no records (*.json) here"
    (tmp_path / "k1.json").write_text("{not json")
    assert script.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"{tmp_path / 'k1.json'}: not a readable run record") and "\n" not in error
