"""Summarise a records folder (``recbole_ext/repro/records.py``): how its runs trained, per model and
hardware, and how early stopping split them. The docs' figures about a table's runs come from here.

    python scripts/records_summary.py docs/results/ml100k/records [--metric recall@10] [--best-before 20] [--runs]

Prints, per (model, hardware and precision): the number of runs, their training seconds per epoch (median, min–max)
and epochs run (min–max); over all runs, the range of epochs run; and with ``--best-before N`` the
mean of ``--metric`` (×100) over the runs whose best validation epoch came before epoch N, and
over the others. ``--runs`` first lists every run: key, model, device, best epoch, epochs run and
``--metric`` (×100). A damaged record is a one-line error naming it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def run_lines(records: list[dict], metric: str) -> list[str]:
    lines = [f"{'key':<20} {'model':<16} {'device':<24} {'best':>4} {'epochs':>6} {metric + ' x100':>14}"]
    for r in sorted(records, key=lambda r: (r["metrics"].get("model", "?"), r["test"].get(metric, 0))):
        value = f"{100 * r['test'][metric]:.2f}" if metric in r["test"] else "-"
        lines.append(f"{r['key']:<20} {r['metrics'].get('model', '?'):<16} {r.get('device', 'cpu'):<24} "
                     f"{r['metrics'].get('best_epoch', '-'):>4} {r['metrics'].get('epochs_run', '-'):>6} {value:>14}")
    return lines


def summary_lines(records: list[dict], metric: str, best_before: int | None) -> list[str]:
    from recbole_ext.repro.records import record_hardware

    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for record in records:  # timings compare within one device, CPU model and precision only
        precision = record.get("training_precision", "fp32")
        groups[(record["metrics"].get("model", "?"), f"{record_hardware(record)} ({precision})")].append(record)
    width = max([36, *(len(device) for _, device in groups)])
    lines = [f"{'model':<16} {'hardware':<{width}} {'runs':>4} {'train s/epoch: median (min-max)':>34} {'epochs run':>11}"]
    for (model, device), runs in sorted(groups.items()):
        seconds = [r["timing"]["train_s_per_epoch"] for r in runs if "train_s_per_epoch" in r.get("timing", {})]
        epochs = [r["metrics"]["epochs_run"] for r in runs if "epochs_run" in r["metrics"]]
        timing = f"{statistics.median(seconds):.2f} ({min(seconds):.2f}-{max(seconds):.2f})" if seconds else "-"
        epoch_text = f"{min(epochs)}-{max(epochs)}" if epochs else "-"
        lines.append(f"{model:<16} {device:<{width}} {len(runs):>4} {timing:>34} {epoch_text:>11}")
    epochs = [r["metrics"]["epochs_run"] for r in records if "epochs_run" in r["metrics"]]
    if epochs:
        lines.append(f"all {len(records)} runs: {min(epochs)} to {max(epochs)} epochs run")
    if best_before is not None:
        for name, keep in ((f"best epoch < {best_before}", lambda e: e < best_before),
                           (f"best epoch >= {best_before}", lambda e: e >= best_before)):
            values = [100 * r["test"][metric] for r in records
                      if "best_epoch" in r["metrics"] and metric in r["test"] and keep(r["metrics"]["best_epoch"])]
            mean = f"{statistics.fmean(values):.2f}" if values else "-"
            lines.append(f"{name}: {len(values)} runs, mean {metric} (x100) {mean}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a records folder, e.g. docs/results/ml100k/records")
    parser.add_argument("--metric", default="recall@10", help="test metric for --best-before (default: recall@10)")
    parser.add_argument("--best-before", type=int, help="split the runs at this best validation epoch")
    parser.add_argument("--runs", action="store_true", help="list every run first")
    args = parser.parse_args(argv)

    from recbole_ext.errors import RecboleExtError
    from recbole_ext.repro.records import read_record

    folder = Path(args.records)
    paths = sorted(folder.glob("*.json"))
    if not paths:
        print(f"{folder}: no records (*.json) here", file=sys.stderr)
        return 2
    try:
        records = [read_record(folder, path.stem) for path in paths]
    except RecboleExtError as error:
        print(error, file=sys.stderr)
        return 2
    print("\n".join([*(run_lines(records, args.metric) + [""] if args.runs else []),
                     *summary_lines(records, args.metric, args.best_before)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
