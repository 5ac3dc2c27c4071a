"""Validation and test metrics of SeqTransformer against RecBole's SASRec on ml-100k, over seeds.

    python benchmarks/parity_ml100k.py [--seeds 2020 2021 2022] [--epochs 10] [--length 20] [--output DIR]

Both models train through the same runner (``recbole_ext.runner.run``) with the same config:
configs/base/ml100k.yaml (leave-one-out by time, full ranking) with RecBole SASRec's defaults,
``MAX_ITEM_LIST_LENGTH`` and ``epochs`` as given. SeqTransformer uses its defaults (fast dropout:
the same distribution as RecBole's, another random stream). Prints each run and, per metric, the
mean ± std over seeds for both models and the gap in units of the larger std; writes the table to
``--output``/parity.md and the raw runs to parity.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

MODELS = ("SASRec", "SeqTransformer")
METRICS = ("ndcg@10", "recall@10", "mrr@10", "ndcg@20", "recall@20")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2020, 2021, 2022])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--output", default="benchmarks/results")
    args = parser.parse_args()

    from recbole_ext.runner import run

    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in args.seeds:
        for model in MODELS:
            overrides = [f"model={model}", f"seed={seed}", f"epochs={args.epochs}", f"MAX_ITEM_LIST_LENGTH={args.length}",
                         "show_progress=false", "state=WARNING", f"output_dir={output / 'parity_runs'}"]
            if args.threads:
                overrides.append(f"num_threads={args.threads}")
            started = time.time()
            result = run("configs/base/ml100k.yaml", overrides)
            runs.append({"model": model, "seed": seed, "valid": result.best_valid_result, "test": result.test_result,
                         "best_epoch": result.best_epoch, "wall_time_s": time.time() - started})
            print(json.dumps(runs[-1]), flush=True)
            (output / "parity.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=2))

    lines = [f"SeqTransformer vs RecBole SASRec on ml-100k, MAX_ITEM_LIST_LENGTH {args.length}, {args.epochs} epochs, "
             f"seeds {args.seeds} (`python benchmarks/parity_ml100k.py --seeds {' '.join(map(str, args.seeds))} "
             f"--epochs {args.epochs} --length {args.length}`)", "",
             "| split | metric | RecBole SASRec | SeqTransformer | gap / max std |", "|---|---|---|---|---|"]
    for split in ("valid", "test"):
        for metric in METRICS:
            values = {m: [r[split][metric] for r in runs if r["model"] == m] for m in MODELS}
            means = {m: statistics.mean(v) for m, v in values.items()}
            stds = {m: statistics.stdev(v) if len(v) > 1 else 0.0 for m, v in values.items()}
            gap = (means["SeqTransformer"] - means["SASRec"]) / max(max(stds.values()), 1e-12)
            lines.append(f"| {split} | {metric} | {means['SASRec']:.4f} ± {stds['SASRec']:.4f} | "
                         f"{means['SeqTransformer']:.4f} ± {stds['SeqTransformer']:.4f} | {gap:+.2f} |")
    (output / "parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
