"""Evaluation throughput (users/s): our SeqTransformer against stock RecBole SASRec.

    python benchmarks/eval_throughput.py [--datasets ml-100k,ml-100k-items,fearec-beauty] [--mode full|uni100|pop100]
                                         [--rounds 3] [--steps 3] [--warmup 1] [--batch 4096] [--threads N]
                                         [--variants ...] [--quick] [--json]

Both models are evaluated by RecBole's own ``Trainer.evaluate`` on the test split (full sort over
all items, leave-one-out by time, RecBole's default metrics at top 10): stock through RecBole's
``Trainer``, ours through ``recbole_ext.trainer.trainer_class(config)``. ``--mode uni100`` or
``pop100`` ranks the target among 100 sampled negatives instead (the Rec-Denoiser and LinRec
protocols): RecBole's loader repeats each user's row once per candidate, which ours encodes once
(``models/repeated_rows.py``); both draw the same negatives (same seed). Same config as
``train_step.py`` (RecBole's SASRec defaults, length 50), same weights (stock's initial ones,
copied into ours), eval batch ``--batch`` users. Datasets: ``ml-100k`` (ships with RecBole) and
``fearec-beauty`` (``dataset_atomic/``, FEARec's Beauty); ``ml-100k-items`` is ml-100k with its item
features loaded, whose sampled rows also differ in the candidate's features. Each variant runs in a fresh
subprocess; variants alternate within a round (``train_step.run_rounds``):

- ``stock``: RecBole as a user gets it (anomaly mode as RecBole leaves it; numpy-2 aliases only).
- ``stock-trainer``: RecBole's SASRec, stock's weights, evaluated by our trainer: under ``uni100`` or
  ``pop100`` that scores each history once through the model's ``full_sort_predict``, the path
  every RecBole model gets (``RunTrainerMixin._neg_sample_batch_eval``).
- ``ours-fp32``: SeqTransformer, ``trim_padding`` on (where the key exists), the switches that
  ``train_step.py``'s suffixes name off; ``ours-fp32-pack-prune``: with ``pack_tokens`` and
  ``prune_unread_states`` too, which are the defaults (any ``-pack``/``-prune`` combination runs).
- ``ours-bf16*``: the same, ``trainer.evaluate`` under bfloat16 autocast. Our trainer keeps
  evaluation in fp32 (``bf16`` only autocasts training), so this shows what bf16 scoring would give.
- ``ours-notrim``: ``trim_padding: false`` (only offered once SeqTransformer has the key).

Printed per dataset: median seconds per evaluation and users/s, the ratio to stock (median over
rounds, range in brackets), the largest metric gap to stock (``ours-fp32`` must be ~1e-6: same
weights, same scores; bf16 may differ a little), and, from one extra profiled evaluation per
variant, where the time goes: the loader's collate (RecBole's ``collate_fn``), the model's
``full_sort_predict`` (for ours split into the encoder, ``forward``, and ``scoring``, the
user-by-item matmul of ``backbone.score_all``; stock's forward includes its matmul), the collector (top-k, positives) and the final metric computation; ``other``
is the rest of the loop (padding-row masking, iteration). Also printed: the largest score gap to
stock on the first test batch. ``--quick``: smoke mode (ml-100k, stock and ours-fp32 unless
``--variants``, one round, one timed evaluation; its numbers mean nothing). ``--json``: also write
``benchmarks/results/eval_throughput.json``. Run it with nothing else busy on the machine.
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

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "eval_throughput.json"
LEAVE_ONE_OUT = {"eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "group_by": "user", "mode": "full"}}
EXACT_METRIC_GAP = 1e-5  # same weights, same scores: only float summation order differs
DATASETS = {
    "ml-100k": LEAVE_ONE_OUT,
    # ml-100k with its item features loaded: sampled evaluation's rows then also carry the
    # candidate's features (RecBole's Dataset.join), as linrec-ml1m's carry its genre.
    "ml-100k-items": {**LEAVE_ONE_OUT,
                      "load_col": {"inter": ["user_id", "item_id", "timestamp"], "item": ["item_id", "class", "release_year"]}},
    "fearec-beauty": {**LEAVE_ONE_OUT, "data_path": str(ROOT / "dataset_atomic")},
}
RECBOLE_DATASET = {"ml-100k-items": "ml-100k"}  # the atomic files a label reads, where it is not the label


def has_config_key(key: str) -> bool:
    """Whether SeqTransformer or the framework knows ``key`` yet (switches that land while this
    script exists)."""
    import recbole_ext  # noqa: F401
    from recbole_ext.config import schema
    from recbole_ext.models import SeqTransformer

    return key in SeqTransformer.CONFIG_SCHEMA or key in getattr(schema, "FRAMEWORK_KEYS", {})


def available_variants() -> list[str]:
    switches = [key for key in train_step.SWITCH_SUFFIXES if has_config_key(train_step.SWITCH_SUFFIXES[key])]
    defaults = "".join(f"-{suffix}" for suffix in switches)
    return (["stock", "ours-fp32", *(f"ours-fp32{defaults}", f"ours-bf16{defaults}")]
            + (["ours-notrim"] if has_config_key("trim_padding") else []))


def timed(function, totals: dict, name: str):
    """``function`` that adds its wall time to ``totals[name]``."""

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - started

    return wrapper


def profiled_evaluation(trainer, test_data, autocast, sampled: bool) -> dict:
    """One more ``trainer.evaluate`` with its parts timed by wrapping the objects it calls."""
    totals: dict[str, float] = {}
    test_data.collate_fn = timed(test_data.collate_fn, totals, "collate")  # torch reads it per iterator
    # sampled: predict, or full_sort_predict once per history where our trainer does that (stock-trainer)
    for predict in ("predict", "full_sort_predict") if sampled else ("full_sort_predict",):
        setattr(trainer.model, predict, timed(getattr(trainer.model, predict), totals, "forward"))
    backbone = getattr(trainer.model, "backbone", None)  # ours: the scoring apart from the encoder
    if backbone is not None:
        score = "score_items" if sampled else "score_all"
        setattr(backbone, score, timed(getattr(backbone, score), totals, "scoring"))
    trainer.eval_collector.eval_batch_collect = timed(trainer.eval_collector.eval_batch_collect, totals, "collector")
    trainer.evaluator.evaluate = timed(trainer.evaluator.evaluate, totals, "metrics")
    started = time.perf_counter()
    with autocast:
        trainer.evaluate(test_data, load_best_model=False)
    total = time.perf_counter() - started
    for name in ("collate", "forward", "scoring", "collector", "metrics"):
        totals.setdefault(name, 0.0)
    totals["forward"] -= totals["scoring"]  # scoring runs inside full_sort_predict
    return {**totals, "other": total - sum(totals.values()), "total": total}


def first_batch_score_gap(variant: str, model, test_data, scratch: str, sampled: bool) -> float | None:
    """Largest |score - stock's score| over the first test batch (stock saves its scores; the
    variants share its weights, so fp32 must agree to rounding). None when stock did not run first."""
    import torch

    reference = Path(scratch) / "stock_scores.pt"
    interaction = next(iter(test_data))[0]
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=train_step.is_bf16(variant)):
        scores = (model.predict(interaction) if sampled else model.full_sort_predict(interaction)).float()
    if variant == "stock":
        torch.save(scores, reference)
        return 0.0
    return (scores - torch.load(reference)).abs().max().item() if reference.exists() else None


def worker(variant: str, args) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {**DATASETS[args.dataset], "eval_batch_size": args.batch, "metric_decimal_place": 12}
    sampled = args.mode != "full"
    overrides["eval_args"] = {**overrides["eval_args"], "mode": args.mode}
    if variant == "ours-notrim":
        overrides["trim_padding"] = False
    recbole_model = variant.startswith("stock")
    config, (_, _, test_data), model = train_step.recbole_setup("stock" if recbole_model else variant, args,
                                                                RECBOLE_DATASET.get(args.dataset, args.dataset), overrides,
                                                                all_splits=True)
    if variant == "stock-trainer":
        if (Path(args.scratch) / "stock_init.pt").exists():  # stock ran first: its weights
            model.load_state_dict(torch.load(Path(args.scratch) / "stock_init.pt", weights_only=True))
    else:
        train_step.share_initial_weights(variant, model, args.scratch)
    if variant == "stock":
        from recbole.trainer import Trainer as trainer_type
    else:
        from recbole_ext.trainer import trainer_class

        trainer_type = trainer_class(config)
    trainer = trainer_type(config, model)
    score_gap = first_batch_score_gap(variant, model, test_data, args.scratch, sampled)
    if getattr(model, "trims_padding", False):  # as recbole_ext.runner.build: rows by length (same metrics)
        from recbole_ext.models.trimming import sort_evaluation_by_length

        sort_evaluation_by_length([test_data], config["ITEM_LIST_LENGTH_FIELD"])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=train_step.is_bf16(variant))
    times = []
    for index in range(args.warmup + args.steps):
        started = time.perf_counter()
        with autocast:
            result = trainer.evaluate(test_data, load_best_model=False)
        if index >= args.warmup:
            times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    users = test_data.sample_size
    return {
        "variant": variant, "dataset": args.dataset, "users": users, "median_s_per_eval": seconds,
        "users_per_s": users / seconds, "score_gap": score_gap, "metrics": {k: float(v) for k, v in result.items()},
        "profile": profiled_evaluation(trainer, test_data, autocast, sampled), "anomaly_mode": torch.is_anomaly_enabled(),
        "threads": torch.get_num_threads(),
        "trim_padding": config["trim_padding"] if not recbole_model and has_config_key("trim_padding") else None,
    }


def metric_gap(row: dict, reference: dict) -> float:
    return max(abs(row["metrics"][name] - reference["metrics"][name]) for name in reference["metrics"])


def report(dataset: str, variants: list[str], rounds: list[dict], mode: str) -> None:
    first = rounds[0][variants[0]]
    ranking = "full sort over all items" if mode == "full" else f"the target among 100 sampled negatives ({mode})"
    print(f"\n{dataset}: {first['users']} test users, {ranking}")
    print(f"{'variant':<22} {'s/eval':>8} {'users/s':>9} {'vs stock':>20} {'|metric - stock|':>17} "
          f"{'|score - stock|':>16}  anomaly")
    for variant in variants:
        per_round = [r[variant] for r in rounds]
        seconds = statistics.median(r["median_s_per_eval"] for r in per_round)
        if "stock" in variants:
            ratio_text = train_step.ratio_text(train_step.round_ratios(rounds, "stock", variant, "median_s_per_eval"))
            gap = max(metric_gap(r[variant], r["stock"]) for r in rounds)
            score_gap = max(r[variant]["score_gap"] for r in rounds)
        else:
            ratio_text, gap, score_gap = "-", float("nan"), float("nan")
        print(f"{variant:<22} {seconds:>8.3f} {first['users'] / seconds:>9.0f} {ratio_text:>20} {gap:>17.2e} "
              f"{score_gap:>16.2e}  {per_round[0]['anomaly_mode']}")
    if "stock" in variants and "ours-fp32" in variants:
        fp32_gap = max(metric_gap(r["ours-fp32"], r["stock"]) for r in rounds)
        verdict = "OK" if fp32_gap <= EXACT_METRIC_GAP else "MISMATCH"
        print(f"ours-fp32 metrics vs stock: {verdict} (largest gap {fp32_gap:.2e}, allowed {EXACT_METRIC_GAP:.0e})")
    parts = ("collate", "forward", "scoring", "collector", "metrics", "other")
    print("where one evaluation's time goes (profiled run, share of its total; last round; forward: the "
          "model's full_sort_predict (predict when sampled) less scoring, ours' user-by-item matmul (candidate "
          "dot products), which stock's forward includes)")
    print(f"{'variant':<22} {'total s':>8} " + " ".join(f"{part:>10}" for part in parts))
    for variant in variants:
        profile = rounds[-1][variant]["profile"]
        print(f"{variant:<22} {profile['total']:>8.3f} " + " ".join(f"{profile[p] / profile['total']:>10.1%}" for p in parts))
    if "stock" in variants and "ours-fp32" in variants:
        print("metrics (ours-fp32 | stock, first round): " + ", ".join(
            f"{name} {rounds[0]['ours-fp32']['metrics'][name]:.6f} | {value:.6f}"
            for name, value in rounds[0]["stock"]["metrics"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    train_step.add_step_arguments(parser, batch=4096)
    parser.set_defaults(steps=3, warmup=1)
    parser.add_argument("--datasets", default="ml-100k,fearec-beauty")
    parser.add_argument("--mode", choices=["full", "uni100", "pop100"], default="full",
                        help="full sort (default) or 100 sampled negatives")
    parser.add_argument("--dataset", help=argparse.SUPPRESS)  # the worker's one dataset
    parser.add_argument("--variants", default=None, help="default: stock,ours-fp32,ours-fp32-pack-prune,ours-bf16-pack-prune(,ours-notrim)")
    parser.add_argument("--quick", action="store_true", help="smoke mode: ml-100k, 1 round, 1 timed evaluation")
    parser.add_argument("--json", action="store_true", help=f"also write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    if args.quick:
        args.datasets, args.rounds, args.steps, args.warmup = "ml-100k", 1, 1, 0
        args.variants = args.variants or "stock,ours-fp32"
    variants = args.variants.split(",") if args.variants else available_variants()
    datasets = args.datasets.split(",")
    unknown = [name for name in datasets if name not in DATASETS]
    if unknown:
        parser.error(f"--datasets: unknown {', '.join(unknown)} (known: {', '.join(DATASETS)})")

    results = {}
    for dataset in datasets:
        results[dataset] = train_step.run_rounds(__file__, variants, args, ["--dataset", dataset, "--mode", args.mode])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{results[datasets[0]][0][variants[0]]['threads']}; eval batch {args.batch}, length {args.length}; "
          f"{args.rounds} rounds of {args.steps} timed evaluations after {args.warmup} warm-up"
          f"{'; QUICK MODE (smoke only, numbers mean nothing)' if args.quick else ''}")
    for dataset in datasets:
        report(dataset, variants, results[dataset], args.mode)
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "date": time.strftime("%Y-%m-%d"), "quick": args.quick, "argv": sys.argv[1:], "mode": args.mode}
        path = RESULTS if args.mode == "full" else RESULTS.with_name(f"eval_throughput_{args.mode}.json")
        write_results(path, {"meta": meta, **results})


if __name__ == "__main__":
    main()
