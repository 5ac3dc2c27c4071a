"""Wall time of one small sweep run three ways on the same machine (meant for 2 cores):

- ``1x2``: one trial at a time with 2 CPUs (2 torch threads)  -- baseline
- ``2x1``: two trials at a time with 1 CPU each (1 thread each)
- ``1x1``: one trial at a time with 1 CPU (1 thread; shows what the second core buys)

    python benchmarks/tune_concurrency.py [--config quickstart_ml100k.yaml] [--trials 4] [--epochs 3] [--rounds 2]
    python benchmarks/tune_concurrency.py --quick    # smoke run: tiny fixture, 2 trials, 1 epoch, 1 round

Each setting runs the same learning-rate grid through ``recbole-ext tune`` in a fresh process
(Ray start and imports included, as a user sees it); rounds alternate the settings so a drift in
machine load hits all of them. Writes ``benchmarks/results/tune_concurrency.json`` (not in ``--quick``) and
prints a table of median wall times and their ratio to ``1x2``.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

SETTINGS = {"1x2": (1, 2), "2x1": (2, 1), "1x1": (1, 1)}  # name: (max concurrent, CPUs per trial)
ROOT = Path(__file__).resolve().parents[1]


def sweep_text(trials: int, epochs: int) -> str:
    rates = [round(0.001 * 1.6 ** i, 6) for i in range(trials)]
    return (f"metric: NDCG@10\nmode: max\nscheduler: none\nspace:\n  learning_rate: {{grid: {rates}}}\n"
            f"set: {{epochs: {epochs}, stopping_step: {epochs + 1}}}\n")


def run_setting(name: str, config: str, sweep: Path, workdir: Path, round_index: int) -> float:
    concurrent, cpus = SETTINGS[name]
    command = [sys.executable, "-m", "recbole_ext", "tune", "--config", config, "--sweep", str(sweep),
               "--max-concurrent", str(concurrent), "--cpus-per-trial", str(cpus),
               "--output-dir", str(workdir), "--name", f"{name}-{round_index}"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{name}: recbole-ext tune failed:\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="quickstart_ml100k.yaml")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--quick", action="store_true", help="tiny fixture, 2 trials, 1 epoch, 1 round")
    parser.add_argument("--output", default=None,
                        help="results file (default: benchmarks/results/tune_concurrency.json; nothing in --quick)")
    args = parser.parse_args()
    if args.quick:
        args.config, args.trials, args.epochs, args.rounds = str(ROOT / "tests" / "configs" / "tiny_ml100k.yaml"), 2, 1, 1

    times: dict[str, list[float]] = {name: [] for name in args.settings}
    with tempfile.TemporaryDirectory(prefix="tune_concurrency-") as scratch:
        sweep = Path(scratch) / "lr_grid.yaml"
        sweep.write_text(sweep_text(args.trials, args.epochs))
        for round_index in range(args.rounds):
            order = args.settings if round_index % 2 == 0 else list(reversed(args.settings))
            for name in order:
                times[name].append(run_setting(name, args.config, sweep, Path(scratch), round_index))
                print(f"round {round_index + 1}/{args.rounds} {name}: {times[name][-1]:.1f} s", flush=True)

    baseline = statistics.median(times.get("1x2") or next(iter(times.values())))
    rows = {name: {"max_concurrent": SETTINGS[name][0], "cpus_per_trial": SETTINGS[name][1], "wall_s": values,
                   "median_s": statistics.median(values), "ratio_to_1x2": statistics.median(values) / baseline}
            for name, values in times.items()}
    result = {"command": " ".join(["python", "benchmarks/tune_concurrency.py", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d"), "machine": {"cpus": len(os.sched_getaffinity(0)),
                                                             "processor": platform.processor() or platform.machine()},
              "config": args.config, "trials": args.trials, "epochs": args.epochs, "rounds": args.rounds, "settings": rows}
    target = results_target(args.output, args.quick, ROOT / "benchmarks" / "results" / "tune_concurrency.json")
    if target:
        write_results(target, result)
    print(f"\n{args.trials} trials x {args.epochs} epochs of {args.config}, median of {args.rounds} rounds")
    print("| setting | concurrent x CPUs | median wall (s) | vs 1x2 |\n|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['max_concurrent']} x {row['cpus_per_trial']} | {row['median_s']:.1f} | {row['ratio_to_1x2']:.2f} |")
    if target:
        print(f"\nwritten: {target}")


if __name__ == "__main__":
    main()
