"""Training-step time: our SASRec-equivalent (SeqTransformer) against stock RecBole SASRec.

    python benchmarks/train_step.py [--rounds 3] [--steps 8] [--warmup 2] [--batch 2048] [--length 50] [--threads N]

Same data (ml-100k, RecBole's loader), same config (RecBole's SASRec defaults: 2 layers, 2 heads,
hidden 64, dropout 0.5, CE over all items, Adam), same initial weights (RecBole's, copied into
ours) and the same pre-fetched batches. Each variant runs in a fresh subprocess, one after the
other, so process-wide settings (allocator, anomaly mode) cannot leak between them:

- ``stock``: RecBole as a user gets it (importing its models leaves autograd anomaly mode on;
  glibc's default allocator). Only the numpy-2 aliases are added, without which RecBole cannot
  start on this stack.
- ``ours-exact``: ``import recbole_ext`` (anomaly off, allocator tuned) and SeqTransformer with
  ``dropout_impl: torch`` (RecBole's dropout random stream): its losses must equal stock's.
- ``ours-fp32``: SeqTransformer with its defaults (fast dropout: same distribution, other stream).
- ``ours-bf16``: the same under bfloat16 autocast (``bf16: true``).

Printed: median seconds per step (forward + backward + Adam) over the timed steps, the ratio to
stock, the largest gap between a variant's per-step losses and stock's (``ours-exact`` must be ~1e-6:
same model, same numbers; the others differ by their dropout draws) and minor page faults per step. Run it with nothing else busy on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ("stock", "ours-exact", "ours-fp32", "ours-bf16")


def recbole_setup(variant: str, args):
    """Config, dataloader and model for one variant (runs inside the worker process)."""
    if variant == "stock":
        import numpy as np

        for name, value in (("float_", np.float64), ("complex_", np.complex128), ("unicode_", np.str_)):
            if name not in np.__dict__:
                setattr(np, name, value)
        from recbole.config import Config
        from recbole.model.sequential_recommender import SASRec as model_class

        config_class = Config
    else:
        import recbole_ext  # noqa: F401
        from recbole_ext.compat import SafeConfig as config_class
        from recbole_ext.models import SeqTransformer as model_class

    from recbole.data import create_dataset, data_preparation
    from recbole.utils import init_seed

    sys.argv = sys.argv[:1]
    config = config_class(model=model_class, dataset="ml-100k", config_dict={
        "train_batch_size": args.batch, "MAX_ITEM_LIST_LENGTH": args.length, "loss_type": "CE",
        "train_neg_sample_args": None, "show_progress": False, "state": "ERROR", "use_gpu": False,
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "checkpoint_dir": os.path.join(args.scratch, variant),
        **({"n_layers": 2, "n_heads": 2, "hidden_size": 64, "inner_size": 256, "hidden_dropout_prob": 0.5,
            "attn_dropout_prob": 0.5, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "initializer_range": 0.02,
            "dropout_impl": "torch" if variant == "ours-exact" else "fast"}
           if variant != "stock" else {}),
    })
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    train_data, _, _ = data_preparation(config, dataset)
    init_seed(config["seed"], config["reproducibility"])
    model = model_class(config, train_data._dataset)
    return config, train_data, model


def worker(variant: str, args) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    config, train_data, model = recbole_setup(variant, args)
    reference = Path(args.scratch) / "stock_init.pt"
    if variant == "stock":
        torch.save(model.state_dict(), reference)
    elif reference.exists():  # start from stock's weights when it ran first
        from recbole_ext.models.recbole_import import state_dict_from_recbole

        model.load_state_dict(state_dict_from_recbole(torch.load(reference, weights_only=True), "SASRec"))
    batches = []
    for interaction in train_data:
        batches.append(interaction)
        if len(batches) == args.warmup + args.steps:
            break
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant.endswith("bf16"))
    torch.manual_seed(0)
    model.train()
    times, losses = [], []
    faults_before = None
    for index, interaction in enumerate(batches):
        if index == args.warmup:
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        optimizer.zero_grad()
        with autocast:
            loss = model.calculate_loss(interaction)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - started
        if index >= args.warmup:
            times.append(elapsed)
            losses.append(loss.item())
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    return {
        "variant": variant, "median_s_per_step": statistics.median(times), "losses": losses,
        "minor_faults_per_step": faults / args.steps, "anomaly_mode": torch.is_anomaly_enabled(),
        "threads": torch.get_num_threads(),
    }


def add_step_arguments(parser: argparse.ArgumentParser, batch: int = 2048, workers: bool = True) -> None:
    """The options every step benchmark shares; ``workers``: the hidden per-process worker options."""
    parser.add_argument("--rounds", type=int, default=3, help="times each variant runs (alternating)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    if workers:
        parser.add_argument("--worker", help=argparse.SUPPRESS)
        parser.add_argument("--scratch", default=None, help=argparse.SUPPRESS)


def run_rounds(script: str, names: list[str], args, extra: list[str] = ()) -> list[dict]:
    """``args.rounds`` rounds of every name's ``--worker`` run of ``script``, each in a fresh process;
    names alternate within a round, so slow phases of a shared machine hit all of them."""
    import tempfile

    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            results = {}
            for name in names:
                command = [sys.executable, str(script), "--worker", name, "--scratch", scratch,
                           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
                           "--length", str(args.length), "--threads", str(args.threads), *extra]
                output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                results[name] = json.loads(output.strip().splitlines()[-1])
            rounds.append(results)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_arguments(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    variants = args.variants.split(",")
    rounds = run_rounds(__file__, variants, args)
    import platform

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{rounds[0][variants[0]]['threads']}; batch {args.batch}, length {args.length}; {args.rounds} rounds of "
          f"{args.steps} timed steps after {args.warmup} warm-up; medians over rounds, ratio range in brackets")
    print(f"{'variant':<10} {'s/step':>8} {'vs stock':>20} {'faults/step':>12}  anomaly  max |loss - stock loss|")
    for variant in variants:
        per_round = [r[variant] for r in rounds]
        seconds = statistics.median(r["median_s_per_step"] for r in per_round)
        if "stock" in variants:
            ratios = [r["stock"]["median_s_per_step"] / r[variant]["median_s_per_step"] for r in rounds]
            ratio_text = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
            gap = max(abs(a - b) for r in rounds for a, b in zip(r[variant]["losses"], r["stock"]["losses"]))
        else:
            ratio_text, gap = "-", float("nan")
        faults = statistics.median(r["minor_faults_per_step"] for r in per_round)
        print(f"{variant:<10} {seconds:>8.3f} {ratio_text:>20} {faults:>12.0f}  {str(per_round[0]['anomaly_mode']):<7}  {gap:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=2))


if __name__ == "__main__":
    main()
