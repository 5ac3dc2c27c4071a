"""After a sweep: the results table (CSV + markdown), the best config as YAML, a plot.

Rows come from Ray's result grid (each trial's reports); a trial's score is its best validated
epoch's metric (the final report of a finished trial carries exactly that).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from recbole_ext.config import load_config_chain, resolve
from recbole_ext.config.loader import apply_overrides
from recbole_ext.tune.sweep import Sweep, set_arg

STATUS_ORDER = {"finished": 0, "stopped": 1, "error": 2, "not run": 3}


@dataclass
class TrialRow:
    trial_id: str
    status: str          # finished | stopped (by the scheduler) | error | not run
    params: dict[str, Any]
    score: float         # best validated epoch's sweep metric (nan when none was reported)
    epochs: int          # validated epochs reported
    best_epoch: int | None
    test: dict[str, float]
    valid: dict[str, float]
    node_id: str
    run_dir: str
    error: str = ""


def _prefixed(row: dict[str, Any], prefix: str) -> dict[str, float]:
    return {k[len(prefix):]: float(v) for k, v in row.items()
            if k.startswith(prefix) and isinstance(v, (int, float)) and not _isnan(v)}


def _is_final(report: dict[str, Any]) -> bool:
    return report.get("finished") == True  # noqa: E712  (True, numpy's True_ or 1.0; NaN where absent)


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def rows_from_results(results, sweep: Sweep) -> list[TrialRow]:
    """One row per trial of a Ray ``ResultGrid``, best first (finished trials before the others)."""
    rows = []
    key = f"valid/{sweep.metric_key}"
    for result in results:
        frame = result.metrics_dataframe
        reports = frame.to_dict("records") if frame is not None and len(frame) else []
        params = {d.key: (result.config or {}).get(d.key) for d in sweep.space}  # None: never started (interrupted sweep)
        trial_id = (result.metrics or {}).get("trial_id") or Path(result.path).name
        epochs = [r for r in reports if not _is_final(r)]
        final = next((r for r in reports if _is_final(r)), None)
        scored = [r[key] for r in reports if key in r and not _isnan(r[key])]
        if final is not None:
            score = float(final[key])
        elif scored:
            score = float(max(scored) if sweep.mode == "max" else min(scored))
        else:
            score = math.nan
        error = str(result.error).strip().splitlines()[-1] if result.error else ""
        status = "error" if error else "finished" if final is not None else "stopped" if reports else "not run"
        last = reports[-1] if reports else {}
        best_epoch = final.get("best_epoch") if final is not None else None
        rows.append(TrialRow(
            trial_id, status, params, score, len(epochs),
            None if best_epoch is None or _isnan(best_epoch) else int(best_epoch),
            _prefixed(final, "test/") if final else {}, _prefixed(final or last, "valid/"),
            str(last.get("node_id", "")), str(last.get("run_dir", "")), error))
    sign = -1 if sweep.mode == "max" else 1
    rows.sort(key=lambda r: (STATUS_ORDER[r.status] > 1, math.isnan(r.score), sign * (0 if math.isnan(r.score) else r.score)))
    return rows


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else str(value)


def write_csv(rows: list[TrialRow], sweep: Sweep, path: Path) -> None:
    test_keys = sorted({k for r in rows for k in r.test})
    valid_keys = sorted({k for r in rows for k in r.valid})  # a stopped trial's: its last epoch's
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["rank", "trial_id", "status", *[d.key for d in sweep.space], f"best_valid_{sweep.metric_key}",
                         "epochs", "best_epoch", *[f"valid_{k}" for k in valid_keys], *[f"test_{k}" for k in test_keys],
                         "node_id", "run_dir", "error"])
        for rank, row in enumerate(rows, 1):
            writer.writerow([rank, row.trial_id, row.status, *[_cell(row.params[d.key]) for d in sweep.space],
                             _cell(row.score), row.epochs, _cell(row.best_epoch),
                             *[_cell(row.valid.get(k, math.nan)) for k in valid_keys],
                             *[_cell(row.test.get(k, math.nan)) for k in test_keys], row.node_id, row.run_dir, row.error])


def write_markdown(rows: list[TrialRow], sweep: Sweep, path: Path) -> None:
    metric = sweep.metric_key
    header = ["#", "trial", *[d.key for d in sweep.space], f"valid {metric}", f"test {metric}", "epochs", "status"]
    lines = [f"# {sweep.name}: valid {metric} ({sweep.mode}), {len(rows)} trials", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rank, row in enumerate(rows, 1):
        cells = [rank, row.trial_id, *[_cell(row.params[d.key]) for d in sweep.space], _cell(row.score),
                 _cell(row.test.get(metric, math.nan)), row.epochs, row.status + (f": {row.error}" if row.error else "")]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def best_config(row: TrialRow, sweep: Sweep, config_file: Path, overrides: list[str]) -> dict[str, Any]:
    """The user-level config of a trial: the base file's keys with the trial's values applied.

    Keeps the keys that decide the score (``valid_metric``, thread count) and drops the ones that
    only place the run (``output_dir``, ``run_name``).
    """
    run_config = yaml.safe_load((Path(row.run_dir) / "config.yaml").read_text()) if row.run_dir else {}
    merged = load_config_chain(config_file)
    managed = [set_arg("valid_metric", sweep.metric), set_arg("valid_metric_bigger", sweep.mode == "max")]
    if run_config.get("num_threads"):
        managed.append(set_arg("num_threads", run_config["num_threads"]))
    apply_overrides(merged, [*sweep.fixed_overrides(), *overrides, *sweep.point_overrides(row.params), *managed])
    return merged.values


def write_best_config(row: TrialRow, sweep: Sweep, config_file: Path, overrides: list[str], path: Path) -> None:
    values = best_config(row, sweep, config_file, overrides)
    header = (f"# Best trial {row.trial_id} of sweep {sweep.name} ({sweep.path.name}): valid {sweep.metric} = "
              f"{row.score:.6g} (best epoch {row.best_epoch}).\n# Base config: {config_file}\n"
              f"# Rerun: recbole-ext run --config {path}\n")
    path.write_text(header + yaml.safe_dump(values, sort_keys=False))
    resolve(path)  # it must be a valid config on its own


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def plot_metric(rows: list[TrialRow], sweep: Sweep, path: Path) -> bool:
    """One panel per swept key: the metric of every scored trial against that key's value."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scored = [r for r in rows if not math.isnan(r.score)]
    if not scored:
        return False
    panels = len(sweep.space)
    columns = min(panels, 3)
    figure, axes = plt.subplots((panels + columns - 1) // columns, columns, figsize=(4.2 * columns, 3.4 * ((panels + columns - 1) // columns)),
                                squeeze=False)
    colours = {"finished": "tab:blue", "stopped": "tab:orange", "error": "tab:red", "not run": "tab:gray"}
    for axis, dim in zip(axes.flat, sweep.space):
        values = [r.params[dim.key] for r in scored]
        if _numeric(values):
            xs = values
            if dim.logarithmic or (min(values) > 0 and max(values) / min(values) >= 10):
                axis.set_xscale("log")
                axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        else:
            labels = list(dict.fromkeys(str(v) for v in values))
            xs = [labels.index(str(v)) for v in values]
            axis.set_xticks(range(len(labels)), [label[:18] for label in labels], rotation=30, ha="right")
        for status, colour in colours.items():
            points = [(x, r.score) for x, r in zip(xs, scored) if r.status == status]
            if points:
                axis.scatter(*zip(*points), color=colour, label=status, alpha=0.8)
        axis.set_xlabel(dim.key)
        axis.set_ylabel(f"valid {sweep.metric}")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[panels:]:
        axis.set_visible(False)
    axes.flat[0].legend(fontsize="small")
    figure.suptitle(f"{sweep.name}: valid {sweep.metric} ({sweep.mode}) per trial")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
