"""Rebuild run records (``recbole_ext/repro/records.py``) from a table CSV that ``reproduce`` wrote,
for finished runs whose run directories were lost before records existed.

    python scripts/records_from_csv.py docs/results/fearec-t2.csv --table fearec-t2 \\
        --datasets Beauty Clothing Sports --models BPR-MF GRU4Rec --budget paper [--out docs/results]

The table is planned again with today's code and data (the same selection, one seed), which gives
each cell's run key; every "done" cell of the CSV with exactly one seed becomes a record holding its
test metrics (the CSV's values over the table's scale). Cells with more seeds are skipped: their
per-run values are not in the CSV. The records say where they came from; they carry only what the
CSV showed (no history or validation metrics). A key is computed from today's
config and the atomic files now in place: records made this way assume the data were converted
the same way as when the runs trained.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="a <table>.csv written by recbole-ext reproduce")
    parser.add_argument("--table", required=True)
    parser.add_argument("--datasets", nargs="+")
    parser.add_argument("--models", nargs="+")
    parser.add_argument("--budget", default="paper", choices=("paper", "quick"))
    parser.add_argument("--out", help="records go to OUT/records (default: the CSV's folder)")
    args = parser.parse_args(argv)

    from recbole_ext.repro.plan import plan_table
    from recbole_ext.repro.records import RECORD_FORMAT, TIMING_KEYS, read_record, records_dir, write_record
    from recbole_ext.repro.tables import load_table

    source = Path(args.csv)
    with open(source, newline="") as handle:
        lines = [line for line in csv.DictReader(handle) if line["budget"] == args.budget]
    table = load_table(args.table)
    records = records_dir(args.out or source.parent)
    cells = plan_table(table, Path("runs/unused"), args.datasets, args.models, 1, args.budget)
    written = 0
    for cell in cells:
        if cell.state != "runnable":
            continue
        mine = [line for line in lines if line["dataset"] == cell.column.label and line["row"] == cell.row.id
                and line["status"] == "done"]
        if not mine or any(line["n_seeds"] != "1" for line in mine):
            continue
        key = cell.runs[0].key
        if read_record(records, key) is not None:
            print(f"{cell.column.label}/{cell.row.label}: record {key} exists, kept")
            continue
        shown = {line["metric_key"]: float(line["ours_mean"]) for line in mine if line["ours_mean"]}
        test = {k: v / table.scale for k, v in shown.items() if k not in TIMING_KEYS and k != "peak_gpu_mem_gb"}
        write_record(records, {
            "format": RECORD_FORMAT, "key": key, "recorded": time.strftime("%Y-%m-%d %H:%M"),
            "source": f"imported from {source} by scripts/records_from_csv.py: the run directory was lost; "
                      "the key assumes today's config and atomic files",
            "test": test, "timing": {k: v for k, v in shown.items() if k in TIMING_KEYS},
            "peak_gpu_mem_gb": shown.get("peak_gpu_mem_gb"), "metrics": {}, "data": cell.runs[0].data})
        written += 1
        print(f"{cell.column.label}/{cell.row.label}: record {key} ({', '.join(f'{k}={v:.4f}' for k, v in test.items())})")
    print(f"{written} record(s) written to {records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
