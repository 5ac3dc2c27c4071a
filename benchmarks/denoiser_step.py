"""Rec-Denoiser: training-step cost against the plain backbone, and learned mask sparsity of a run.

    python benchmarks/denoiser_step.py [--rounds 3] [--steps 8] [--warmup 2] [--batch 256] [--length 50]
    python benchmarks/denoiser_step.py --quick                      # smoke: tiny sizes, 1 round
    python benchmarks/denoiser_step.py --sparsity runs/<run dir>    # per-layer mask sparsity of a trained run

Step cost: ml-100k through RecBole's loader, the paper's sizes (d = 50, 2 blocks, 2 heads, FFN d with
ReLU, BCE with one negative), forward + backward + Adam on the same pre-fetched batches. Variants
(``sasrec`` and ``tisasrec`` are the plain backbones; the others add Rec-Denoiser parts):

- ``denoiser``: masks with ARM (two no-grad replay passes) + L0 + Jacobian penalty (the preset);
- ``denoiser-ar``: AR instead of ARM (one replay pass);
- ``denoiser-sampled-block``: the Jacobian penalty on one random block per step (``blocks: sample``);
- ``masks-only``: ARM + L0, no Jacobian penalty;  ``jacobian-only``: softmax attention + Jacobian penalty;
- ``tisasrec`` / ``denoiser-tisasrec``: the same comparison on TiSASRec.

Variants alternate within each round (a busy machine slows all of them alike); printed: median
s/step over rounds and the ratio to the variant's plain backbone from the same round (target:
``denoiser`` ≤ 3x ``sasrec``). Results: ``benchmarks/results/denoiser_step.json``.

Sparsity: for each layer of a finished run's best checkpoint, over the used gates (v ≤ u for causal
backbones), ``nn.attention_masked.mask_statistics``: the share inference zeroes (σ(Φ) ≤ threshold),
the mean and 10th-90th percentiles of σ(Φ), and the standard deviation of Φ (the same figures a run
logs after every epoch).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "denoiser_step.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
import train_step  # noqa: E402  (the shared benchmark options)
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

MASKS = {"type": "denoiser", "base": "softmax"}
ARM = {"type": "mask_gradient", "weight": 1.0, "estimator": "arm"}
L0 = {"type": "mask_l0", "weight": 0.01}
JACOBIAN = {"type": "jacobian_penalty", "weight": 0.001}
TIME = {"type": "time_interval", "time_span": 256}
# variant → (its plain backbone, config values)
VARIANTS = {
    "sasrec": (None, {"model": "SeqTransformer", "attention": "softmax", "aux_losses": []}),
    "denoiser": ("sasrec", {"model": "Denoiser", "attention": MASKS, "aux_losses": [ARM, L0, JACOBIAN]}),
    "denoiser-ar": ("sasrec", {"model": "Denoiser", "attention": MASKS,
                               "aux_losses": [{**ARM, "estimator": "ar"}, L0, JACOBIAN]}),
    "masks-only": ("sasrec", {"model": "Denoiser", "attention": MASKS, "aux_losses": [ARM, L0]}),
    "denoiser-sampled-block": ("sasrec", {"model": "Denoiser", "attention": MASKS,
                                          "aux_losses": [ARM, L0, {**JACOBIAN, "blocks": "sample"}]}),
    "jacobian-only": ("sasrec", {"model": "SeqTransformer", "attention": "softmax", "aux_losses": [JACOBIAN]}),
    "tisasrec": (None, {"model": "TiSASRec", "attention": TIME, "aux_losses": [], "n_heads": 2}),
    "denoiser-tisasrec": ("tisasrec", {"model": "DenoiserTiSASRec", "attention": {**MASKS, "base": TIME},
                                       "aux_losses": [ARM, L0, JACOBIAN], "n_heads": 2}),
}


def setup(variant: str, args, scratch: str):
    from recbole_ext.config import resolve
    from recbole_ext.runner import build, recbole_config

    values = {
        "dataset": "ml-100k", "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "MAX_ITEM_LIST_LENGTH": args.length, "train_batch_size": args.batch, "loss_type": "BCE",
        "train_neg_sample_args": {"distribution": "uniform", "sample_num": 1},
        "hidden_size": args.hidden, "inner_size": args.hidden, "n_layers": 2, "n_heads": 2, "hidden_act": "relu",
        "hidden_dropout_prob": 0.2, "attn_dropout_prob": 0.2, "show_progress": False, "state": "ERROR",
        "use_gpu": False, **VARIANTS[variant][1],
    }
    resolved = resolve(None, values=values)
    config = recbole_config(resolved, checkpoint_dir=Path(scratch) / variant)
    model, _, (train_data, _, _) = build(config)
    return config, train_data, model


def time_steps(model, batches, warmup: int, learning_rate: float) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    model.train()
    times = []
    for index, interaction in enumerate(batches):
        started = time.perf_counter()
        optimizer.zero_grad()
        losses = model.calculate_loss(interaction)
        (sum(losses) if isinstance(losses, tuple) else losses).backward()
        optimizer.step()
        if index >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def step_benchmark(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    prepared = {}
    with tempfile.TemporaryDirectory() as scratch:
        for variant in variants:
            config, train_data, model = setup(variant, args, scratch)
            batches = []
            for interaction in train_data:
                batches.append(interaction)
                if len(batches) == args.warmup + args.steps:
                    break
            prepared[variant] = (config, batches, model)
    rounds = []
    for _ in range(args.rounds):
        rounds.append({v: time_steps(prepared[v][2], prepared[v][1], args.warmup, prepared[v][0]["learning_rate"])
                       for v in variants})
    rows = []
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}; ml-100k, batch {args.batch}, length {args.length}, d {args.hidden}; "
          f"{args.rounds} rounds x {args.steps} steps after {args.warmup} warm-up; medians over rounds")
    print(f"{'variant':<18} {'s/step':>8} {'vs backbone':>28}")
    for variant in variants:
        seconds = statistics.median(r[variant] for r in rounds)
        baseline = VARIANTS[variant][0]
        if baseline in variants:
            ratios = train_step.round_ratios(rounds, variant, baseline, key=None)
            ratio = statistics.median(ratios)
            text = f"{train_step.ratio_text(ratios)} {baseline}"
        else:
            ratio, text = None, "-"
        rows.append({"variant": variant, "median_s_per_step": seconds, "baseline": baseline, "ratio": ratio})
        print(f"{variant:<18} {seconds:>8.4f} {text:>28}")
    payload = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "machine": platform.processor(),
               "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "batch": args.batch, "length": args.length,
               "hidden": args.hidden, "rounds": rounds, "summary": rows}
    target = results_target(None, args.quick, RESULTS)
    if target:
        print(f"written: {write_results(target, payload)}")


def sparsity_report(run_dir: Path) -> None:
    import yaml

    from recbole_ext.compat import load_checkpoint
    from recbole_ext.nn.attention_masked import mask_statistics

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    attention = config["attention"] if isinstance(config["attention"], dict) else {"type": config["attention"]}
    threshold = attention.get("threshold", 0.5)
    causal = config.get("backbone", "sasrec") not in ("bert4rec", {"type": "bert4rec"})
    checkpoint = load_checkpoint(next(run_dir.glob("*.pth")))
    layers = sorted((k, v) for k, v in checkpoint["state_dict"].items() if k.endswith("mask_logits"))
    if not layers:
        sys.exit(f"{run_dir}: no mask_logits in the checkpoint (not a Rec-Denoiser run)")
    print(f"{run_dir.name}: threshold {threshold}, {'causal (v <= u)' if causal else 'all'} gates")
    print(f"{'layer':<40} {'pruned':>8} {'mean σ(Φ)':>10} {'σ(Φ) p10-p90':>14} {'std Φ':>7}")
    report = []
    for name, logits in layers:
        stats = mask_statistics(logits, threshold, causal)
        report.append({"layer": name, **stats})
        spread = f"{stats['keep_probability_p10']:.3f}-{stats['keep_probability_p90']:.3f}"
        print(f"{name:<40} {stats['pruned_fraction']:>8.3f} {stats['mean_keep_probability']:>10.3f} {spread:>14} "
              f"{stats['logit_std']:>7.3f}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    print(f"test: {metrics.get('test')}")
    write_results(run_dir / "mask_sparsity.json", report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train_step.add_step_arguments(parser, batch=256, workers=False)
    parser.add_argument("--hidden", type=int, default=50)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, nothing written")
    parser.add_argument("--sparsity", type=Path, help="report mask sparsity of this run directory instead")
    args = parser.parse_args()
    if args.sparsity:
        sparsity_report(args.sparsity)
        return
    if args.quick:
        args.rounds, args.steps, args.warmup, args.batch, args.length, args.hidden = 1, 2, 1, 64, 10, 16
    step_benchmark(args)


if __name__ == "__main__":
    main()
