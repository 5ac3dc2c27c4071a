"""``recbole-ext data stats``: a converted dataset's statistics, beside the paper's published ones."""
from __future__ import annotations

import csv
import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from recbole_ext.data.atomic import check_atomic_file_cached
from recbole_ext.data.filters import counts
from recbole_ext.data.presets import Preset
from recbole_ext.errors import DataFormatError


BENCHMARK_SPLITS = ("train", "valid", "test")  # RecBole's benchmark_filename order; other split names follow


@dataclass(frozen=True)
class DatasetFiles:
    """A dataset's interaction files: ``NAME.inter``, or RecBole benchmark files ``NAME.<split>.inter``."""

    name: str
    inter: tuple[Path, ...]
    splits: tuple[str, ...] = ()  # the benchmark files' split names, in ``inter``'s order; () for NAME.inter

    def sibling(self, suffix: str) -> Path:
        """``NAME.<suffix>`` beside the interaction files (``item``, ``meta.json``)."""
        return self.inter[0].parent / f"{self.name}.{suffix}"

    def __str__(self) -> str:
        return str(self.sibling("{" + ",".join(self.splits) + "}.inter")) if self.splits else str(self.inter[0])


def locate_dataset(name: str | os.PathLike, data_path: str | os.PathLike = "dataset_atomic",
                   how_to_fix: str = "convert the dataset first ('recbole-ext data convert') or pass --data-path",
                   ) -> DatasetFiles:
    """``NAME`` (under ``data_path``), a dataset folder, or an ``.inter`` file -> its interaction files:
    ``NAME.inter``, or the benchmark files ``NAME.<split>.inter`` of an already split dataset.
    ``how_to_fix`` ends the error when there are none (the caller knows the exact command)."""
    candidate = Path(name)
    if candidate.is_file():
        return DatasetFiles(candidate.name.removesuffix(".inter"), (candidate,))
    directory = candidate if candidate.is_dir() else Path(data_path) / str(name)
    dataset = directory.name
    plain = directory / f"{dataset}.inter"
    if plain.is_file():
        return DatasetFiles(dataset, (plain,))
    parts = {path.name[len(dataset) + 1:-len(".inter")]: path
             for path in directory.glob(f"{glob.escape(dataset)}.*.inter")} if directory.is_dir() else {}
    if not parts:
        raise DataFormatError(f"{plain}: no such file (nor benchmark files {dataset}.<split>.inter); {how_to_fix}")
    splits = sorted(parts, key=lambda split: (BENCHMARK_SPLITS.index(split) if split in BENCHMARK_SPLITS
                                              else len(BENCHMARK_SPLITS), split))
    return DatasetFiles(dataset, tuple(parts[split] for split in splits), tuple(splits))


def read_meta(files: DatasetFiles) -> dict:
    meta_path = files.sibling("meta.json")
    if not meta_path.is_file():
        return {}
    try:
        return json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(f"{meta_path}: unreadable meta file ({error})") from None


def _read_ids(path: Path, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """The id columns of a checked atomic file, as strings."""
    check_atomic_file_cached(path, kind=kind).raise_if_failed()
    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE,
                        usecols=lambda c: c.split(":")[0] in columns)
    frame.columns = [c.split(":")[0] for c in frame.columns]
    return frame


def dataset_stats(files: DatasetFiles) -> dict:
    """Counts of the (checked) interaction files, over all splits of a benchmark dataset (``rows``:
    each split's); ``items_with_item_file`` adds ids only the ``.item`` file has; ``reviews`` comes
    from the meta file of a converted CTR dataset (the converter counted it before cutting histories)."""
    frames = [_read_ids(path, "inter", ("user_id", "item_id")) for path in files.inter]
    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    result = counts(frame)
    if files.splits:
        result["rows"] = {split: len(part) for split, part in zip(files.splits, frames)}
    item_file = files.sibling("item")
    if item_file.is_file():
        items = _read_ids(item_file, "item", ("item_id",))
        result["items_with_item_file"] = int(len(set(items["item_id"]) | set(frame["item_id"])))
    reviews = read_meta(files).get("counts", {}).get("written", {}).get("reviews")
    if reviews is not None:
        result["reviews"] = reviews
    return result


def _fmt(value, key: str) -> str:
    if value is None:
        return "-"
    if key == "sparsity":
        return f"{100 * value:.2f}%"
    if key == "avg_length":
        return f"{value:.2f}"
    return f"{value:,}"


def stats_lines(files: DatasetFiles, ours: dict, preset: Preset | None) -> list[str]:
    # CTR rows per user or per user-item pair mean nothing: benchmark datasets show rows per split instead.
    keys = ("users", "items", "interactions") + (() if files.splits else ("avg_length", "sparsity"))
    lines = [f"{files}"]
    rows = ([f"  rows per split: {', '.join(f'{split} {n:,}' for split, n in ours['rows'].items())}"]
            if files.splits else [])
    if preset is None:
        for key in keys:
            lines.append(f"  {key:<13}{_fmt(ours[key], key):>12}")
        if "items_with_item_file" in ours:
            lines.append(f"  items incl. .item-only ids: {ours['items_with_item_file']:,}")
        return lines + rows
    pub = preset.published
    lines.append(f"  preset {preset.name}: {pub.source}")
    pad = " (printed with [PAD]; compared as printed - 1)" if pub.includes_pad else ""
    lines.append(f"  {'':<13}{'ours':>12}{'published':>14}{'diff':>10}{pad}")
    mine = dict(ours)
    # RecBole counts the .item file's ids too (and, through alias_of_item_id, a benchmark's history ids).
    if (preset.keep_unrated_items or files.splits) and "items_with_item_file" in ours:
        mine["items"] = ours["items_with_item_file"]
    if pub.includes_pad:
        # The paper's sparsity and average use the padded counts; recompute ours the same way.
        mine["sparsity"] = 1 - mine["interactions"] / ((mine["users"] + 1) * (mine["items"] + 1))
    for key in keys:
        published = pub.real(key)
        label = key
        if key == "interactions" and pub.interactions_are != "interactions":
            label = pub.interactions_are  # the paper counted something else (reviews of a CTR set)
            mine[key] = ours.get(label)
        if published is None or mine[key] is None:
            lines.append(f"  {label:<13}{_fmt(mine[key], key):>12}{_fmt(published, key):>14}{'':>10}")
            continue
        diff = mine[key] - published
        approx = " (published value is approximate)" if key in pub.approximate else ""
        if key == "sparsity":
            diff_text = f"{100 * diff:+.2f}pp"
        elif key == "avg_length":
            diff_text = f"{diff:+.2f}"
        else:
            diff_text = f"{diff:+,}"
        lines.append(f"  {label:<13}{_fmt(mine[key], key):>12}{_fmt(published, key):>14}{diff_text:>10}{approx}")
    lines.extend(rows)
    for note in preset.notes:
        lines.append(f"  note: {note}")
    return lines
