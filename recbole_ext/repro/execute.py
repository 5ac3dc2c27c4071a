"""Run the cells of a plan through :func:`recbole_ext.runner.run`, skipping finished ones (the cache).

The cache is the run directories themselves: ``<out>/runs/<key>/`` with ``key`` the config hash
(:func:`recbole_ext.repro.plan.cache_key`). A run is finished when its ``metrics.json`` says
``"status": "finished"`` and ``measure.json`` (peak memory, written last) exists. Anything else is
a killed or failed run: it continues from its last finished epoch (``resume.pth``,
:mod:`recbole_ext.resume`), or starts again when it has none (killed in its first epoch) or
trained under another config. So rerunning a table runs only missing cells, and a killed
reproduction resumes where it stopped, within the epoch. A run with a record
(:mod:`recbole_ext.repro.records`) counts as finished too, its run directory gone or not, and so does
one recorded on another device or at the other training precision (``RunSpec.keys_elsewhere``).
"""
from __future__ import annotations

import gc
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from recbole_ext.devices import device_label
from recbole_ext.errors import RecboleExtError
from recbole_ext.repro.plan import Cell, RunSpec
from recbole_ext.repro.records import (BF16_PRECISION, MEASURE_FILE, find_record, read_record, record_of_run,
                                      write_record)


def run_dir_of(spec: RunSpec, key: str | None = None) -> Path:
    """The cache directory of ``spec``'s run, or of the same run under another of its keys."""
    return Path(spec.values["output_dir"]) / (key or spec.values["run_name"])


def is_finished(run_dir: Path) -> bool:
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return False
    return metrics.get("status") == "finished" and (run_dir / MEASURE_FILE).is_file()


def execute_run(spec: RunSpec, log: Callable[[str], None] = print) -> Path:
    """Train and test one run (in this process) and record its peak memory; returns the run directory."""
    import torch

    from recbole_ext.compat import atomic_write_bytes
    from recbole_ext.config import resolve
    from recbole_ext.resume import RESUME_FILE, ResumeError
    from recbole_ext.runner import run

    run_dir = run_dir_of(spec)
    resolved = resolve(spec.config_file, [], spec.values)
    cuda = torch.cuda.is_available()
    resident = 0
    if cuda:  # a serial table runs its cells in one process: count only what this run allocates
        gc.collect()
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    result = None
    if run_dir.exists():  # a killed or failed attempt
        try:
            result = run(resolved=resolved, resume_dir=run_dir)
        except ResumeError as error:
            if (run_dir / RESUME_FILE).is_file():  # trained epochs: set aside, never deleted
                kept = run_dir.with_name(f"{run_dir.name}.set-aside-{time.strftime('%Y%m%d-%H%M%S')}")
                run_dir.rename(kept)
                log(f"starting {spec.key} again (the earlier attempt is kept in {kept}): {error}")
            else:
                log(f"starting {spec.key} again: {error}")
                shutil.rmtree(run_dir)
    if result is None:
        result = run(resolved=resolved)
    measure = {"device": device_label(),  # the hardware (device and CPU model) is in metrics.json
               # peak of torch's allocator over the whole run; on CPU there is no per-run peak to read
               "peak_gpu_mem_gb": (torch.cuda.max_memory_allocated() - resident) / 2 ** 30 if cuda else None}
    if resolved.values.get("bf16"):  # fp32 runs say nothing, as every run measured before --bf16
        measure["training_precision"] = BF16_PRECISION
    text = json.dumps(measure, indent=1).encode()
    atomic_write_bytes(result.run_dir / MEASURE_FILE, lambda handle: handle.write(text))
    return result.run_dir


@dataclass
class Progress:
    total: int = 0
    cached: int = 0
    ran: int = 0
    failed: int = 0


def finished_run_dirs(spec: RunSpec) -> dict[str, Path]:
    """The finished run directories of ``spec`` in the cache, by key: its own, and those of the same
    run trained at the other precision or brought back from a lent GPU (``RunSpec.keys_elsewhere``),
    which stand in for it even before their records are written."""
    return {key: run_dir_of(spec, key) for key in spec.keys() if is_finished(run_dir_of(spec, key))}


def is_cached(spec: RunSpec, records: Path) -> bool:
    """Whether the run is finished: a finished run directory under one of its keys, or a record in
    ``records``."""
    return bool(finished_run_dirs(spec)) or find_record(records, spec) is not None


def finished_runs(cell: Cell, records: Path) -> int:
    return sum(is_cached(spec, records) for spec in cell.runs)


def run_progress(run_dir: Path) -> str:
    """'at N epochs, best validation epoch E (score), early stopping at epoch S at the earliest' from
    ``history.json`` and the run's ``config.yaml``; '' without finished epochs."""
    try:
        history = json.loads((run_dir / "history.json").read_text())
    except (OSError, ValueError):
        return ""
    if not history:
        return ""
    text = f"at {len(history)} epochs"
    validated = [entry for entry in history if "valid_score" in entry]
    if validated:
        settings = _early_stopping_settings(run_dir)
        bigger = settings[-1] if settings else True
        best, idle = _early_stopping_state([entry["valid_score"] for entry in validated], bigger)
        text += f", best validation epoch {validated[best]['epoch']} ({validated[best]['valid_score']:.4f})"
        if settings is not None:
            epochs, stopping_step, eval_step, _ = settings
            # RecBole stops once idle validations exceed stopping_step; it validates every eval_step epochs
            earliest = min(validated[-1]["epoch"] + (stopping_step + 1 - idle) * eval_step, epochs - 1)
            text += f", early stopping at epoch {earliest} at the earliest"
    return text


def _early_stopping_state(scores: list[float], bigger: bool) -> tuple[int, int]:
    """(index of the best validation, idle validations since), counted by RecBole's own
    ``early_stopping``: a score equal to the best is a new best, so of equal scores the later one is kept."""
    from recbole.utils import early_stopping

    best_score, idle, best = -math.inf if bigger else math.inf, 0, 0
    for index, score in enumerate(scores):
        best_score, idle, _, improved = early_stopping(score, best_score, idle, max_step=len(scores), bigger=bigger)
        if improved:
            best = index
    return best, idle


def _early_stopping_settings(run_dir: Path) -> tuple[int, int, int, bool] | None:
    """(epochs, stopping_step, eval_step, valid_metric_bigger) from the run's ``config.yaml``, RecBole's
    defaults where it names none; None where it cannot be read or they have the wrong types."""
    from recbole_ext.config.schema import recbole_general_defaults

    try:
        values = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(values, dict):
        return None
    merged = {**recbole_general_defaults(), **values}
    counts = merged["epochs"], merged["stopping_step"], merged["eval_step"] or 1
    bigger = merged["valid_metric_bigger"]
    if not all(type(value) is int for value in counts) or type(bigger) is not bool:
        return None  # a hand-edited file: say nothing rather than guess
    return (*counts, bigger)


def half_trained(cell: Cell, records: Path) -> tuple[list[str], list[str]]:
    """For each unfinished run of ``cell`` that has finished epochs (a killed or running paper-budget
    cell), how far it got: ``(this call's runs, which the next reproduce resumes; the same runs
    half-trained under another of their keys, e.g. started with --bf16, which only a call with that
    setting resumes)``. Read from ``history.json``, so silent about a run killed in its first epoch."""
    own, elsewhere = [], []
    for spec in cell.runs:
        if is_cached(spec, records):
            continue
        progress = run_progress(run_dir_of(spec))
        if progress:
            own.append(f"seed {spec.seed} {progress}")
        for label, key in spec.keys_elsewhere.items():
            progress = run_progress(run_dir_of(spec, key))
            if progress:
                elsewhere.append(f"seed {spec.seed} {progress} ({label})")
    return own, elsewhere


def pending_runs(cells: list[Cell], records: Path) -> tuple[list[RunSpec], int]:
    """Runs of runnable cells that are not finished yet (deduplicated), and how many are cached
    (a finished run directory or a record in ``records``). A records-only cell's runs count when
    cached and are never to run: its atomic files are not here."""
    todo: dict[str, RunSpec] = {}
    cached = set()
    for cell in cells:
        for spec in cell.runs:
            if is_cached(spec, records):
                cached.add(spec.key)
            elif cell.state == "runnable":
                todo.setdefault(spec.key, spec)
    return list(todo.values()), len(cached)


def record_finished_runs(cells: list[Cell], records: Path) -> None:
    """(Re)write the record of every finished run directory of ``cells``, under any of its keys (the
    directory is the source), and give a record written before records kept their atomic files'
    fingerprint the one its key was found with (``records.recorded_data`` reads it)."""
    for cell in cells:
        for spec in cell.runs:
            run_dirs = finished_run_dirs(spec)
            for key, run_dir in run_dirs.items():
                write_record(records, record_of_run(key, run_dir, spec.data))
            for key in spec.keys():
                record = None if key in run_dirs or spec.data is None else read_record(records, key)
                if record is not None and "data" not in record:
                    write_record(records, {**record, "data": spec.data})


def execute_cells(cells: list[Cell], records: Path, parallel: int = 0, address: str | None = None,
                  log: Callable[[str], None] = print) -> Progress:
    """Run what is missing: serially here, or through Ray when ``parallel`` or ``address`` is given;
    each finished run is recorded in ``records`` as it finishes."""
    todo, cached = pending_runs(cells, records)
    progress = Progress(total=len(todo) + cached, cached=cached)
    log(f"{cached} run(s) cached, {len(todo)} to run")
    if not todo:
        return progress
    if parallel or address:
        outcomes = _execute_with_ray(todo, parallel, address, log)
    else:
        outcomes = _execute_serially(todo, log)
    for spec, error in outcomes:
        if error is None:
            progress.ran += 1
            write_record(records, record_of_run(spec.key, run_dir_of(spec), spec.data))
        else:
            progress.failed += 1
            log(f"run {spec.key} ({spec.describe()}) failed: {error}")
    return progress


def _execute_serially(todo: list[RunSpec], log: Callable[[str], None]):
    for index, spec in enumerate(todo, 1):
        log(f"[{index}/{len(todo)}] {spec.describe()} (epochs in {run_dir_of(spec) / 'run.log'})")
        try:
            execute_run(spec)
            yield spec, None
        except RecboleExtError as error:  # a bad cell must not stop the table
            yield spec, str(error)


def _execute_with_ray(todo: list[RunSpec], parallel: int, address: str | None, log: Callable[[str], None]):
    try:
        import ray
    except ImportError:
        raise RecboleExtError("--parallel/--address run cells through Ray, which is not installed; "
                              "pip install 'recbole-ext[tune]' or run without them") from None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=parallel, log_to_driver=False, include_dashboard=False)

    @ray.remote(num_cpus=1)
    def remote_run(spec: RunSpec) -> str | None:
        import recbole_ext  # noqa: F401  (compat patches in the worker)

        try:
            execute_run(spec)
            return None
        except Exception as error:  # report, do not kill the table
            return f"{error.__class__.__name__}: {error}"

    futures = {remote_run.remote(spec): spec for spec in todo}
    remaining = list(futures)
    while remaining:
        done, remaining = ray.wait(remaining, num_returns=1)
        spec = futures[done[0]]
        log(f"[{len(todo) - len(remaining)}/{len(todo)}] {spec.describe()}: done")
        yield spec, ray.get(done[0])
