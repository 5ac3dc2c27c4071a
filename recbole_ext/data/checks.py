"""Fail before RecBole does (deep inside pandas) when a dataset's atomic files are missing."""
from __future__ import annotations

import os
from pathlib import Path

from recbole_ext.errors import DatasetMissingError

BUNDLED_WITH_RECBOLE = {"ml-100k"}  # RecBole ignores data_path for these and reads its own copy


def atomic_file_paths(data_path: str | os.PathLike, dataset: str, benchmark_filename=None) -> list[Path]:
    """The ``.inter`` files RecBole will read for this dataset."""
    directory = Path(data_path) / dataset
    if benchmark_filename:
        return [directory / f"{dataset}.{part}.inter" for part in benchmark_filename]
    return [directory / f"{dataset}.inter"]


def require_atomic_files(resolved) -> None:
    dataset = resolved.dataset
    if dataset in BUNDLED_WITH_RECBOLE:
        return
    data_path = resolved.values.get("data_path") or "dataset/"
    for path in atomic_file_paths(data_path, dataset, resolved.values.get("benchmark_filename")):
        if not path.is_file():
            raise DatasetMissingError(
                f"{resolved.where('dataset')}: dataset {dataset!r} needs {path.resolve()}, which does not exist; "
                f"put RecBole atomic files there or set data_path (README: 'Datasets')"
            )
