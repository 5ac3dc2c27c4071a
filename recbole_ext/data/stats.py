"""``recbole-ext data stats``: a converted dataset's statistics, beside the paper's published ones."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pandas as pd

from recbole_ext.data.atomic import check_atomic_file
from recbole_ext.data.filters import counts
from recbole_ext.data.presets import Preset
from recbole_ext.errors import DataFormatError


def locate_inter(name: str | os.PathLike, data_path: str | os.PathLike = "dataset_atomic") -> Path:
    """``NAME`` (under ``data_path``), a dataset folder, or an ``.inter`` file -> the ``.inter`` path."""
    candidate = Path(name)
    if candidate.is_file():
        return candidate
    if candidate.is_dir():
        return candidate / f"{candidate.name}.inter"
    path = Path(data_path) / str(name) / f"{name}.inter"
    if not path.is_file():
        raise DataFormatError(f"{path}: no such file; convert the dataset first ('recbole-ext data convert') "
                              f"or pass --data-path")
    return path


def read_meta(inter: Path) -> dict:
    meta_path = inter.with_name(inter.name[: -len(".inter")] + ".meta.json")
    if not meta_path.is_file():
        return {}
    try:
        return json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(f"{meta_path}: unreadable meta file ({error})") from None


def dataset_stats(inter: Path) -> dict:
    """Counts of a (checked) ``.inter`` file; ``items_with_item_file`` adds ids only the ``.item`` file has."""
    check_atomic_file(inter, kind="inter").raise_if_failed()
    frame = pd.read_csv(inter, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE,
                        usecols=lambda c: c.split(":")[0] in ("user_id", "item_id"))
    frame.columns = [c.split(":")[0] for c in frame.columns]
    result = counts(frame)
    item_file = inter.with_suffix(".item")
    if item_file.is_file():
        check_atomic_file(item_file, kind="item").raise_if_failed()
        items = pd.read_csv(item_file, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE,
                            usecols=lambda c: c.split(":")[0] == "item_id")
        result["items_with_item_file"] = int(len(set(items.iloc[:, 0]) | set(frame["item_id"])))
    return result


def _fmt(value, key: str) -> str:
    if value is None:
        return "-"
    if key == "sparsity":
        return f"{100 * value:.2f}%"
    if key == "avg_length":
        return f"{value:.2f}"
    return f"{value:,}"


def stats_lines(inter: Path, ours: dict, preset: Preset | None) -> list[str]:
    lines = [f"{inter}"]
    if preset is None:
        for key in ("users", "items", "interactions", "avg_length", "sparsity"):
            lines.append(f"  {key:<13}{_fmt(ours[key], key):>12}")
        if "items_with_item_file" in ours:
            lines.append(f"  items incl. .item-only ids: {ours['items_with_item_file']:,}")
        return lines
    pub = preset.published
    lines.append(f"  preset {preset.name}: {pub.source}")
    pad = " (printed with [PAD]; compared as printed - 1)" if pub.includes_pad else ""
    lines.append(f"  {'':<13}{'ours':>12}{'published':>14}{'diff':>10}{pad}")
    mine = dict(ours)
    if preset.keep_unrated_items and "items_with_item_file" in ours:
        mine["items"] = ours["items_with_item_file"]  # RecBole counts the .item file's ids too
    if pub.includes_pad:
        # The paper's sparsity and average use the padded counts; recompute ours the same way.
        mine["sparsity"] = 1 - mine["interactions"] / ((mine["users"] + 1) * (mine["items"] + 1))
    for key in ("users", "items", "interactions", "avg_length", "sparsity"):
        published = pub.real(key)
        if published is None:
            lines.append(f"  {key:<13}{_fmt(mine[key], key):>12}{'-':>14}{'':>10}")
            continue
        diff = mine[key] - published
        approx = " (published value is approximate)" if key in pub.approximate else ""
        if key == "sparsity":
            diff_text = f"{100 * diff:+.2f}pp"
        elif key == "avg_length":
            diff_text = f"{diff:+.2f}"
        else:
            diff_text = f"{diff:+,}"
        lines.append(f"  {key:<13}{_fmt(mine[key], key):>12}{_fmt(published, key):>14}{diff_text:>10}{approx}")
    for note in preset.notes:
        lines.append(f"  note: {note}")
    return lines
