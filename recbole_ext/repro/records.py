"""Finished runs as small records beside the tables, so results outlive the run cache.

The cache (``<cache>/<key>/``: weights, logs, resume state) is large and git-ignored, so a fresh
clone, another machine or a cleaned disk loses it, and with it every finished cell a table showed:
``--report-only`` would then rewrite a committed table without them. So each finished run also
leaves ``<out>/records/<key>.json``, a few hundred bytes: what a table reads from the run (test
metrics, timing means, peak memory), its ``metrics.json`` (best epoch, validation, wall time,
versions) and where it came from. Records are committed with ``docs/results/`` and count as
finished runs: ``reproduce`` trains a run only when neither a finished run directory nor a record
has its key (the config hash, data files included: ``plan.cache_key``). A run directory that is
present stays the source: its record is rewritten from it (a run trained further updates it).

The key hashes the device too (``devices.device_label``), so a record also names its ``device``. A
record trained elsewhere (cells run on a lent GPU, their records committed) stands in for the same
config on this machine: ``recorded_devices`` lists the devices in a records directory, the plan
computes each run's key there (``RunSpec.keys_elsewhere``) and ``find_record`` takes this device's
record first. Records written before the field existed were all trained on CPU. A record also names
its ``hardware`` (device, CPU model and, since 2026-11-29, its widest vector instructions:
``devices.hardware_label``): a table's header lists what its runs trained on, whichever machine
rewrote it, and timings are averaged per CPU model too (``results``). The records committed before
2026-11-27 had it filled in from the headers of the tables their sessions wrote (AMD EPYC, 2 logical
cores; the lent H200's CPU was not recorded). Training precision works the same way: a run trained
under ``reproduce --bf16`` has a key of its own, and records at either precision stand in for the
other's (``plan.stand_in_keys``).

A record also keeps the fingerprint of the atomic files its key hashed (``data``; records written
before 2026-11-29 get it the first time a report finds them with those files in place). Without
it, a clone that has the committed records but not the licensed data could not compute a single
key: ``--report-only`` there rewrote every committed table as "missing data". With it, such a
cell is *records-only*: its keys come from the recorded fingerprint, its finished runs are
reported, and nothing trains without the data.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from recbole_ext.devices import as_device_label
from recbole_ext.errors import ConfigError, DataFormatError

RECORDS_DIR = "records"
STATISTICS_DIR = "statistics"  # under RECORDS_DIR
RECORD_FORMAT = 1
MEASURE_FILE = "measure.json"
# measurement key of a table → the per-epoch field of history.json it averages
TIMING_KEYS = {"train_s_per_epoch": "train_time_s", "eval_s_per_epoch": "valid_time_s"}


def records_dir(out: str | Path) -> Path:
    return Path(out) / RECORDS_DIR


def record_path(records: Path, key: str) -> Path:
    return records / f"{key}.json"


def _mean_after_warmup(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.fmean(values[1:] if len(values) > 1 else values)


def record_of_run(key: str, run_dir: Path, data: list | None = None) -> dict[str, Any]:
    """The record of a finished run directory (``execute.is_finished``); ``data``: the fingerprint of
    the atomic files the key was computed with (``plan.RunSpec.data``)."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    history_path = run_dir / "history.json"
    history = json.loads(history_path.read_text()) if history_path.is_file() else []
    timing = {key_: _mean_after_warmup([entry.get(field) for entry in history]) for key_, field in TIMING_KEYS.items()}
    measure = json.loads((run_dir / MEASURE_FILE).read_text())
    record = {"format": RECORD_FORMAT, "key": key, "source": f"run directory {_shown(run_dir)}",
              "device": as_device_label(measure.get("device", "cpu")),
              "recorded": time.strftime("%Y-%m-%d %H:%M"), "test": metrics.get("test") or {},
              "timing": {k: v for k, v in timing.items() if v is not None},
              "peak_gpu_mem_gb": measure.get("peak_gpu_mem_gb"), "metrics": metrics}
    if "training_precision" in measure:  # for readers of the file; the key tells the plan already
        record["training_precision"] = measure["training_precision"]
    if metrics.get("hardware"):  # the runner's (``devices.hardware_label``)
        record["hardware"] = metrics["hardware"]
    if data is not None:
        record["data"] = data
    return record


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when below it: committed records name no home directory."""
    relative = os.path.relpath(path.resolve())
    return relative if not relative.startswith("..") else str(path.resolve())


def write_record(records: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` unless the same one (its time aside) is there: rebuilding a table from run
    directories leaves committed records untouched."""
    return _write_unless_same(record_path(records, record["key"]), record)


def _write_unless_same(path: Path, record: dict[str, Any]) -> Path:
    from recbole_ext.compat import atomic_write_bytes

    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = None
    if isinstance(current, dict) and {**current, "recorded": None} == {**record, "recorded": None}:
        return path
    text = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda handle: handle.write(text))
    return path


def statistics_record_path(records: Path, preset: str) -> Path:
    """A statistics table's counts of one preset's atomic files, in a folder of their own: the
    run records' readers (``scripts/records_summary.py``) take every ``records/*.json`` for a run."""
    return records / STATISTICS_DIR / f"{preset}.json"


def write_statistics_record(records: Path, preset: str, data: list, counts: dict[str, Any]) -> Path:
    """Keep the counts of a preset's atomic files (``data_fingerprint`` ``data``) for a machine
    without them; unchanged counts leave the file as it was."""
    return _write_unless_same(statistics_record_path(records, preset), {
        "format": RECORD_FORMAT, "preset": preset, "data": data, "counts": counts,
        "recorded": time.strftime("%Y-%m-%d %H:%M")})


def read_statistics_record(records: Path, preset: str) -> dict[str, Any] | None:
    """The recorded counts of ``preset``, None when there are none; a damaged file is a one-line error."""
    return _read_checked(statistics_record_path(records, preset), "statistics", "preset", preset, "counts",
                         "delete it; counting the converted data writes it again")


def read_record(records: Path, key: str) -> dict[str, Any] | None:
    """The record of ``key``, None when there is none; a damaged one is a one-line error."""
    return _read_checked(record_path(records, key), "run", "key", key, "test", "delete it to train the run again")


def _read_checked(path: Path, kind: str, field: str, value: str, body: str, remedy: str) -> dict[str, Any] | None:
    """The record at ``path`` (None when there is none), if it is of RECORD_FORMAT, names ``value`` as
    its ``field`` and holds a ``body`` mapping; else a one-line error naming the file."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DataFormatError(f"{path}: not a readable {kind} record ({error.__class__.__name__}: {error})") from None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get(field) != value \
            or not isinstance(record.get(body), dict):
        raise DataFormatError(f"{path}: not a {kind} record of format {RECORD_FORMAT} for {field} {value} ({remedy})")
    return record


def records_source(folder: str | Path) -> Path:
    """The records folder ``reproduce --records-from`` names: a records folder, or an ``--out``
    folder holding one (``docs/results/ml100k`` or ``docs/results/ml100k/records``)."""
    path = Path(folder)
    if (path / RECORDS_DIR).is_dir():
        return path / RECORDS_DIR
    if not path.is_dir():
        raise ConfigError(f"--records-from {folder}: no such folder")
    return path


def merge_records(source: Path, records: Path) -> tuple[int, int]:
    """Copy into ``records`` the run and statistics records of ``source`` that it lacks, byte for
    byte, all checked first (a damaged one is a one-line error naming it, and nothing is copied). A
    record ``records`` already has is left as it is, even where ``source``'s differs (``records``'s
    may come from a run directory here, which stays the source). Returns how many were copied and
    how many differed and were kept."""
    from recbole_ext.compat import atomic_write_bytes

    kinds = ((source, records, lambda key: read_record(source, key)),
             (source / STATISTICS_DIR, records / STATISTICS_DIR, lambda preset: read_statistics_record(source, preset)))
    found = []
    for from_dir, to_dir, check in kinds:
        for path in sorted(from_dir.glob("*.json")) if from_dir.is_dir() else []:
            check(path.stem)  # a damaged record raises, naming its file, before anything is copied
            found.append((path.read_bytes(), to_dir / path.name))
    copied = kept = 0
    for text, target in found:
        if target.exists():
            kept += target.read_bytes() != text
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, lambda handle: handle.write(text))
        copied += 1
    return copied, kept


def record_device(record: dict[str, Any]) -> str:
    return record.get("device", "cpu")


def record_hardware(record: dict[str, Any]) -> str:
    """What the run trained on (``devices.hardware_label``): the device and the CPU model. Runs
    recorded before it was kept say only their device."""
    return record.get("hardware") or f"{record_device(record)}; CPU not recorded"


BF16_PRECISION = "bf16 autocast"  # the record's ``training_precision`` of a --bf16 run
FP32_PRECISION = "fp32"


def record_precision(record: dict[str, Any]) -> str:
    """The precision the run trained at; fp32 runs say nothing, as every run recorded before --bf16."""
    return record.get("training_precision", FP32_PRECISION)


def _parsed_records(records: Path):
    """Every record in ``records`` as a dict (unreadable files are left to ``read_record``)."""
    for path in sorted(records.glob("*.json")) if records.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            yield record


def recorded_devices(records: Path) -> set[str]:
    """The device labels of the records in ``records``."""
    return {record_device(record) for record in _parsed_records(records)}


def recorded_data(records: Path) -> dict[str, list[list]]:
    """Dataset name → the distinct atomic-file fingerprints (``plan.data_fingerprint``) its records
    were trained on: the plan of a machine without the atomic files computes the runs' keys from
    them, so committed records still fill their cells there (``plan.plan_cell``, "records-only")."""
    found: dict[str, list[list]] = {}
    for record in (*_parsed_records(records), *_parsed_records(records / STATISTICS_DIR)):
        data = record.get("data")
        # its files are named DATASET.inter, DATASET.item...: records imported from a CSV name no dataset otherwise
        names = {str(entry[0]).rsplit(".", 1)[0] for entry in data if isinstance(entry, list) and entry} \
            if isinstance(data, list) else set()
        if len(names) == 1:
            fingerprints = found.setdefault(names.pop(), [])
            if data not in fingerprints:
                fingerprints.append(data)
    return found


def find_record(records: Path, spec) -> dict[str, Any] | None:
    """The record of a run (a ``plan.RunSpec``): this device's first, else one trained elsewhere."""
    return next((record for record in (read_record(records, key) for key in spec.keys()) if record), None)


def record_values(record: dict[str, Any], scale: float) -> dict[str, float]:
    """Every value a table may read from a run, by metric key: test metrics times ``scale`` (100
    for tables printed in percent), timing means in seconds, peak GPU memory in GiB."""
    values = {key: float(value) * scale for key, value in record["test"].items()}
    values.update((key, float(value)) for key, value in record.get("timing", {}).items())
    if record.get("peak_gpu_mem_gb") is not None:
        values["peak_gpu_mem_gb"] = float(record["peak_gpu_mem_gb"])
    return values
