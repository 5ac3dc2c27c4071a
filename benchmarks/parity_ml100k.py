"""Validation and test metrics of SeqTransformer variants against RecBole's SASRec on ml-100k, over seeds.

    python benchmarks/parity_ml100k.py [--seeds 2020 2021 2022] [--epochs 10] [--length 20] [--output DIR]
                                       [--variants SASRec,SeqTransformer,SeqTransformer-bf16,...]
                                       [--reuse FILE]

Every variant trains through the same runner (``recbole_ext.runner.run``) with the same config:
configs/base/ml100k.yaml (leave-one-out by time, full ranking) with RecBole SASRec's defaults,
``MAX_ITEM_LIST_LENGTH`` and ``epochs`` as given. Variants (``VARIANTS``): RecBole's ``SASRec``;
``SeqTransformer`` on its defaults (fast dropout: the same distribution as RecBole's, another
random stream; padding trimmed where exact); ``-bf16`` under bfloat16 autocast; ``-bucket16`` with
length-bucketed batches (``length_bucketing: 16``). Prints each run and, per metric, the mean ± std
over seeds for every variant and its gap to the first variant in units of the larger std; writes
the table to ``--output``/parity.md and the raw runs to parity.json.

``--reuse FILE``: take RecBole SASRec's runs of the same seeds and settings from an earlier
parity.json instead of training them again (RecBole's code is not ours and is deterministic on CPU
for a given seed; our variants always train).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import write_results  # noqa: E402  (one rule for where results go)

VARIANTS = {
    "SASRec": ["model=SASRec"],
    "SeqTransformer": ["model=SeqTransformer"],
    "SeqTransformer-bf16": ["model=SeqTransformer", "bf16=true"],
    "SeqTransformer-bucket16": ["model=SeqTransformer", "length_bucketing=16"],
}
METRICS = ("ndcg@10", "recall@10", "mrr@10", "ndcg@20", "recall@20")


def reusable_runs(path: str | None, args) -> dict[tuple[str, int], dict]:
    if not path:
        return {}
    earlier = json.loads(Path(path).read_text())
    settings = {key: earlier["args"].get(key) for key in ("epochs", "length")}
    if settings != {"epochs": args.epochs, "length": args.length}:
        raise SystemExit(f"--reuse {path}: its runs used {settings}, not epochs={args.epochs}, length={args.length}")
    return {(run["model"], run["seed"]): run for run in earlier["runs"] if run["model"] == "SASRec"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2020, 2021, 2022])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--variants", default="SASRec,SeqTransformer", help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--reuse", default=None, help="an earlier parity.json whose RecBole SASRec runs are reused")
    parser.add_argument("--output", default="benchmarks/results")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")

    from recbole_ext.runner import run

    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    earlier = reusable_runs(args.reuse, args)
    runs = []
    for seed in args.seeds:
        for variant in variants:
            if (variant, seed) in earlier:
                runs.append({**earlier[variant, seed], "reused_from": args.reuse})
                continue
            overrides = [*VARIANTS[variant], f"seed={seed}", f"epochs={args.epochs}", f"MAX_ITEM_LIST_LENGTH={args.length}",
                         "show_progress=false", "state=WARNING", f"output_dir={output / 'parity_runs'}"]
            if args.threads:
                overrides.append(f"num_threads={args.threads}")
            started = time.time()
            result = run("configs/base/ml100k.yaml", overrides)
            runs.append({"model": variant, "seed": seed, "valid": result.best_valid_result, "test": result.test_result,
                         "best_epoch": result.best_epoch, "wall_time_s": time.time() - started})
            print(json.dumps(runs[-1]), flush=True)
            write_results(output / "parity.json", {"args": vars(args), "runs": runs})
    write_results(output / "parity.json", {"args": vars(args), "runs": runs})

    baseline = variants[0]
    command = (f"python benchmarks/parity_ml100k.py --seeds {' '.join(map(str, args.seeds))} --epochs {args.epochs} "
               f"--length {args.length} --variants {args.variants}")
    lines = [f"Variants on ml-100k, MAX_ITEM_LIST_LENGTH {args.length}, {args.epochs} epochs, seeds {args.seeds} "
             f"(`{command}`); gap: (variant mean − {baseline} mean) / the larger std", "",
             "| split | metric | " + " | ".join(variants) + " | " + " | ".join(f"gap {v}" for v in variants[1:]) + " |",
             "|---|---|" + "---|" * (2 * len(variants) - 1)]
    for split in ("valid", "test"):
        for metric in METRICS:
            values = {v: [r[split][metric] for r in runs if r["model"] == v] for v in variants}
            means = {v: statistics.mean(x) for v, x in values.items()}
            stds = {v: statistics.stdev(x) if len(x) > 1 else 0.0 for v, x in values.items()}
            gaps = [(means[v] - means[baseline]) / max(stds[v], stds[baseline], 1e-12) for v in variants[1:]]
            lines.append(f"| {split} | {metric} | " + " | ".join(f"{means[v]:.4f} ± {stds[v]:.4f}" for v in variants)
                         + " | " + " | ".join(f"{g:+.2f}" for g in gaps) + " |")
    (output / "parity.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
