"""Share of training wall time spent in RecBole's training loader (collate, transform, negative sampling).

    python benchmarks/data_share.py [--datasets ml-100k,fearec-beauty] [--losses CE,BPR] [--batch-sizes 2048,256]
                                    [--batches N] [--bucketing K] [--threads N] [--quick] [--json]

Our SeqTransformer (RecBole's SASRec defaults, length 50, leave-one-out by time) trains one epoch
(or its first ``--batches N`` batches) through our trainer's own epoch loop
(``recbole_ext.trainer.trainer_class(config)._train_epoch``), so whatever the trainer does to the
batches (``length_bucketing``, bf16, trimming in the model) is what is measured. Loader time is the
wall time inside the loader's ``collate_fn``: RecBole builds every training batch there (rows sliced
from the dataset, the transform, and for BPR the negative sampler's draws), whether the batch comes
from RecBole's iterator or from our length-bucketed epoch. Everything else in the epoch is
``compute`` (forward, backward, Adam, the trainer's bookkeeping; with bucketing, its per-epoch
length sort too). Losses: ``CE`` over all items (no
negatives) and ``BPR`` with one uniformly sampled negative per row.

Each (dataset, loss, batch size) runs in a fresh subprocess (``train_step.run_rounds``; one round
unless ``--rounds``). Printed: batches, seconds in the loader, seconds in compute, the loader's
share, and the loader's milliseconds per batch. ``--bucketing K`` sets ``length_bucketing: K``
(only once the trainer has that key). ``--quick``: smoke mode (ml-100k, batch 256, 3 batches per run; its
numbers mean nothing). ``--json``: also write ``benchmarks/results/data_share.json``.
Run it with nothing else busy on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import train_step

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import write_results  # noqa: E402  (one rule for where results go)
from eval_throughput import DATASETS, has_config_key, timed

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "data_share.json"
LOSSES = {
    "CE": {"loss_type": "CE", "train_neg_sample_args": None},
    "BPR": {"loss_type": "BPR", "train_neg_sample_args": {"distribution": "uniform", "sample_num": 1}},
}


class EpochCut(Exception):
    """Raised by the loader when ``--batches N`` batches have been trained."""


def cut_after(collate, limit: int):
    """``collate`` that ends the epoch on its ``limit + 1``-th call (batches are built lazily, one
    before each step, by RecBole's single-process iterator and by the bucketed epoch alike)."""
    calls = 0

    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        if limit and calls > limit:
            raise EpochCut
        return collate(*args, **kwargs)

    return wrapper


def worker(label: str, args) -> dict:
    import torch

    from recbole_ext.trainer import trainer_class

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, loss = label.split(":")
    overrides = {**DATASETS[dataset], **LOSSES[loss]}
    if args.bucketing:
        overrides["length_bucketing"] = args.bucketing
    config, train_data, model = train_step.recbole_setup("ours-fp32", args, dataset, overrides)
    trainer = trainer_class(config)(config, model)
    totals: dict[str, float] = {}
    # RecBole's iterator and the bucketed epoch both read the loader's collate_fn when they build a batch.
    train_data.collate_fn = cut_after(timed(train_data.collate_fn, totals, "loader"), args.steps)
    batches = min(args.steps, len(train_data)) if args.steps else len(train_data)
    started = time.perf_counter()
    try:
        trainer._train_epoch(train_data, epoch_idx=0)
    except EpochCut:
        pass
    total = time.perf_counter() - started
    loader = totals.get("loader", 0.0)
    return {"label": label, "dataset": dataset, "loss": loss, "batch": args.batch, "batches": batches,
            "all_batches": len(train_data), "loader_s": loader, "compute_s": total - loader, "total_s": total,
            "threads": torch.get_num_threads(),
            "length_bucketing": args.bucketing, "trim_padding": bool(config["trim_padding"]) if "trim_padding" in config else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train_step.add_step_arguments(parser)
    parser.set_defaults(rounds=1, steps=0)
    parser.add_argument("--datasets", default="ml-100k,fearec-beauty")
    parser.add_argument("--losses", default="CE,BPR")
    parser.add_argument("--batch-sizes", default="2048,256")
    parser.add_argument("--batches", type=int, default=None, help="stop each epoch after N batches (default: whole epoch)")
    parser.add_argument("--bucketing", type=int, default=0, help="length_bucketing pool size (0: off)")
    parser.add_argument("--quick", action="store_true", help="smoke mode: ml-100k, batch 256, 3 batches per run")
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.batches is not None:
        args.steps = args.batches  # run_rounds forwards --steps to the workers
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    if args.bucketing and not has_config_key("length_bucketing"):
        parser.error("--bucketing: this checkout has no length_bucketing key yet")
    if args.quick:
        args.datasets, args.batch_sizes, args.steps = "ml-100k", "256", args.steps or 3
    datasets, losses = args.datasets.split(","), args.losses.split(",")
    for name, known, given in (("--datasets", DATASETS, datasets), ("--losses", LOSSES, losses)):
        if set(given) - set(known):
            parser.error(f"{name}: unknown {', '.join(sorted(set(given) - set(known)))} (known: {', '.join(known)})")
    labels = [f"{dataset}:{loss}" for dataset in datasets for loss in losses]

    rows = []
    for batch in (int(size) for size in args.batch_sizes.split(",")):
        args.batch = batch
        rounds = train_step.run_rounds(__file__, labels, args, ["--bucketing", str(args.bucketing)])
        for label in labels:
            per_round = [r[label] for r in rounds]
            rows.append({**per_round[0], "loader_s": statistics.median(r["loader_s"] for r in per_round),
                         "compute_s": statistics.median(r["compute_s"] for r in per_round), "rounds": per_round})
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{rows[0]['threads']}; length {args.length}; trim_padding {rows[0]['trim_padding']}, length_bucketing "
          f"{args.bucketing}; medians over {args.rounds} round(s){'; QUICK MODE (smoke only, numbers mean nothing)' if args.quick else ''}")
    print(f"{'dataset':<14} {'loss':<4} {'batch':>5} {'batches':>11} {'loader s':>9} {'compute s':>10} {'loader share':>13} "
          f"{'loader ms/batch':>16}")
    for row in rows:
        share = row["loader_s"] / (row["loader_s"] + row["compute_s"])
        print(f"{row['dataset']:<14} {row['loss']:<4} {row['batch']:>5} {row['batches']:>5}/{row['all_batches']:<5} "
              f"{row['loader_s']:>9.2f} {row['compute_s']:>10.2f} {share:>13.1%} {1000 * row['loader_s'] / row['batches']:>16.1f}")
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "date": time.strftime("%Y-%m-%d"), "quick": args.quick, "argv": sys.argv[1:]}
        write_results(RESULTS, {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main()
