"""Finished runs → one line per (dataset column, row, metric): published vs ours, differences, direction.

Our value of a metric ``key`` is read from the run's record (``repro/records.py``, written from its
run directory): a test metric of ``metrics.json`` (times the table's ``scale``, e.g. 100 for tables
printed in percent), or a measurement:

- ``train_s_per_epoch`` / ``eval_s_per_epoch``: mean ``train_time_s`` / ``valid_time_s`` of
  ``history.json`` over the epochs after the first (the first is warm-up), seconds;
- ``peak_gpu_mem_gb``: ``torch.cuda.max_memory_allocated`` over the run above what was allocated before it, GiB (CUDA only);
- dataset statistics (``users``, ``items``, ``interactions``, ``avg_length``, ``sparsity_pct``) of the
  column's atomic files, counted as the paper printed them (``[PAD]`` included where it was).

Direction: a row with ``compare_to`` claims the paper's sign of ``row − compare_to`` (a gain of the
method over its base, or of the full model over an ablation); it *holds* when ours has the same sign.
With two seeds or more on both sides, ``p_value`` is Welch's t-test of the row's seeds against the
compared row's: whether our sign is more than seed noise (a one-seed "holds" cannot say).

Our gain and its test use the seeds both rows ran. A row with two seeds compared with a base
that has one so far would otherwise set a two-seed mean against a one-seed one, and the gain would
mix the method's effect with the extra seed's luck. The cell's own mean ± std still covers all
its seeds, and its reason names the seeds the gain came from. Rows that share no seed (only
possible with records brought from elsewhere) fall back to comparing their means.

Measurements (``DEVICE_BOUND_KEYS``) belong to the device, CPU model and precision a run trained at, and runs
of other settings stand in for a cell's metrics (``RunSpec.keys_elsewhere``): a measurement is
averaged only over runs of one setting, and compared only with a row measured in the same one. A
cell whose runs mix settings leaves it empty and says why, rather than average a CPU epoch with a
GPU's.
"""
from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from recbole_ext.repro.plan import STATISTICS_DATA_PATH, Cell
from recbole_ext.repro.records import (TIMING_KEYS, find_record, read_statistics_record, record_hardware,
                                      record_precision, record_values, write_statistics_record)
from recbole_ext.repro.tables import Metric, Table

DEVICE_BOUND_KEYS = frozenset({*TIMING_KEYS, "peak_gpu_mem_gb"})
THIS_SETTING = "this call's device and precision"


@dataclass(frozen=True)
class Setting:
    """Where a run's measurements were taken: its device and precision as the plan labels them
    (``RunSpec.where``, or :data:`THIS_SETTING`), and its hardware with the CPU model, since two
    CPUs share the device label ``cpu`` but not their timings."""

    placement: str
    hardware: str


@dataclass
class Line:
    column: str
    row_id: str
    row_label: str
    metric: Metric
    published: float | None
    ours: list[float] = field(default_factory=list)
    status: str = ""          # done | partial | pending | missing-data | error | not run | failed
    reason: str = ""
    data_label: str = ""
    compare_to: str | None = None
    published_gain: float | None = None   # (row - compare_to) / |compare_to|, published
    ours_gain: float | None = None
    measured_on: frozenset[Setting] | None = None  # DEVICE_BOUND_KEYS: the settings ``ours`` came from
    p_value: float | None = None  # Welch's t-test, ours against compare_to's (>= 2 seeds each)
    seeds: list[int] = field(default_factory=list)  # the seed of each of ``ours``, where known

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.ours) if self.ours else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.ours) if len(self.ours) > 1 else (0.0 if self.ours else None)

    @property
    def abs_diff(self) -> float | None:
        return None if self.mean is None or self.published is None else self.mean - self.published

    @property
    def rel_diff(self) -> float | None:
        if self.abs_diff is None or not self.published:
            return None
        return self.abs_diff / abs(self.published)

    @property
    def direction_holds(self) -> bool | None:
        if self.published_gain is None or self.ours_gain is None or 0 in (self.published_gain, self.ours_gain):
            return None  # a tie claims no sign, and shows none
        return (self.published_gain > 0) == (self.ours_gain > 0)


def dataset_statistics(preset_name: str, data_path: str = STATISTICS_DATA_PATH,
                       records: Path | None = None) -> tuple[dict | None, str]:
    """Our statistics of a preset's atomic files, counted as the paper printed them; or why not.
    With ``records``, the counts are kept there (``records.write_statistics_record``), and read
    back from there where no atomic file of the preset is here."""
    from recbole_ext.data.checks import how_to_create
    from recbole_ext.data.presets import get_preset
    from recbole_ext.data.stats import dataset_stats, locate_dataset
    from recbole_ext.errors import RecboleExtError
    from recbole_ext.repro.plan import data_fingerprint

    data = data_fingerprint(data_path, preset_name)
    # outside the try: a damaged record is the call's one-line error, as a damaged run record is
    recorded = read_statistics_record(records, preset_name) if records is not None and not data else None
    try:
        preset = get_preset(preset_name)
        if recorded is not None:
            ours = dict(recorded["counts"])
        else:
            ours = dict(dataset_stats(locate_dataset(preset_name, data_path, how_to_create(preset_name))))
            if records is not None:
                write_statistics_record(records, preset_name, data, ours)
    except RecboleExtError as error:
        return None, str(error)
    if preset.keep_unrated_items and "items_with_item_file" in ours:
        ours["items"] = ours["items_with_item_file"]  # RecBole counts the .item file's ids too
    if preset.published.includes_pad:  # the paper printed RecBole's counts, [PAD] included
        ours["users"] += 1
        ours["items"] += 1
        ours["sparsity"] = 1 - ours["interactions"] / (ours["users"] * ours["items"])
    ours["sparsity_pct"] = 100 * ours["sparsity"]
    return ours, ""


@dataclass
class Collected:
    lines: list[Line]
    # hardware (``records.record_hardware``) → how many of the table's finished runs trained on it,
    # for the header: a table rewritten elsewhere, or from records, still names where its runs ran
    trained_on: dict[str, int]
    trained_at: dict[str, int]  # likewise the precision (``records.record_precision``) → how many runs


def collect(table: Table, cells: list[Cell], records: Path, data_path: str = STATISTICS_DATA_PATH) -> Collected:
    """Lines of ``cells`` from the records of their finished runs (``execute.record_finished_runs``
    writes them from the run directories first)."""
    lines: list[Line] = []
    counts: dict[str, int] = {}
    precisions: dict[str, int] = {}
    for cell in cells:
        per_run: list[dict[str, float]] = []
        run_seeds: list[int] = []  # the seed each of per_run trained with
        settings: list[Setting] = []  # where each of per_run trained
        status, reason = cell.state, cell.reason
        if table.kind == "statistics" and cell.column.preset:  # counted here, else read from records/statistics/
            stats, reason = dataset_statistics(cell.column.preset, cell.data_path or data_path, records)
            status = "done" if stats is not None else "error" if cell.state == "statistics" else "missing-data"
            per_run = [stats] if stats is not None else []
        elif cell.state in ("runnable", "records-only"):
            found = [(spec, find_record(records, spec)) for spec in cell.runs]
            finished = [record for _, record in found if record]
            per_run = [record_values(record, table.scale) for record in finished]
            run_seeds = [spec.seed for spec, record in found if record]
            settings = [Setting(spec.where(record["key"]) or THIS_SETTING, record_hardware(record))
                        for spec, record in found if record]
            for setting in settings:
                counts[setting.hardware] = counts.get(setting.hardware, 0) + 1
            for precision in map(record_precision, finished):
                precisions[precision] = precisions.get(precision, 0) + 1
            if finished:  # a records-only cell's values are as good as any: its keys hash the recorded data
                status, reason = ("done" if len(finished) == len(cell.runs) else "partial"), ""
            elif cell.state == "records-only":  # nothing recorded: what it lacks is the atomic files
                status = "missing-data"
            else:
                status, reason = "not run", "no finished run yet"
            if any(record and record["key"] != spec.key for spec, record in found):
                # the table's hardware and precision lines are this call's: say how these ran
                reason = f"trained on {_placements(found)}"
        # committed tables name no home directory: the data checks' messages hold absolute paths
        reason = reason.replace(f"{Path.cwd()}/", "")
        for index, metric in enumerate(table.metrics):
            published = cell.row.published.get(cell.column.label, (None,) * len(table.metrics))[index]
            measured = [(seed, values[metric.key]) for seed, values in zip(run_seeds or [None] * len(per_run), per_run)
                        if metric.key in values]  # statistics are counted once, from no seed
            line = Line(cell.column.label, cell.row.id, cell.row.label, metric, published,
                        [value for _, value in measured], status, reason, cell.data_label, cell.row.compare_to,
                        seeds=[seed for seed, _ in measured if seed is not None])
            if metric.key in DEVICE_BOUND_KEYS and settings:
                _keep_one_setting(line, [where for where, values in zip(settings, per_run) if metric.key in values])
            lines.append(line)
    _fill_directions(lines)
    return Collected(lines, _most_first(counts), _most_first(precisions))


def _placements(found: list) -> str:
    """Where a cell's finished runs trained, other than at this call's own key: "cuda:H200", or
    with counts, "cpu with bf16 autocast for 2 of 3 runs", once the seeds did not all train alike
    (a third seed added in fp32 to two bf16 ones must not read as three bf16 runs)."""
    finished = [(spec, record) for spec, record in found if record]
    counts: dict[str, int] = {}
    for spec, record in finished:
        if record["key"] != spec.key:
            label = spec.where(record["key"])
            counts[label] = counts.get(label, 0) + 1
    if len(counts) == 1 and sum(counts.values()) == len(finished):
        return next(iter(counts))
    return ", ".join(f"{label} for {count} of {len(finished)} runs" for label, count in sorted(counts.items()))


def _most_first(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _keep_one_setting(line: Line, settings: list[Setting]) -> None:
    """A measurement from runs of several settings is no value: empty it, and say which they were."""
    line.measured_on = frozenset(settings)
    if len(line.measured_on) > 1:
        line.ours, line.seeds = [], []
        placements = {setting.placement for setting in line.measured_on}
        if len(placements) == 1:  # one device and precision, several CPU models
            which = "the CPU models " + ", ".join(sorted(setting.hardware for setting in line.measured_on))
        elif THIS_SETTING not in placements:  # the cell's reason lists them already
            which = "these settings"
        else:
            which = ", ".join(sorted(placements))
        line.reason = (f"{line.reason}; " if line.reason else "") + f"{line.metric.label} not averaged across {which}"


def _fill_directions(lines: list[Line]) -> None:
    index = {(l.column, l.row_id, l.metric.label): l for l in lines}
    for line in lines:
        if line.compare_to is None:
            continue
        base = index.get((line.column, line.compare_to, line.metric.label))
        if base is None:
            continue
        if line.published is not None and base.published:
            line.published_gain = (line.published - base.published) / abs(base.published)
        if line.measured_on != base.measured_on:  # a measurement on another device or precision
            continue
        ours, theirs = _on_shared_seeds(line, base)
        if not (ours and theirs):  # either row not run yet (rows train in any order)
            continue
        base_mean = statistics.fmean(theirs)
        if base_mean:
            line.ours_gain = (statistics.fmean(ours) - base_mean) / abs(base_mean)
            line.p_value = welch_p_value(ours, theirs)


def _on_shared_seeds(line: Line, base: Line) -> tuple[list[float], list[float]]:
    """The values of ``line`` and ``base`` at the seeds both ran, and a note on ``line`` saying so
    when either has seeds the other lacks; all values where the seeds are unknown or not shared."""
    mine, theirs = dict(zip(line.seeds, line.ours)), dict(zip(base.seeds, base.ours))
    if (len(mine), len(theirs)) != (len(line.ours), len(base.ours)) or mine.keys() == theirs.keys():
        return line.ours, base.ours
    shared = sorted(mine.keys() & theirs.keys())
    if not shared:
        return line.ours, base.ours
    which = ", ".join(map(str, shared))
    note = f"gain over seed{'s' if len(shared) > 1 else ''} {which}, the one{'s' if len(shared) > 1 else ''} both rows ran"
    line.reason = f"{line.reason}; {note}" if line.reason else note
    return [mine[seed] for seed in shared], [theirs[seed] for seed in shared]


def welch_p_value(ours: list[float], base: list[float]) -> float | None:
    """Two-sided p of Welch's t-test (unequal variances) of two sets of per-seed values; None below two
    seeds a side, or when neither side varies (no noise to weigh the difference against)."""
    if len(ours) < 2 or len(base) < 2 or (statistics.pvariance(ours) == 0 and statistics.pvariance(base) == 0):
        return None
    from scipy import stats

    with warnings.catch_warnings():
        # One side's seeds all equal is a valid Welch test (the other side's variance carries it);
        # scipy warns of "catastrophic cancellation" for exactly that side.
        warnings.filterwarnings("ignore", "Precision loss occurred in moment calculation", RuntimeWarning)
        return float(stats.ttest_ind(ours, base, equal_var=False).pvalue)
