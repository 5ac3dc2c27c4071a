"""Print a markdown table of finished runs (``recbole-ext run`` or sweep trial directories).

    python scripts/runs_table.py RUN_DIR [RUN_DIR ...] [--metrics ndcg@10,hit@10] [--label KEY ...]

Each directory's ``metrics.json`` gives the best validated epoch, its validation metric and the test
metrics; ``config.yaml`` gives the labels (``--label position`` prints the run's ``position`` key).
Runs that did not finish are listed with their status, never with numbers. With ``--mean-over seed``
runs that differ only in that key are averaged (mean ± sample std over n runs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml


def load_run(run_dir: Path) -> dict:
    metrics_file = run_dir / "metrics.json"
    if not metrics_file.is_file():
        raise SystemExit(f"{run_dir}: no metrics.json (not a run directory)")
    metrics = json.loads(metrics_file.read_text())
    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    return {"dir": run_dir, "metrics": metrics, "config": config}


def label(run: dict, keys: list[str]) -> str:
    parts = [run["metrics"].get("model", "?")]
    for key in keys:
        value = run["config"].get(key)
        if isinstance(value, dict):
            value = value.get("type", value)
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metrics", default="ndcg@10,hit@10", help="test metrics to show (RecBole's lower-case names)")
    parser.add_argument("--label", action="append", default=[], help="config key to name a run by; repeatable")
    parser.add_argument("--mean-over", default=None, help="average runs whose labels differ only in this key")
    args = parser.parse_args(argv)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]

    groups: dict[str, list[dict]] = {}
    unfinished = []
    for run_dir in args.runs:
        run = load_run(run_dir)
        if run["metrics"].get("status") != "finished":
            unfinished.append(f"{run_dir}: {run['metrics'].get('status')}")
            continue
        keys = [k for k in args.label if k != args.mean_over]
        groups.setdefault(label(run, keys), []).append(run)

    header = ["run", "n", "best epoch", "epochs", "valid metric", *(f"test {m}" for m in metrics), "wall min"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, runs in groups.items():
        first = runs[0]["metrics"]
        missing = [m for m in metrics if any(m not in r["metrics"]["test"] for r in runs)]
        if missing:
            raise SystemExit(f"{runs[0]['dir']}: test metrics {missing} not recorded; it has {sorted(first['test'])}")
        row = [name, str(len(runs)),
               "/".join(str(r["metrics"]["best_epoch"]) for r in runs),
               "/".join(str(r["metrics"]["epochs_run"]) for r in runs),
               f"{first['valid_metric']} {cell([r['metrics']['best_valid_score'] for r in runs])}",
               *(cell([r["metrics"]["test"][m] for r in runs]) for m in metrics),
               f"{statistics.mean(r['metrics']['wall_time_s'] for r in runs) / 60:.1f}"]
        print("| " + " | ".join(row) + " |")
    for line in unfinished:
        print(f"not finished: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
