"""scripts/gpu_cells.sh: rows side by side until a deadline, records reused, an archive without weights."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_cells.sh"
TINY_TABLE = REPO / "tests" / "repro" / "tiny_table.yaml"


def run_script(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "work"),
                   "RECORDS_FROM": str(tmp_path / "records_from"), "DEADLINE": "600", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True, timeout=900)


def test_no_row_is_a_one_line_error(tmp_path):
    result = run_script(tmp_path, str(tmp_path / "archive"), str(TINY_TABLE), "1")
    assert result.returncode == 2
    assert result.stderr.strip() == "gpu_cells: name at least one row"


def test_rows_train_side_by_side_and_finished_seeds_in_the_records_are_not_trained_again(tmp_path):
    """Base's first seed is already recorded (copied from RECORDS_FROM): only its second trains,
    beside Sinusoidal's two; the archive has every record and no weights."""
    first = run_script(tmp_path, str(tmp_path / "a1"), str(TINY_TABLE), "1", "base", "--", "--budget", "quick")
    assert first.returncode == 0, first.stderr
    records_from = tmp_path / "records_from" / "records"
    records_from.mkdir(parents=True)
    for record in (tmp_path / "work" / "out-base" / "records").glob("*.json"):
        records_from.joinpath(record.name).write_text(record.read_text())
    (seed_2020,) = [p.stem for p in records_from.iterdir()]

    second = run_script(tmp_path, str(tmp_path / "a2"), str(TINY_TABLE), "2", "base", "sinusoidal", "--",
                        "--budget", "quick", WORK=str(tmp_path / "work2"))
    assert second.returncode == 0, second.stderr
    assert "gpu_cells: 5 record files" in second.stdout  # base: 2 (one copied), sinusoidal: 2 + base's copy
    log = (tmp_path / "work2" / "base.log").read_text()
    assert "1 run(s) cached, 1 to run" in log
    with tarfile.open(tmp_path / "a2" / "cells.tar.gz") as archive:
        names = archive.getnames()
    assert f"./out-base/records/{seed_2020}.json" in names
    assert not any(name.endswith(".pth") for name in names)
    assert sum(name.endswith("/metrics.json") for name in names) == 3  # the runs trained here
    record = json.loads((tmp_path / "work2" / "out-sinusoidal" / "records" / f"{seed_2020}.json").read_text())
    assert record["key"] == seed_2020


def test_serial_rows_run_one_after_another_in_the_order_given_within_one_deadline(tmp_path):
    """SERIAL=1 (efficiency tables): each row alone, in the order named; a row the deadline
    interrupts keeps no record, and rows after it do not start."""
    serial = run_script(tmp_path, str(tmp_path / "a"), str(TINY_TABLE), "1", "sinusoidal", "base", "--",
                        "--budget", "quick", SERIAL="1")
    assert serial.returncode == 0, serial.stderr
    done = [line for line in serial.stdout.splitlines() if line.startswith("gpu_cells: row ")]
    assert [line.split()[2] for line in done] == ["sinusoidal", "base"]
    assert "gpu_cells: 2 record files" in serial.stdout

    cut = run_script(tmp_path, str(tmp_path / "b"), str(TINY_TABLE), "1", "base", "sinusoidal", "--",
                     "--budget", "quick", SERIAL="1", DEADLINE="1", WORK=str(tmp_path / "work2"))
    assert cut.returncode == 0, cut.stderr
    assert "gpu_cells: deadline reached before row sinusoidal" in cut.stdout
    assert "gpu_cells: 0 record files" in cut.stdout
    assert not (tmp_path / "work2" / "sinusoidal.log").exists()
