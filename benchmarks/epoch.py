"""Training cost of a Beauty epoch: our models against stock RecBole 1.2.1's (SASRec, or FEARec
configured as the paper's model).

    python benchmarks/epoch.py --model fearec [--quick] [--threads N] [--epoch-batches N] [--startup-samples N]
                               [--variants stock,stock-fixed,ours,ours-bf16] [--rounds R] [--json PATH]
    python benchmarks/epoch.py --model sasrec --tasks epoch --variants stock,ours,ours-bucket16,ours-bf16-bucket16

Two measurements, each variant in a fresh subprocess (so process-wide settings cannot leak):

1. **Epoch on Beauty** (``dataset_atomic/fearec-beauty``: length 50, d 64, 2 layers, lr 0.001,
   dropout 0.5, CE): one pass over RecBole's training loader (loader, forward, backward, Adam), one
   run. ``--model sasrec``: RecBole's SASRec with its defaults (batch 2048) against SeqTransformer.
   ``--model fearec``: the FEARec paper's protocol (batch 256) and model for both: contrast ``us_x``
   (τ 1, dot, λ1 0.1), FReg on (``us_x``, 0.1), dual domain, ramp (α 0.8, γ 0.1, m 1); RecBole's own
   defaults would switch CL, FReg and TDA off.
2. **Startup on ML-1M** (``--model fearec`` only; ``dataset_atomic/fearec-ml1m``, ≈0.98M training
   prefixes): model construction, which for both builds the same-target table (RecBole: one
   ``np.where`` per training sample, O(n²); ours: one argsort). Dataset loading is the same code for
   both and not timed.

Variants:

- ``stock``: RecBole's FEARec as a user gets it (importing its models leaves autograd anomaly
  mode on); only the numpy-2 aliases RecBole needs to start are added.
- ``stock-fixed``: the same model with ``import recbole_ext`` first (anomaly mode off, allocator
  tuned): separates the model's own costs from that process-wide RecBole bug.
- ``ours``: ``FEARecExt`` or ``SeqTransformer`` with the same settings and their defaults (fast
  dropout; trailing-padding trimming where exact, which FEARec's FFT is not).
- suffixes, combinable: ``-bf16`` bfloat16 autocast (``bf16: true``; the epoch only, startup is
  ``ours``'s); ``-bucketK`` length-bucketed batches from pools of K batches (``length_bucketing: K``);
  ``-notrim`` ``trim_padding: false``; ``-pack`` ``pack_tokens: true`` (token-wise layers on real
  tokens only); ``-prune`` ``prune_unread_states: true`` (the last block's token-wise layers at the
  read positions only). Without ``-pack`` and ``-prune`` those switches are off, whatever their
  defaults (both on): ``ours-pack-prune`` is the defaults.

Printed: startup seconds, seconds per batch (median), epoch seconds, and ratios against ``stock``.
``--rounds R`` runs every variant R times, reversing the order every other round (this machine's
speed drifts by tens of percent over minutes): times are medians over rounds, ratios the median of
the per-round ratios with their range.
Results also go to ``benchmarks/results/<model>_epoch.json``. ``--quick`` = smoke mode (5 batches, a
20k-sample slice for the startup, no results file); its numbers mean nothing. Run with nothing else busy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("stock", "stock-fixed", "ours", "ours-bf16")
MODELS = {"fearec": "fearec_epoch", "sasrec": "sasrec_epoch"}  # --model → results file stem

# The paper's model in RecBole 1.2.1's FEARec keys (spec §7: what RecBole needs to be the paper's model).
PAPER_KEYS = {
    "contrast": "us_x", "tau": 1, "sim": "dot", "lmd": 0.1, "lmd_sem": 0.1, "global_ratio": 0.8,
    "topk_factor": 1, "dual_domain": True, "std": True, "spatial_ratio": 0.1, "fredom": True, "fredom_type": "us_x",
}
PROTOCOL = {
    "data_path": str(ROOT / "dataset_atomic"), "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
    "MAX_ITEM_LIST_LENGTH": 50, "train_batch_size": 256, "learning_rate": 0.001, "loss_type": "CE",
    "train_neg_sample_args": None, "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO",
                                                 "group_by": "user", "mode": "full"},
    "n_layers": 2, "n_heads": 2, "hidden_size": 64, "inner_size": 256, "hidden_dropout_prob": 0.5,
    "attn_dropout_prob": 0.5, "show_progress": False, "state": "ERROR", "use_gpu": False,
}


def variant_options(variant: str) -> tuple[str, dict]:
    """``ours-bf16-bucket16`` → ("ours", {bf16, bucket, trim})."""
    base, *suffixes = variant.split("-")
    if base == "stock" and suffixes[:1] == ["fixed"]:
        base, suffixes = "stock-fixed", suffixes[1:]
    options = {"bf16": False, "bucket": 0, "trim": True, "pack": False, "prune": False}
    for suffix in suffixes:
        if suffix == "bf16":
            options["bf16"] = True
        elif suffix.startswith("bucket") and suffix[6:].isdigit():
            options["bucket"] = int(suffix[6:])
        elif suffix == "notrim":
            options["trim"] = False
        elif suffix in ("pack", "prune"):
            options[suffix] = True
        else:
            raise SystemExit(f"unknown variant suffix {suffix!r} in {variant!r}")
    return base, options


def setup(variant: str, dataset_name: str, scratch: str, model: str):
    """RecBole config and training data for one variant (inside the worker process)."""
    base, options = variant_options(variant)
    recbole_name = {"fearec": "FEARec", "sasrec": "SASRec"}[model]
    if base == "stock":
        import numpy as np

        for name, value in (("float_", np.float64), ("complex_", np.complex128), ("unicode_", np.str_)):
            if name not in np.__dict__:
                setattr(np, name, value)
        from recbole.config import Config as config_class
        from recbole.utils import get_model

        model_class = get_model(recbole_name)
    else:
        import recbole_ext  # noqa: F401  (compat: anomaly mode off, allocator)
        from recbole.utils import get_model

        from recbole_ext.compat import SafeConfig as config_class

        model_class = get_model(recbole_name if base == "stock-fixed" else
                                {"fearec": "FEARecExt", "sasrec": "SeqTransformer"}[model])
    from recbole.data import create_dataset, data_preparation
    from recbole.utils import init_seed

    sys.argv = sys.argv[:1]
    ours = {"trim_padding": options["trim"], "pack_tokens": options["pack"],
            "prune_unread_states": options["prune"]} if base == "ours" else {}
    per_model = {**PAPER_KEYS} if model == "fearec" else {"train_batch_size": 2048}
    config = config_class(model=model_class, dataset=dataset_name, config_dict={
        **PROTOCOL, **per_model, **ours, "checkpoint_dir": os.path.join(scratch, variant)})
    init_seed(config["seed"], config["reproducibility"])
    train_data, _, _ = data_preparation(config, create_dataset(config))
    return config, model_class, train_data


def worker_startup(variant: str, args) -> dict:
    config, model_class, train_data = setup(variant, "fearec-ml1m", args.scratch, args.model)
    dataset = train_data._dataset
    total = len(dataset.inter_feat)
    if args.startup_samples and args.startup_samples < total:
        dataset.inter_feat = dataset.inter_feat[: args.startup_samples]
    started = time.perf_counter()
    model_class(config, dataset)
    return {"variant": variant, "startup_s": time.perf_counter() - started, "samples": len(dataset.inter_feat),
            "all_samples": total}


def worker_epoch(variant: str, args) -> dict:
    import torch

    config, model_class, train_data = setup(variant, "fearec-beauty", args.scratch, args.model)
    options = variant_options(variant)[1]
    if options["bucket"]:  # imported only here: importing recbole_ext turns anomaly mode off (stock keeps it)
        from recbole_ext.data.bucketing import BucketedEpoch
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=options["bf16"])
    started = time.perf_counter()
    model = model_class(config, train_data._dataset)
    startup = time.perf_counter() - started
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"])
    model.train()
    times, losses = [], []
    epoch_started = time.perf_counter()
    batches = BucketedEpoch(train_data, options["bucket"], config["ITEM_LIST_LENGTH_FIELD"]) if options["bucket"] else train_data
    for index, interaction in enumerate(batches):  # loader time counts: it is part of an epoch
        if args.epoch_batches and index >= args.epoch_batches:
            break
        step_started = time.perf_counter()
        optimizer.zero_grad()
        with autocast:
            loss = model.calculate_loss(interaction)
            loss = sum(loss) if isinstance(loss, tuple) else loss
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - step_started)
        losses.append(loss.item())
    if variant_options(variant)[0] == "stock" and not torch.is_anomaly_enabled():
        raise SystemExit("stock ran without RecBole's anomaly mode: something imported recbole_ext")
    return {"variant": variant, "beauty_startup_s": startup, "epoch_s": time.perf_counter() - epoch_started,
            "batches": len(times), "all_batches": len(train_data), "median_s_per_batch": statistics.median(times),
            "first_loss": losses[0], "last_loss": losses[-1], "threads": torch.get_num_threads(),
            "anomaly_mode": torch.is_anomaly_enabled()}


def run_worker(task: str, variant: str, args, scratch: str) -> dict:
    command = [sys.executable, __file__, "--worker", f"{task}:{variant}", "--scratch", scratch, "--model", args.model,
               "--threads", str(args.threads), "--epoch-batches", str(args.epoch_batches),
               "--startup-samples", str(args.startup_samples)]
    output = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(output.strip().splitlines()[-1])  # RecBole's FEARec prints debug lines first


TIMES = ("median_s_per_batch", "epoch_s", "startup_s", "beauty_startup_s")


def summarise(rows: list[dict]) -> dict:
    """One variant's row over rounds: the median of every time, the rounds kept when there are several."""
    row = dict(rows[0])
    for key in TIMES:
        if key in row:
            row[key] = statistics.median(r[key] for r in rows)
    if len(rows) > 1:
        row["rounds"] = rows
    return row


def ratio(results: dict, variant: str, key: str) -> str:
    """stock's time over the variant's; with rounds, the median of the per-round ratios [min-max]."""
    if "stock" not in results or variant == "stock":
        return "-"
    stock, row = results["stock"], results[variant]
    if "rounds" not in row:
        return f"{stock[key] / row[key]:.1f}x"
    ratios = [s[key] / r[key] for s, r in zip(stock["rounds"], row["rounds"])]
    return f"{statistics.median(ratios):.1f}x [{min(ratios):.1f}-{max(ratios):.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="fearec")
    parser.add_argument("--quick", action="store_true", help="smoke mode: 5 batches, 20k-sample startup slice")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--epoch-batches", type=int, default=0, help="stop the epoch after N batches (0: whole epoch)")
    parser.add_argument("--startup-samples", type=int, default=0,
                        help="build the ML-1M same-target table from the first N training samples (0: all)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--tasks", default="startup,epoch")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every variant R times, the order reversed every other round; report medians "
                             "and the range of the per-round ratios")
    parser.add_argument("--json", default=None, help="results file (default: benchmarks/results/<model>_epoch.json; none in --quick)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.epoch_batches = args.epoch_batches or 5
        args.startup_samples = args.startup_samples or 20000

    if args.worker:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        task, _, variant = args.worker.partition(":")
        print(json.dumps((worker_startup if task == "startup" else worker_epoch)(variant, args)))
        return

    import platform
    import tempfile

    variants, tasks = args.variants.split(","), args.tasks.split(",")
    if args.model != "fearec" and "startup" in tasks:
        raise SystemExit("the startup task measures FEARec's same-target table: use --model fearec or --tasks epoch")
    runs = {task: [v for v in variants if not (task == "startup" and variant_options(v)[1]["bf16"])]
            for task in tasks}  # construction has no autocast
    rows: dict[str, dict[str, list[dict]]] = {task: {v: [] for v in runs[task]} for task in tasks}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            for task in tasks:  # reversed every other round, so a slow spell of the machine hits every variant
                for variant in runs[task] if index % 2 == 0 else runs[task][::-1]:
                    rows[task][variant].append(run_worker(task, variant, args, scratch))
    results: dict[str, dict] = {task: {v: summarise(rows[task][v]) for v in runs[task]} for task in tasks}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"{time.strftime('%Y-%m-%d')}{'; QUICK MODE (smoke only, numbers mean nothing)' if args.quick else ''}")
    if "startup" in results:
        print("\nML-1M model construction (same-target table included)")
        print(f"{'variant':<12} {'samples':>9} {'startup s':>10} {'vs stock':>15}")
        for variant, row in results["startup"].items():
            print(f"{variant:<12} {row['samples']:>9} {row['startup_s']:>10.2f} {ratio(results['startup'], variant, 'startup_s'):>15}")
    if "epoch" in results:
        print(f"\nBeauty training epoch ({args.model}, batch {2048 if args.model == 'sasrec' else 256})")
        print(f"{'variant':<18} {'batches':>9} {'s/batch':>8} {'vs stock':>15} {'epoch s':>9} {'vs stock':>15} {'build s':>8}"
              + (f"   (medians over {args.rounds} rounds)" if args.rounds > 1 else ""))
        for variant, row in results["epoch"].items():
            print(f"{variant:<18} {row['batches']:>4}/{row['all_batches']:<4} {row['median_s_per_batch']:>8.3f} "
                  f"{ratio(results['epoch'], variant, 'median_s_per_batch'):>15} {row['epoch_s']:>9.1f} "
                  f"{ratio(results['epoch'], variant, 'epoch_s'):>15} {row['beauty_startup_s']:>8.2f}")
    results["meta"] = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                       "date": time.strftime("%Y-%m-%d"), "quick": args.quick, "argv": sys.argv[1:]}
    target = results_target(args.json, args.quick, ROOT / "benchmarks" / "results" / f"{MODELS[args.model]}.json")
    if target:
        write_results(target, results)


if __name__ == "__main__":
    main()
