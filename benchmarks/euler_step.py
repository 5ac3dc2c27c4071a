"""Training-step time of EulerFormer and of SASRec + RoPE, over SASRec (SeqTransformer), same data.

    python benchmarks/euler_step.py [--rounds 3] [--steps 8] [--warmup 2] [--batch 2048] [--length 50] [--threads N] [--bf16]
    python benchmarks/euler_step.py --quick        # smoke run: 1 round, 2 steps, batch 256; writes nothing

The setup and the timed loop are ``benchmarks/train_step.py``'s (RecBole's ml-100k loader, SASRec's
sizes: 2 layers, 2 heads, hidden 64, dropout 0.5, CE over all items, Adam; pre-fetched batches; median
seconds per forward + backward + Adam step). Each variant runs in a fresh subprocess, variants
alternating within every round:

- ``sasrec``: SeqTransformer with its defaults (the baseline of every ratio);
- ``sasrec-rope``: the same with ``position: rope`` (EulerFormer's Table 4 RoPE row);
- ``eulerformer``: the EulerFormer preset (Euler attention, ψ, PCL with ε = 1e-5);
- ``eulerformer-nopcl``: EulerFormer without PCL, to separate the rotation's cost from the loss's.

Printed: median s/step over rounds and the ratio to ``sasrec`` (median and range over rounds; paper
Table 4: EulerFormer 1.02-1.16x, RoPE 1.12-1.49x of Base). Results: ``benchmarks/results/euler_step.json``.
Run it with nothing else busy on the machine.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results" / "euler_step.json"
sys.path.insert(0, str(BENCHMARKS))
import train_step  # noqa: E402  (the shared timing worker and options)

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import write_results  # noqa: E402  (one rule for where results go)
# variant → (model, YAML lines layered over that model's defaults)
VARIANTS = {
    "sasrec": ("SeqTransformer", ""),
    "sasrec-rope": ("SeqTransformer", "position: rope\n"),
    "eulerformer": ("EulerFormer", ""),
    "eulerformer-nopcl": ("EulerFormer", "aux_losses: []\n"),
}


def model_class(variant: str, scratch: str) -> type:
    """The variant's model (its defaults + overrides), whose loss is one tensor: train_step's loop
    calls ``backward`` on it, where RecBole's trainer sums the (main, aux...) tuple itself."""
    from recbole_ext.registry import resolve_model

    name, extra = VARIANTS[variant]
    base, _ = resolve_model(name)
    defaults = Path(scratch) / f"{variant}.yaml"
    defaults.write_text(f"extends: {base.DEFAULT_CONFIG}\n{extra}")

    def calculate_loss(self, interaction):
        loss = base.calculate_loss(self, interaction)
        return sum(loss) if isinstance(loss, tuple) else loss

    return type(variant.replace("-", "_"), (base,), {"DEFAULT_CONFIG": defaults, "calculate_loss": calculate_loss})


def worker(variant: str, args) -> dict:
    """train_step.py's worker with this variant's model in place of SeqTransformer (its setup imports
    ``recbole_ext.models.SeqTransformer`` at call time)."""
    import recbole_ext.models

    recbole_ext.models.SeqTransformer = model_class(variant, args.scratch)
    result = train_step.worker("ours-bf16" if args.bf16 else "ours-fp32", args)
    return {**result, "variant": variant}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train_step.add_step_arguments(parser, batch=2048)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for every variant")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    train_step.add_quick_and_results_arguments(parser, RESULTS, "smoke run: 1 round, 2 steps, 1 warm-up, batch 256")
    args = train_step.parse_quick_and_results(parser, RESULTS, rounds=1, steps=2, warmup=1, batch=256)

    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return


    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    rounds = train_step.run_rounds(__file__, variants, args, ["--bf16"] if args.bf16 else [])

    baseline = "sasrec" if "sasrec" in variants else None
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {rounds[0][variants[0]]['threads']}; "
          f"ml-100k, batch {args.batch}, length {args.length}, {'bf16' if args.bf16 else 'fp32'}; {args.rounds} rounds of "
          f"{args.steps} timed steps after {args.warmup} warm-up; medians over rounds, ratio range in brackets")
    print(f"{'variant':<18} {'s/step':>8} {'vs sasrec':>20}")
    summary = {}
    for variant in variants:
        seconds = statistics.median(r[variant]["median_s_per_step"] for r in rounds)
        ratios = train_step.round_ratios(rounds, variant, baseline) if baseline else []
        ratio_text = train_step.ratio_text(ratios) if ratios else "-"
        summary[variant] = {"median_s_per_step": seconds, "ratio_to_sasrec": statistics.median(ratios) if ratios else None}
        print(f"{variant:<18} {seconds:>8.3f} {ratio_text:>20}")
    if args.json:
        write_results(args.json, {"args": {k: v for k, v in vars(args).items() if k not in ("worker", "scratch")},
                                  "summary": summary, "rounds": rounds})


if __name__ == "__main__":
    main()
