"""Noisy training sequences for the robustness experiment of Rec-Denoiser (Chen et al. 2022, Fig. 2).

For every user, the interactions are ordered by time (ties keep file order, as RecBole's stable
sort does) and the last ``holdout`` ones (leave-one-out: validation and test) are left alone. In
the ``m`` training interactions before them, ``round(ratio · m)`` random items are

- ``insert`` (default): injected at uniformly random places among the real training items, which
  keep their order; an injected row takes the time midway between its neighbours (the earlier
  neighbour's when it goes first) and the other columns of its earlier real neighbour (the later
  one when it goes first), so RecBole's stable (user, time) sort keeps it where it was put;
- ``replace`` (the paper's wording, after Ma et al. 2020): swapped in for uniformly chosen training
  items, keeping their time and other columns.

Noise items are drawn uniformly from all items of the file except the user's held-out items. The
evaluation inputs then contain the noisy history too, as in the paper.

CLI (writes a new atomic dataset ``<dataset>-noise<percent>`` next to the others)::

    python -m recbole_ext.data.noise --data-path dataset_atomic --dataset denoiser-ml1m --ratio 0.1
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

NoiseMode = Literal["insert", "replace"]


def inject_noise(frame: pd.DataFrame, ratio: float, *, user: str, item: str, time: str,
                 mode: NoiseMode = "insert", holdout: int = 2, seed: int = 0,
                 mark: str | None = None) -> pd.DataFrame:
    """A copy of the interaction table ``frame`` with noisy training parts; rows ordered by (user, time).
    ``mark``: name of a boolean column to add, true on injected/replaced rows (for analysis and tests)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")
    if mode not in ("insert", "replace"):
        raise ValueError(f"mode must be 'insert' or 'replace', got {mode!r}")
    rng = np.random.default_rng(seed)
    ordered = frame.sort_values([user, time], kind="stable").reset_index(drop=True)
    if mark is not None:
        ordered[mark] = False
    all_items = ordered[item].unique()
    pieces = []
    for _, history in ordered.groupby(user, sort=False):
        train_count = max(len(history) - holdout, 0)
        count = int(round(ratio * train_count))
        if count == 0:
            pieces.append(history)
            continue
        held_out = set(history[item].iloc[train_count:])
        pool = all_items[~np.isin(all_items, list(held_out))] if held_out else all_items
        noise_items = pool[rng.integers(len(pool), size=count)]
        train, rest = history.iloc[:train_count], history.iloc[train_count:]
        if mode == "replace":
            noisy = train.copy()
            chosen = rng.choice(train_count, size=count, replace=False)
            noisy.iloc[chosen, noisy.columns.get_loc(item)] = noise_items
            if mark is not None:
                noisy.iloc[chosen, noisy.columns.get_loc(mark)] = True
        else:
            noisy = _insert(train, noise_items, rng.integers(train_count + 1, size=count), item, time, mark)
        pieces.append(pd.concat([noisy, rest]))
    return pd.concat(pieces, ignore_index=True)


def _insert(train: pd.DataFrame, noise_items: np.ndarray, gaps: np.ndarray, item: str, time: str,
            mark: str | None) -> pd.DataFrame:
    """Put noise item k after ``gaps[k]`` real items (0 = before the first)."""
    times = train[time].to_numpy(dtype=np.float64)
    source = np.maximum(gaps - 1, 0)  # the real row an injected one copies its other columns from
    rows = train.iloc[source].copy()
    rows[item] = noise_items
    if mark is not None:
        rows[mark] = True
    after = np.minimum(gaps, len(train) - 1)
    rows[time] = np.where(gaps == 0, times[0], (times[source] + times[after]) / 2.0)
    # Order: real row g−1, then the noise rows with gap g, then real row g.
    keys = np.concatenate([np.arange(len(train)) * 2 + 1, gaps * 2])
    merged = pd.concat([train, rows], ignore_index=True)
    return merged.iloc[np.argsort(keys, kind="stable")]


def _field(columns, name: str) -> str:
    for column in columns:
        if column.split(":")[0] == name:
            return column
    raise ValueError(f"no field {name!r} in atomic header {list(columns)}")


def write_noisy_dataset(data_path: str | Path, dataset: str, ratio: float, out_path: str | Path | None = None,
                        mode: NoiseMode = "insert", seed: int = 0, holdout: int = 2,
                        user_field: str = "user_id", item_field: str = "item_id",
                        time_field: str = "timestamp") -> Path:
    """Write ``<out>/<dataset>-noise<percent>/`` (its .inter noisy, other atomic files copied)."""
    source_dir = Path(data_path) / dataset
    name = f"{dataset}-noise{round(ratio * 100):g}" + ("" if mode == "insert" else "-replace")
    target_dir = Path(out_path or data_path) / name
    target_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.read_csv(source_dir / f"{dataset}.inter", sep="\t", dtype=str, keep_default_na=False)
    user, item, time = (_field(frame.columns, f) for f in (user_field, item_field, time_field))
    frame[time] = frame[time].astype(np.float64)
    noisy = inject_noise(frame, ratio, user=user, item=item, time=time, mode=mode, holdout=holdout, seed=seed)
    noisy.to_csv(target_dir / f"{name}.inter", sep="\t", index=False)
    for other in source_dir.glob(f"{dataset}.*"):
        if other.suffix != ".inter":
            shutil.copyfile(other, target_dir / f"{name}{other.suffix}")
    return target_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-path", required=True, help="folder holding <dataset>/<dataset>.inter")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--ratio", type=float, required=True, help="noise items per training item, e.g. 0.1")
    parser.add_argument("--mode", choices=["insert", "replace"], default="insert")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="output folder (default: --data-path)")
    args = parser.parse_args(argv)
    print(write_noisy_dataset(args.data_path, args.dataset, args.ratio, args.out, args.mode, args.seed))


if __name__ == "__main__":
    main()
