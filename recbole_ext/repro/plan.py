"""A table → its cells (row × dataset column), each with the runs (one per seed) that fill it.

A run is a resolved config, built like a user's ``recbole-ext run`` config: the column's dataset
config (``configs/datasets/<preset>.yaml``), then the table's ``training`` values (the paper
budget), the column's and the row's ``set`` values, the seed, and for ``--budget quick`` the
smoke-test cuts of :data:`QUICK`. A cell is *pending* when its model or one of its parts is not
registered yet, *missing data* when its atomic files are not on disk, *runnable* otherwise. A
cell whose atomic files are missing here but whose dataset the records were trained on is
*records-only*: its runs' keys are computed from the recorded files' fingerprint
(``records.recorded_data``), so finished runs are reported and none is trained.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from recbole_ext.config.schema import SPEED_ONLY_KEYS, without_later_keys_at_former_values
from recbole_ext.devices import CPU_FP32_MODELS, device_label
from recbole_ext.errors import ConfigError, DataFormatError, DatasetMissingError, UnknownNameError, did_you_mean
from recbole_ext.repro.tables import Column, Row, Table

BUDGETS = ("paper", "quick")
QUICK_LABEL = "quick budget — not a reproduction"
# Smoke test: 2 epochs, no patience, users capped at QUICK_MAX_USER_INTERACTIONS (data cut down).
QUICK = {"epochs": 2, "stopping_step": 1, "eval_step": 1}
QUICK_MAX_USER_INTERACTIONS = 40
# Efficiency tables measure 1 warm-up epoch + 2 timed epochs, whatever the budget (specs/linrec.md §7).
EFFICIENCY = {"epochs": 3, "stopping_step": 100, "eval_step": 1}
# Keys that change where a run is written, how it logs or how fast it computes, not what it computes:
# not in the cache key.
NOT_HASHED = {"output_dir", "run_name", "checkpoint_dir", "show_progress", "state", "num_threads", "gpu_id",
              "use_gpu", "data_path", "log_wandb", "wandb_project", "save_dataset", "save_dataloaders",
              "dataset_save_path", "dataloaders_save_path", "worker", *SPEED_ONLY_KEYS}
CACHE_VERSION = 1
STATISTICS_DATA_PATH = "dataset_atomic"  # default of `recbole-ext data convert` (used when a column has no config)


@dataclass
class RunSpec:
    """One training run of a cell: what :func:`recbole_ext.repro.execute.execute_run` needs."""

    key: str
    config_file: str | None
    values: dict[str, Any]
    seed: int
    # where else the same experiment may have run -> its key there, in the order records are looked
    # up (``records.find_record``): the other training precision on this device, then other devices
    # (a lent GPU). Labels read "cuda:NAME", "cpu with bf16 autocast", "cuda:NAME in fp32".
    keys_elsewhere: dict[str, str] = field(default_factory=dict)
    cell: str = ""  # "ROW on COLUMN" of the table, for people reading progress lines
    data: list | None = None  # the atomic files' fingerprint every key hashed (``data_fingerprint``)

    def keys(self) -> list[str]:
        return [self.key, *self.keys_elsewhere.values()]

    def describe(self) -> str:
        """'MODEL on CONFIG, seed N' and the table cell, as progress lines name a run."""
        where = Path(self.config_file).stem if self.config_file else "?"
        return f"{self.values.get('model')} on {where}, seed {self.seed}{f' ({self.cell})' if self.cell else ''}"

    def where(self, key: str) -> str:
        """The label of one of ``keys_elsewhere`` ('' for this run's own key)."""
        return next((label for label, other in self.keys_elsewhere.items() if other == key), "")


@dataclass
class Cell:
    row: Row
    column: Column
    state: str                     # runnable | records-only | pending | missing-data | error | statistics
    reason: str = ""
    runs: list[RunSpec] = field(default_factory=list)
    data_label: str = ""           # the dataset actually used, when --use-data replaced the column's
    data_path: str = ""            # statistics cells: where the preset's atomic files are


def _interval_lower(value: Any) -> str:
    match = re.match(r"^\s*[\[(]\s*([0-9.]+)", str(value or ""))
    return match.group(1) if match else "0"


def budget_values(table: Table, budget: str, file_values: dict[str, Any]) -> dict[str, Any]:
    """Values the budget adds on top of the paper's training values."""
    if budget not in BUDGETS:
        raise ConfigError(f"--budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    values: dict[str, Any] = {}
    if budget == "quick":
        values.update(QUICK)
        lower = _interval_lower(file_values.get("user_inter_num_interval"))
        values["user_inter_num_interval"] = f"[{lower},{QUICK_MAX_USER_INTERACTIONS}]"
    if table.kind == "efficiency":
        values.update(EFFICIENCY if budget == "paper" else {**EFFICIENCY, "epochs": 2})
    return values


def data_fingerprint(data_path: str, dataset: str) -> list:
    """Size and a hash of the first MiB of each atomic file: reconverted data misses the cache."""
    directory = Path(data_path or "dataset/") / dataset
    prints = []
    for path in sorted(directory.glob(f"{dataset}.*")) if directory.is_dir() else []:
        if path.suffix in (".inter", ".item", ".user"):
            with open(path, "rb") as handle:
                head = hashlib.sha256(handle.read(1 << 20)).hexdigest()[:16]
            prints.append([path.name, path.stat().st_size, head])
    return prints


def _fingerprint(resolved, memo: dict) -> list:
    data = (resolved.values.get("data_path"), resolved.dataset)
    if data not in memo:
        memo[data] = data_fingerprint(*data)
    return memo[data]


def cache_key(resolved, device: str, memo: dict | None = None, bf16: bool | None = None,
              data: list | None = None) -> str:
    """The run's key; ``bf16`` gives the key of the same run trained at the other precision, ``data``
    its key on atomic files of that fingerprint (default: the files on disk)."""
    config = {k: v for k, v in without_later_keys_at_former_values(resolved.as_dict()).items() if k not in NOT_HASHED}
    if bf16 is not None:
        config["bf16"] = bf16
    if not config.get("bf16"):  # `bf16: false` written out is the default, as cells cached before --bf16 have it
        config.pop("bf16", None)
    if data is None:
        data = _fingerprint(resolved, {} if memo is None else memo)
    payload = {"version": CACHE_VERSION, "config": config, "device": device, "data": data}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _match(wanted: list[str] | None, *names: str | None) -> bool:
    if not wanted:
        return True
    lowered = {w.lower() for w in wanted}
    return any(n is not None and n.lower() in lowered for n in names)


def select(table: Table, datasets: list[str] | None = None, models: list[str] | None = None) -> tuple[list[Row], list[Column]]:
    """Rows and columns chosen by ``--models`` (row id or label) and ``--datasets`` (label or preset)."""
    rows = [r for r in table.rows if _match(models, r.id, r.label)]
    columns = [c for c in table.columns if _match(datasets, c.label, c.preset)]
    # each name must match: a typo beside a good name would otherwise drop its rows without a word
    for wanted, names, what in ((models, [(r.label, r.id) for r in table.rows], "--models"),
                                (datasets, [(c.label, c.preset) for c in table.columns], "--datasets")):
        choices: dict[str, str] = {}  # matching ignores case: suggest each name once, the label first
        for pair in names:
            for choice in filter(None, pair):
                choices.setdefault(choice.lower(), choice)
        for name in wanted or ():
            if not any(_match([name], *pair) for pair in names):
                labels = ", ".join(dict.fromkeys(label for label, _ in names))
                raise ConfigError(f"{what} {name}: matches nothing in table {table.name}"
                                  f"{did_you_mean(name, choices.values())}; it has: {labels}")
    return rows, columns


def substitute_for(use_data: dict[str, str] | None, row: Row, column: Column) -> str:
    """The dataset config ``--use-data`` puts in place of the column's for this row ('' for none).

    A row's own entry (``COLUMN:ROW``) comes before the column's (``COLUMN``): rows that read item
    features need a config that loads them, and giving every row that config would change the keys
    (and so retrain) the rows that read none."""
    for target, config in (use_data or {}).items():
        label, _, row_name = target.partition(":")
        if label == column.label and row_name and _match([row_name], row.id, row.label):
            return config
    return (use_data or {}).get(column.label, "")


def _side_files_problem(resolved, row: Row) -> str:
    """Why the item/user feature files the row reads are missing ('' when they are there)."""
    from recbole_ext.data.checks import BUNDLED_WITH_RECBOLE

    if resolved.dataset in BUNDLED_WITH_RECBOLE:
        return ""
    directory = Path(resolved.values.get("data_path") or "dataset/") / resolved.dataset
    side = [directory / f"{resolved.dataset}.{kind}" for kind in row.needs
            if not (directory / f"{resolved.dataset}.{kind}").is_file()]
    return (f"{row.label} reads item/user features: provide {', '.join(str(p) for p in side)} "
            f"(recbole-ext data convert writes them from the paper's side files)") if side else ""


def _data_problem(resolved, memo: dict) -> str:
    """Why the run's atomic files are not usable ('' when they are); each dataset is read once per plan."""
    from recbole_ext.data.checks import require_atomic_files

    values = resolved.values
    key = (resolved.dataset, values.get("data_path"), repr(values.get("load_col")), repr(values.get("benchmark_filename")))
    if key not in memo:
        try:
            require_atomic_files(resolved)
            memo[key] = ""
        except (DatasetMissingError, DataFormatError) as error:
            memo[key] = str(error)
    return memo[key]


def stand_in_keys(resolved, device: str, other_devices: Iterable[str], memo: dict,
                  precision_stands_in: bool = True, data: list | None = None) -> dict[str, str]:
    """``RunSpec.keys_elsewhere``: the same experiment trained at the other precision here (bf16
    autocast vs fp32, which docs/performance.md measures to give metrics within seed noise), then on
    each other device at this precision and the other. A lent GPU's runs differ from this CPU's by
    more than that (another random stream), and they stand in already."""
    own = bool(resolved.values.get("bf16"))
    precisions = (own, not own) if precision_stands_in else (own,)
    keys = {}
    for where in (device, *(other for other in other_devices if other != device)):
        for bf16 in precisions:
            if (where, bf16) == (device, own):
                continue
            label = where if bf16 == own else f"{where} {'with bf16 autocast' if bf16 else 'in fp32'}"
            keys[label] = cache_key(resolved, where, memo, bf16=bf16, data=data)
    return keys


def plan_cell(table: Table, row: Row, column: Column, seeds: list[int], budget: str, runs_dir: Path,
              device: str, use_data: dict[str, str] | None = None, memo: dict | None = None,
              other_devices: Iterable[str] = (), bf16: bool = False,
              recorded_data: dict[str, list] | None = None) -> Cell:
    """Resolve every run of one cell; never raises for a cell that cannot run (its state says why)."""
    from recbole_ext.config import resolve
    from recbole_ext.config.loader import find_config_file, load_config_chain
    from recbole_ext.registry import resolve_model

    memo = {} if memo is None else memo

    data_label = substitute_for(use_data, row, column)
    config_name = data_label or column.config
    if table.kind == "statistics":  # counted from the preset's atomic files, nothing to train
        if not column.preset:
            return Cell(row, column, "missing-data", column.missing)
        from recbole_ext.data.checks import how_to_create
        from recbole_ext.data.stats import locate_dataset
        data_path = STATISTICS_DATA_PATH
        if column.config:
            data_path = load_config_chain(find_config_file(column.config)).values.get("data_path") or data_path
        try:
            locate_dataset(column.preset, data_path, how_to_create(column.preset))
        except DataFormatError as error:
            # no atomic files at all, but counted before: the counts are in the records
            recorded = not data_fingerprint(data_path, column.preset) \
                and _recorded_fingerprint(column.preset, recorded_data)[0] is not None
            return Cell(row, column, "records-only" if recorded else "missing-data", str(error), data_path=data_path)
        return Cell(row, column, "statistics", data_path=data_path)
    if row.pending:
        return Cell(row, column, "pending", row.pending, data_label=data_label)
    if not config_name:
        return Cell(row, column, "missing-data", column.missing, data_label=data_label)
    try:
        resolve_model(row.model)
    except UnknownNameError:
        return Cell(row, column, "pending", f"model {row.model!r} not available yet (not registered)",
                    data_label=data_label)
    try:
        config_file = find_config_file(config_name)
        file_values = load_config_chain(config_file).values
        # a column's own values (its hidden size, batch) do not follow a --use-data substitute
        per_column = {**column.set, **row.column_set.get(column.label, {})} if not data_label else {}
        base = {**table.training, **row.set, **per_column, "model": row.model}
        base.update(budget_values(table, budget, file_values))
        if bf16 and not (device == "cpu" and row.model in CPU_FP32_MODELS):
            base["bf16"] = True
    except ConfigError as error:
        return Cell(row, column, "error", str(error), data_label=data_label)
    runs, state, reason, data = [], "runnable", "", None
    for seed in seeds:
        values = {**base, "seed": seed, "state": "WARNING", "show_progress": False}
        try:
            resolved = resolve(config_file, [], values)
        except UnknownNameError as error:
            return Cell(row, column, "pending", f"model not available yet: {error}", data_label=data_label)
        except ConfigError as error:
            return Cell(row, column, "error", str(error), data_label=data_label)
        if not runs:  # data checks once per cell
            data = _fingerprint(resolved, memo)
            reason = _data_problem(resolved, memo) or _side_files_problem(resolved, row)
            if reason and data:  # files here, but not usable: the recorded ones are not these
                return Cell(row, column, "missing-data", reason, data_label=data_label)
            if reason:  # no atomic files here at all: the records' fingerprint may stand in
                data, ambiguity = _recorded_fingerprint(resolved.dataset, recorded_data)
                if data is None:
                    return Cell(row, column, "missing-data", reason + ambiguity, data_label=data_label)
                state = "records-only"
        key = cache_key(resolved, device, memo, data=data)
        # absolute paths: Ray workers need not share this process's working directory
        values.update(output_dir=str(Path(runs_dir).resolve()), run_name=key)
        if resolved.values.get("data_path"):
            values["data_path"] = os.path.abspath(resolved.values["data_path"])
        elsewhere = stand_in_keys(resolved, device, other_devices, memo, table.kind != "efficiency", data)
        runs.append(RunSpec(key, str(Path(config_file).resolve()), values, seed, elsewhere,
                            cell=f"{row.label} on {column.label}", data=data))
    return Cell(row, column, state, reason, runs=runs, data_label=data_label)


def _recorded_fingerprint(dataset: str, recorded_data: dict[str, list] | None) -> tuple[list | None, str]:
    """The one fingerprint the records name for ``dataset`` (``records.recorded_data``), else None
    and why not, for the missing-data reason."""
    fingerprints = (recorded_data or {}).get(dataset, [])
    if len(fingerprints) > 1:  # converted twice, differently: which the user means is theirs to say
        return None, (f" (records name {len(fingerprints)} different conversions of {dataset}: "
                      "convert the data to report them)")
    return (fingerprints[0], "") if fingerprints else (None, "")


def plan_table(table: Table, runs_dir: Path, datasets: list[str] | None = None, models: list[str] | None = None,
               seeds: int = 1, budget: str = "paper", use_data: dict[str, str] | None = None,
               device: str | None = None, memo: dict | None = None, other_devices: Iterable[str] = (),
               bf16: bool = False, recorded_data: dict[str, list] | None = None) -> list[Cell]:
    """Every cell of the selected rows × columns; ``memo`` shares data checks between plans.

    ``other_devices``: devices whose records may stand in for this device's runs (those recorded in
    the records directory, ``records.recorded_devices``). ``recorded_data``: the atomic-file
    fingerprints the records were trained on (``records.recorded_data``), which give the keys of
    cells whose files are not here ("records-only"). ``bf16``: runs train under bf16 autocast
    (``--bf16``); either precision's records stand in for the other's. Neither applies to efficiency
    tables: their timings are the device's and the precision's."""
    if seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    labels = [c.label for c in table.columns]
    for target in use_data or {}:
        label, _, row_name = target.partition(":")
        if label not in labels:
            raise ConfigError(f"--use-data {target}=...: table {table.name} has no column {label!r} "
                              f"(columns: {', '.join(labels)})")
        if row_name:
            column = table.columns[labels.index(label)]
            in_column = [r for r in table.rows if _row_in_column(r, column)]
            if not any(_match([row_name], r.id, r.label) for r in in_column):
                names = {n.lower(): n for r in in_column for n in (r.id, r.label)}
                raise ConfigError(f"--use-data {target}=...: column {label} of table {table.name} has no row "
                                  f"{row_name!r}{did_you_mean(row_name, names.values())}; it has: "
                                  f"{', '.join(r.label for r in in_column)}")
    rows, columns = select(table, datasets, models)
    first_seed = int(table.training.get("seed", 2020))
    seed_list = [first_seed + i for i in range(seeds)]
    device = device or device_label()
    memo = {} if memo is None else memo
    other_devices = () if table.kind == "efficiency" else tuple(other_devices)
    return [plan_cell(table, row, column, seed_list, budget, runs_dir, device, use_data, memo, other_devices, bf16,
                      recorded_data) for column in columns for row in rows if _row_in_column(row, column)]


def _row_in_column(row: Row, column: Column) -> bool:
    """A row belongs to a column when the paper prints a value there (or prints nothing anywhere)."""
    return not row.published or column.label in row.published
