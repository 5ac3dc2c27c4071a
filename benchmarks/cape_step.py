"""Training-step cost of CAPE/CoPE against learned absolute positions (SeqTransformer, ml-100k).

    python benchmarks/cape_step.py [--rounds 3] [--steps 8] [--warmup 2] [--batch 2048] [--length 50]
                                   [--hidden 64 --heads 2 --layers 2] [--positions learned,rope,cope,cape16,cape32,cape64]
                                   [--bf16] [--threads N] [--quick]

Everything but the position part is ``benchmarks/train_step.py``'s ``ours-fp32`` setup (its data,
config, pre-fetched batches and timing loop are reused, not copied): SASRec backbone, softmax
attention, CE over all items, Adam. Each position runs in a fresh subprocess, positions alternate
within a round. Printed: median seconds per step (forward + backward + Adam), the ratio to
``learned`` measured in the same round (median and range over rounds), and the parameter count.
The paper's Table 3 size is ``--hidden 512 --heads 8`` (d_head 64). Results go to
``benchmarks/results/cape_step.json``. ``--quick`` is a seconds-long smoke run, not a measurement, and
writes no results unless ``--json`` is given.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import train_step  # noqa: E402  (the shared setup and timing loop)
from results_file import write_results  # noqa: E402  (one rule for where results go)

POSITIONS = {
    "learned": "learned_absolute",
    "none": "none",
    "rope": "rope",
    "cope": "cope",
    "cape16": {"type": "cape", "pos_dim": 16},
    "cape32": {"type": "cape", "pos_dim": 32},
    "cape64": {"type": "cape", "pos_dim": 64},
    "cape64-official": {"type": "cape", "pos_dim": 64, "gate_mask": "official"},
}
BASELINE = "learned"
RESULTS = Path(__file__).parent / "results" / "cape_step.json"


def setup_with_position(position_name: str, args, built: dict):
    """``train_step.recbole_setup`` for ``ours-fp32``, then the model rebuilt with another position part
    and size (its parameter count goes to ``built``)."""
    original = train_step.recbole_setup

    def setup(variant, setup_args):
        from recbole.utils import init_seed

        from recbole_ext.models import SeqTransformer

        config, train_data, _ = original(variant, setup_args)
        config["position"] = POSITIONS[position_name]
        config["hidden_size"], config["n_heads"], config["n_layers"] = args.hidden, args.heads, args.layers
        config["inner_size"] = args.inner or 4 * args.hidden
        init_seed(config["seed"], config["reproducibility"])
        model = SeqTransformer(config, train_data._dataset)
        built["parameters"] = sum(p.numel() for p in model.parameters())
        return config, train_data, model

    return setup


def worker(position_name: str, args) -> dict:
    built: dict = {}
    train_step.recbole_setup = setup_with_position(position_name, args, built)
    result = train_step.worker("ours-bf16" if args.bf16 else "ours-fp32", args)
    return {**result, **built, "position": position_name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train_step.add_step_arguments(parser, batch=2048)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--inner", type=int, default=0, help="feed-forward width (default 4 x hidden)")
    parser.add_argument("--positions", default="learned,rope,cope,cape16,cape32,cape64")
    parser.add_argument("--bf16", action="store_true", help="time under bfloat16 autocast")
    train_step.add_quick_and_results_arguments(parser, RESULTS, "smoke run: 1 round, 2 steps, small batch")
    args = train_step.parse_quick_and_results(parser, RESULTS, rounds=1, steps=2, warmup=1, batch=256, length=20)

    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    positions = args.positions.split(",")
    unknown = [p for p in positions if p not in POSITIONS]
    if unknown:
        parser.error(f"unknown position(s) {', '.join(unknown)}; known: {', '.join(POSITIONS)}")
    if BASELINE not in positions:
        positions.insert(0, BASELINE)
    forwarded = ["--hidden", str(args.hidden), "--heads", str(args.heads), "--layers", str(args.layers),
                 "--inner", str(args.inner)] + (["--bf16"] if args.bf16 else [])
    rounds = train_step.run_rounds(__file__, positions, args, forwarded)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{rounds[0][positions[0]]['threads']}; SASRec d={args.hidden}, {args.heads} heads, {args.layers} layers, "
          f"batch {args.batch}, length {args.length}, {'bf16' if args.bf16 else 'fp32'}; {args.rounds} rounds of "
          f"{args.steps} timed steps after {args.warmup} warm-up; medians over rounds, ratio range in brackets")
    print(f"{'position':<16} {'s/step':>8} {'vs learned':>22} {'parameters':>12}")
    summary = {}
    for name in positions:
        seconds = statistics.median(r[name]["median_s_per_step"] for r in rounds)
        ratios = train_step.round_ratios(rounds, name, BASELINE)
        summary[name] = {"s_per_step": seconds, "ratio_to_learned": statistics.median(ratios),
                         "ratio_range": [min(ratios), max(ratios)], "parameters": rounds[0][name]["parameters"]}
        print(f"{name:<16} {seconds:>8.3f} {train_step.ratio_text(ratios):>22} {rounds[0][name]['parameters']:>12,}")
    if args.json:
        write_results(args.json, {"args": vars(args), "summary": summary, "rounds": rounds})


if __name__ == "__main__":
    main()
