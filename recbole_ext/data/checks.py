"""Fail before RecBole does (deep inside pandas) when a dataset's atomic files are missing or malformed."""
from __future__ import annotations

import os
from pathlib import Path

from recbole_ext.data.atomic import check_atomic_file_cached
from recbole_ext.errors import DataFormatError, DatasetMissingError

BUNDLED_WITH_RECBOLE = {"ml-100k"}  # RecBole ignores data_path for these and reads its own copy


def atomic_file_paths(data_path: str | os.PathLike, dataset: str, benchmark_filename=None) -> list[Path]:
    """The ``.inter`` files RecBole will read for this dataset."""
    directory = Path(data_path) / dataset
    if benchmark_filename:
        return [directory / f"{dataset}.{part}.inter" for part in benchmark_filename]
    return [directory / f"{dataset}.inter"]


def _loaded_columns(load_col, kind: str):
    """Columns RecBole loads from a ``kind`` file: None = all, set() = none (the file is skipped)."""
    if load_col is None:
        return None
    if not isinstance(load_col, dict) or kind not in load_col:
        return set()
    if load_col[kind] == "*":
        return None
    return set(load_col[kind] or [])


def how_to_create(dataset: str) -> str:
    """The conversion command for a preset's atomic files (the hint of every missing-data message)."""
    from recbole_ext.data.presets import PRESETS

    preset = PRESETS.get(dataset)
    if preset is None:
        return "put RecBole atomic files there or set data_path (README: 'Datasets')"
    needs = f", the input must have {'/'.join(preset.requires)}" if preset.requires else ""
    return (f"create them with: recbole-ext data convert --preset {dataset} --format {'|'.join(preset.formats)} "
            f"--input {preset.inputs}{needs} (see configs/{preset.config} and README 'Datasets')")


def require_atomic_files(resolved) -> None:
    """Every atomic file the run reads exists and passes :func:`check_atomic_file` (a file whose
    bytes passed before is not read again: :func:`~recbole_ext.data.atomic.check_atomic_file_cached`); one-line errors."""
    dataset = resolved.dataset
    if dataset in BUNDLED_WITH_RECBOLE:
        return
    values = resolved.values
    data_path = values.get("data_path") or "dataset/"
    # dict.fromkeys: a split named twice (validation = test) is one file, checked once
    inter_files = list(dict.fromkeys(atomic_file_paths(data_path, dataset, values.get("benchmark_filename"))))
    for path in inter_files:
        if not path.is_file():
            raise DatasetMissingError(
                f"{resolved.where('dataset')}: dataset {dataset!r} needs {path.resolve()}, which does not exist; "
                f"{how_to_create(dataset)}"
            )
    options = {"field_separator": values.get("field_separator") or "\t",
               "seq_separator": values.get("seq_separator") or " ",
               "encoding": values.get("encoding") or "utf-8"}
    user_field = values.get("USER_ID_FIELD") or "user_id"
    item_field = values.get("ITEM_ID_FIELD") or "item_id"
    load_col = values.get("load_col", {"inter": [user_field, item_field]})
    directory = Path(data_path) / dataset
    side_files = [(directory / f"{dataset}.{kind}", kind, (field,))
                  for kind, field in (("item", item_field), ("user", user_field))]
    for path, kind, id_fields in [(p, "inter", (user_field, item_field)) for p in inter_files] + side_files:
        if kind != "inter" and (not path.is_file() or _loaded_columns(load_col, kind) == set()):
            continue  # RecBole reads a side file only when it exists and load_col asks for it
        report = check_atomic_file_cached(path, kind=kind, id_fields=id_fields, **options)
        report.raise_if_failed()
        if kind == "inter":
            _check_time_field(resolved, path, report.column_names(), _loaded_columns(load_col, "inter"))


def _check_time_field(resolved, path: Path, header: list[str], loaded) -> None:
    """Leave-one-out by time needs the time column both in the file and in ``load_col``.

    Without it RecBole fails late (``[timestamp] is not exist in interaction``) or, when the
    column is merely not loaded, never sorts at all. Benchmark files need none: RecBole takes each
    file as one split in file order and never sorts it (``order: TO`` is still required there, by
    ``SequentialDataset.build``).
    """
    if resolved.values.get("benchmark_filename"):
        return
    eval_args = resolved.values.get("eval_args") or {}
    if not isinstance(eval_args, dict) or eval_args.get("order") != "TO":
        return
    time_field = resolved.values.get("TIME_FIELD") or "timestamp"
    if time_field not in header:
        raise DataFormatError(
            f"{path}:1: eval_args order TO sorts by {time_field!r}, which the header lacks "
            f"({', '.join(header)}); convert with 'recbole-ext data convert' (it adds timestamps) or set order: RO")
    if loaded is not None and time_field not in loaded:
        raise DataFormatError(
            f"{resolved.where('load_col')}: load_col does not load {time_field!r} from {path.name}, so "
            f"eval_args order TO cannot sort by time; add it: load_col: {{inter: [{', '.join(sorted(loaded) or ['user_id', 'item_id'])}, {time_field}]}}")
