"""Start-up of a run before its first batch: RecBole's dataset, then its splits and loaders.

    python benchmarks/startup.py [--configs euler_ml1m.yaml,denoiser_ml1m.yaml] [--rounds 2] [--json PATH]

For each config (a name from ``configs/`` or a path), ``create_dataset`` and ``data_preparation``
are timed in a fresh process, once with RecBole 1.2.1's own prefix augmentation
(``SequentialDataset.recbole_data_augmentation``, a Python loop over every interaction) and once
with ours (``recbole_ext/data/augmentation.py``, installed by ``compat.apply``); the variants
alternate within a round. The configs' atomic files must exist (``recbole-ext reproduce --list``
prints the conversion commands). Printed: medians over rounds of each stage and the ratio of
``data_preparation`` times per round (median and range). Run it with nothing else busy.
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

VARIANTS = ("recbole", "ours")


def worker(config_name: str, variant: str) -> dict:
    import recbole_ext  # noqa: F401  (compat: our augmentation is installed)
    from recbole.data import create_dataset, data_preparation
    from recbole.data.dataset import SequentialDataset

    from recbole_ext.config import find_config_file, resolve
    from recbole_ext.runner import recbole_config

    if variant == "recbole":
        SequentialDataset.data_augmentation = SequentialDataset.recbole_data_augmentation
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

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; {args.rounds} rounds, "
          f"medians; data_preparation ratio recbole / ours per round (median [range])")
    print(f"{'config':<22} {'variant':<8} {'create_dataset s':>16} {'data_preparation s':>18} {'ratio':>18}")
    for config, rounds in results.items():
        ratios = [r["recbole"]["data_preparation_s"] / r["ours"]["data_preparation_s"] for r in rounds]
        for variant in VARIANTS:
            created = statistics.median(r[variant]["create_dataset_s"] for r in rounds)
            prepared = statistics.median(r[variant]["data_preparation_s"] for r in rounds)
            ratio = f"{statistics.median(ratios):.1f}x [{min(ratios):.1f}-{max(ratios):.1f}]" if variant == "ours" else ""
            print(f"{config:<22} {variant:<8} {created:>16.1f} {prepared:>18.1f} {ratio:>18}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d"),
                                               "machine": platform.processor() or platform.machine(),
                                               "cpus": os.cpu_count(), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
