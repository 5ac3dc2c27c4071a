"""Start-up of a run before its first batch: RecBole's dataset, then its splits and loaders.

    python benchmarks/startup.py [--configs euler_ml1m.yaml,denoiser_ml1m.yaml] [--rounds 2] [--json PATH]

For each config (a name from ``configs/`` or a path), ``create_dataset`` and ``data_preparation``
are timed in a fresh process, once with RecBole 1.2.1's own code and once with ours (both
installed by ``compat.apply``); the variants alternate within a round:

- ``create_dataset`` reads the atomic files: RecBole with pandas' Python parser, ours with the C
  parser where it returns the same frame (``recbole_ext/data/reading.py``);
- ``data_preparation`` builds the prefix rows: RecBole in a Python loop over every interaction
  (``SequentialDataset.recbole_data_augmentation``), ours from tensor ops
  (``recbole_ext/data/augmentation.py``).

The configs' atomic files must exist (``recbole-ext reproduce --list`` prints the conversion
commands). Printed: medians over rounds of each stage and the per-round ratios recbole / ours of
each stage and of both together (median and range). Run it with nothing else busy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import write_results  # noqa: E402  (one rule for where results go)

VARIANTS = ("recbole", "ours")


def worker(config_name: str, variant: str) -> dict:
    import pandas

    import recbole_ext  # noqa: F401  (compat: our reader and augmentation are installed)
    from recbole.data import create_dataset, data_preparation
    from recbole.data.dataset import SequentialDataset
    from recbole.data.dataset import dataset as recbole_dataset_module

    from recbole_ext.config import find_config_file, resolve
    from recbole_ext.data.augmentation import patch_sequential_augmentation
    from recbole_ext.data.reading import patch_atomic_reader
    from recbole_ext.runner import recbole_config

    if variant == "recbole":
        SequentialDataset.data_augmentation = SequentialDataset.recbole_data_augmentation
        recbole_dataset_module.pd = pandas
    else:
        patch_atomic_reader()
        patch_sequential_augmentation()
    resolved = resolve(find_config_file(config_name), ["show_progress=false"])
    with tempfile.TemporaryDirectory() as scratch:
        config = recbole_config(resolved, checkpoint_dir=Path(scratch))
        started = time.perf_counter()
        dataset = create_dataset(config)
        created = time.perf_counter()
        train_data, _, _ = data_preparation(config, dataset)
        prepared = time.perf_counter()
    return {"create_dataset_s": created - started, "data_preparation_s": prepared - created,
            "training_rows": len(train_data.dataset)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="euler_ml1m.yaml,denoiser_ml1m.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return

    results: dict[str, list[dict]] = {}
    for config in args.configs.split(","):
        rounds = []
        for index in range(args.rounds):
            order = VARIANTS if index % 2 == 0 else tuple(reversed(VARIANTS))
            cells = {}
            for variant in order:
                output = subprocess.run([sys.executable, __file__, "--worker", config, variant], check=True,
                                        capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
                cells[variant] = json.loads(output.stdout.strip().splitlines()[-1])
            if cells["recbole"]["training_rows"] != cells["ours"]["training_rows"]:
                raise SystemExit(f"{config}: the variants built different datasets")
            rounds.append(cells)
        results[config] = rounds

    stages = ("create_dataset_s", "data_preparation_s", "total_s")
    for rounds in results.values():
        for cells in rounds:
            for cell in cells.values():
                cell["total_s"] = cell["create_dataset_s"] + cell["data_preparation_s"]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.rounds} rounds; "
          f"seconds are medians; ours' row: ratios recbole / ours per round, median [range]")
    print(f"{'config':<22} {'variant':<8} " + " ".join(f"{stage[:-2]:>22}" for stage in stages))
    for config, rounds in results.items():
        for variant in VARIANTS:
            shown = []
            for stage in stages:
                seconds = statistics.median(r[variant][stage] for r in rounds)
                ratios = [r["recbole"][stage] / r["ours"][stage] for r in rounds]
                ratio = f" {statistics.median(ratios):.1f}x [{min(ratios):.1f}-{max(ratios):.1f}]" if variant == "ours" else ""
                shown.append(f"{seconds:.1f} s{ratio}")
            print(f"{config:<22} {variant:<8} " + " ".join(f"{text:>22}" for text in shown))
    if args.json:
        write_results(args.json, {"argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d"),
                                  "machine": platform.processor() or platform.machine(),
                                  "cpus": os.cpu_count(), "results": results})


if __name__ == "__main__":
    main()
