"""Training-step time: our SASRec-equivalent (SeqTransformer) against stock RecBole SASRec.

    python benchmarks/train_step.py [--rounds 3] [--steps 8] [--warmup 2] [--batch 2048] [--length 50] [--threads N]
        [--variants stock,ours-exact,ours-fp32,ours-bf16,ours-fp32-pack,ours-fp32-pack-prune,ours-compile,...]
        [--compile-mode M]
        [--compile-dynamic none|true|false] [--compile-fallback-random] [--probe-lengths 50,21,8] [--json PATH]

Same data (ml-100k, RecBole's loader), same config (RecBole's SASRec defaults: 2 layers, 2 heads,
hidden 64, dropout 0.5, CE over all items, Adam), same initial weights (RecBole's, copied into
ours) and the same pre-fetched batches. Each variant runs in a fresh subprocess, one after the
other, so process-wide settings (allocator, anomaly mode) cannot leak between them:

- ``stock``: RecBole as a user gets it (importing its models leaves autograd anomaly mode on;
  glibc's default allocator). Only the numpy-2 aliases are added, without which RecBole cannot
  start on this stack.
- ``ours-exact``: ``import recbole_ext`` (anomaly off, allocator tuned) and SeqTransformer with
  ``dropout_impl: torch`` (RecBole's dropout random stream): its losses must equal stock's.
- ``ours-fp32``: SeqTransformer (fast dropout: same distribution, other stream), with the speed
  switches below off whatever their defaults: each variant names the switches it runs with.
- ``ours-bf16``: the same under bfloat16 autocast (``bf16: true``).
- switch suffixes, in this order (:data:`SWITCH_SUFFIXES`): ``-pack`` ``pack_tokens: true``
  (projections and the token-wise layers on real tokens only; ml-100k's batches are ~78% real
  tokens); ``-prune`` ``prune_unread_states: true`` (the last block's residuals, norms, dropout and
  feed-forward at the one position per sequence the loss reads). The defaults are
  ``ours-fp32-pack-prune``. A variant's "vs base" column compares it with the variant without its
  last suffix, when that ran.
- ``ours-compile`` / ``ours-bf16-compile`` (not run by default): ``ours-fp32`` / ``ours-bf16`` with
  ``model.calculate_loss`` under ``torch.compile`` (``--compile-mode``, ``--compile-dynamic``);
  backward goes through AOTAutograd, Adam stays eager. ``--compile-fallback-random`` makes inductor
  draw random numbers as eager does, so a compiled variant's losses can be compared with its eager
  one's (otherwise they differ by their dropout draws). Each worker compiles with an empty inductor
  cache (a first run's compile time) unless ``--warm-compile-cache``.

Printed: median seconds per step (forward + backward + Adam) over the timed steps, the ratio to
stock and to its base (the eager variant for a compiled one; see ``-pack``), the first step's time (with
compilation), achieved GFLOP/s (:func:`sasrec_step_flops`, the analytic GEMM FLOPs of the step, over
the median time; the trimmed length when the model trims) and its fraction of this machine's GEMM peak of the same dtype
(``benchmarks/matmul_peak.py``'s results, run it first), minor page faults per step, the largest gap
between a variant's per-step losses and stock's (``ours-exact`` must be ~1e-6: same model, same
numbers; the others differ by their dropout draws) and its base's, and dynamo's graph
and graph-break counts. ``--probe-lengths 50,37,21,8,3,1,44`` then runs steps at those
sequence lengths (the shapes trailing-padding trimming produces) and prints the first step at each
new length (recompilation included) and the second. Run it with nothing else busy on the machine.
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

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

VARIANTS = ("stock", "ours-exact", "ours-fp32", "ours-bf16")
# Variant suffix → the SeqTransformer switch it turns on (off without it).
SWITCH_SUFFIXES = {"pack": "pack_tokens", "prune": "prune_unread_states"}
# torch.compile of the step's forward (``model.calculate_loss``; backward through AOTAutograd): not in
# the default list (compilation takes tens of seconds per process).
COMPILE_VARIANTS = ("ours-compile", "ours-bf16-compile")


def recbole_setup(variant: str, args, dataset_name: str = "ml-100k", overrides: dict | None = None,
                  all_splits: bool = False):
    """Config, dataloader and model for one variant (runs inside the worker process).

    ``overrides``: config keys on top of this benchmark's; ``all_splits``: return the
    (train, valid, test) loaders instead of the training loader alone."""
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

        parts = variant.split("-")
        overrides = {**(overrides or {}), **{key: suffix in parts for suffix, key in SWITCH_SUFFIXES.items()}}
        from recbole_ext.compat import SafeConfig as config_class
        from recbole_ext.models import SeqTransformer as model_class

    from recbole.data import create_dataset, data_preparation
    from recbole.utils import init_seed

    sys.argv = sys.argv[:1]
    config = config_class(model=model_class, dataset=dataset_name, config_dict={
        "train_batch_size": args.batch, "MAX_ITEM_LIST_LENGTH": args.length, "loss_type": "CE",
        "train_neg_sample_args": None, "show_progress": False, "state": "ERROR", "use_gpu": False,
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "checkpoint_dir": os.path.join(args.scratch, variant),
        **({"n_layers": 2, "n_heads": 2, "hidden_size": 64, "inner_size": 256, "hidden_dropout_prob": 0.5,
            "attn_dropout_prob": 0.5, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "initializer_range": 0.02,
            "dropout_impl": "torch" if variant == "ours-exact" else "fast"}
           if variant != "stock" else {}),
        **(overrides or {}),
    })
    init_seed(config["seed"], config["reproducibility"])
    dataset = create_dataset(config)
    splits = data_preparation(config, dataset)
    init_seed(config["seed"], config["reproducibility"])
    model = model_class(config, splits[0]._dataset)
    return config, (splits if all_splits else splits[0]), model


def share_initial_weights(variant: str, model, scratch: str) -> None:
    """``stock`` saves its initial weights in ``scratch``; the other variants start from them when
    stock ran first (RecBole SASRec names mapped onto SeqTransformer's)."""
    import torch

    reference = Path(scratch) / "stock_init.pt"
    if variant == "stock":
        torch.save(model.state_dict(), reference)
    elif reference.exists():
        from recbole_ext.models.recbole_import import state_dict_from_recbole

        model.load_state_dict(state_dict_from_recbole(torch.load(reference, weights_only=True), "SASRec"))


def parse_variant(variant: str) -> tuple[str, bool]:
    """``name[-compile]`` → (setup variant, compiled). ``ours-compile`` is ``ours-fp32`` compiled."""
    compiled = variant.endswith("-compile")
    name = variant.removesuffix("-compile")
    return ("ours-fp32" if name == "ours" else name), compiled


def is_bf16(setup_variant: str) -> bool:
    return "bf16" in setup_variant.split("-")


def sasrec_step_flops(batch: int, length: int, hidden: int, inner: int, n_layers: int, n_item_rows: int,
                      token_rows: int | None = None, read_rows: int | None = None) -> int:
    """Analytic GEMM FLOPs of one SASRec training step with CE over all items (2 FLOPs per multiply-add).

    Forward, with B·L token rows, D = hidden, I = inner (heads split D, so summed over heads the
    attention GEMMs have width D), per layer:

        Q, K, V, output projections   4 · 2·B·L·D·D
        scores Q·Kᵀ                   2·B·L·L·D
        mixing P·V                    2·B·L·L·D
        feed-forward W1, W2           2 · 2·B·L·D·I

    plus the logits of the B last states against every item-embedding row (N, padding row included,
    as RecBole): 2·B·D·N. Backward computes both input gradients of every GEMM (each as large as the
    forward GEMM; the first layer's input gradient too, since it feeds the embedding), so a step is
    3 × forward. Not counted: elementwise work (softmax, norms, dropout, GELU, Adam), the embedding
    gather, biases. Causal masking does not skip the masked half of Q·Kᵀ and P·V: counted in full.
    ``token_rows``: the rows the projections and feed-forward run on when tokens are packed
    (``pack_tokens``: the real ones, rounded up), default B·L. ``read_rows``: when the last block is
    pruned (``prune_unread_states``; SASRec reads B rows), its output projection, QKᵀ, PV and
    feed-forward run for those rows' queries only; Q, K and V are still projected for every row.
    ``tests/benchmarks/test_train_step_smoke.py`` checks this against torch's FLOP counter.
    """
    tokens = batch * length if token_rows is None else token_rows
    per_layer = 4 * 2 * tokens * hidden * hidden + 2 * 2 * batch * length * length * hidden \
        + 2 * 2 * tokens * hidden * inner
    last = per_layer
    if read_rows is not None:
        last = 3 * 2 * tokens * hidden * hidden + 2 * read_rows * hidden * hidden \
            + 2 * 2 * read_rows * length * hidden + 2 * 2 * read_rows * hidden * inner
    forward = (n_layers - 1) * per_layer + last + 2 * batch * hidden * n_item_rows
    return 3 * forward


def step_flops(config, model, interaction) -> int:
    """:func:`sasrec_step_flops` for this batch at the length the model runs it (its trimmed length)."""
    width = interaction[model.ITEM_SEQ].size(1)
    length = width
    if getattr(model, "trims_padding", False):
        length = min(width, int(interaction[model.ITEM_SEQ_LEN].max()) + getattr(model.backbone, "trailing_slots", 0))
    rows = None
    if getattr(model, "packs_tokens", False):  # the rows it packs: the real ones, rounded up
        from recbole_ext.nn.context import packed_row_index

        index = packed_row_index(interaction[model.ITEM_SEQ][:, :length])
        rows = None if index is None else index.numel()
    batch = interaction[model.ITEM_SEQ].size(0)
    pruned = getattr(model, "prunes_training_states", False)
    return sasrec_step_flops(batch, length, config["hidden_size"], config["inner_size"], config["n_layers"],
                             model.item_embedding.weight.size(0), token_rows=rows, read_rows=batch if pruned else None)


def compile_loss(model, args):
    """``model.calculate_loss`` under torch.compile with the benchmark's ``--compile-*`` options."""
    import tempfile

    import torch

    if not getattr(args, "warm_compile_cache", False):  # a cold compile, as a first run sees it
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-", dir=args.scratch)
    torch._inductor.config.fallback_random = getattr(args, "compile_fallback_random", False)
    mode = getattr(args, "compile_mode", "default")
    dynamic = {"none": None, "true": True, "false": False}[getattr(args, "compile_dynamic", "none")]
    return torch.compile(model.calculate_loss, mode=None if mode == "default" else mode, dynamic=dynamic)


def dynamo_stats() -> dict:
    """Graphs compiled so far and graph breaks (by count), from dynamo's counters."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": counters["stats"]["unique_graphs"], "graph_breaks": sum(counters["graph_break"].values())}


def at_length(model, interaction, length: int):
    """A shape probe: ``interaction`` cut to its first ``length`` columns (lengths clamped), the
    shape a trimmed batch whose longest sequence has ``length`` items has. Only for timing."""
    from recbole.data.interaction import Interaction

    fields = dict(interaction.interaction)
    fields[model.ITEM_SEQ] = fields[model.ITEM_SEQ][:, :length].contiguous()
    fields[model.ITEM_SEQ_LEN] = fields[model.ITEM_SEQ_LEN].clamp(max=length)
    return Interaction(fields)


def worker(variant: str, args) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    setup_variant, compiled = parse_variant(variant)
    config, train_data, model = recbole_setup(setup_variant, args)
    share_initial_weights(setup_variant, model, args.scratch)
    batches = []
    for interaction in train_data:
        batches.append(interaction)
        if len(batches) == args.warmup + args.steps:
            break
    optimizer = torch.optim.Adam(model.parameters(), lr=config["learning_rate"])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=is_bf16(setup_variant))
    loss_function = compile_loss(model, args) if compiled else model.calculate_loss
    torch.manual_seed(0)
    model.train()

    def step(interaction):
        optimizer.zero_grad()
        with autocast:
            loss = loss_function(interaction)
        loss.backward()
        optimizer.step()
        return loss

    times, losses, flops = [], [], []
    faults_before = first_step_s = None
    for index, interaction in enumerate(batches):
        if index == args.warmup:
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        loss = step(interaction)
        elapsed = time.perf_counter() - started
        if index == 0:
            first_step_s = elapsed  # includes compilation for compiled variants
        if index >= args.warmup:
            times.append(elapsed)
            losses.append(loss.item())
            flops.append(step_flops(config, model, interaction))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    result = {
        "variant": variant, "median_s_per_step": statistics.median(times), "losses": losses,
        "minor_faults_per_step": faults / args.steps, "anomaly_mode": torch.is_anomaly_enabled(),
        "threads": torch.get_num_threads(), "first_step_s": first_step_s,
        "flops_per_step": statistics.mean(flops) if flops else None,
    }
    if compiled:
        result["dynamo"] = dynamo_stats()
    probe = [int(length) for length in getattr(args, "probe_lengths", "").split(",") if length]
    if probe:  # after the timed steps: first call at each new length (recompiles?) and a second one
        result["length_probe"] = []
        for length in probe:
            interaction = at_length(model, batches[0], length)
            before = dynamo_stats() if compiled else None
            first = time.perf_counter()
            step(interaction)
            second = time.perf_counter()
            step(interaction)
            done = time.perf_counter()
            entry = {"length": length, "first_s": second - first, "second_s": done - second}
            if compiled:
                after = dynamo_stats()
                entry["new_graphs"] = after["unique_graphs"] - before["unique_graphs"]
            result["length_probe"].append(entry)
    return result


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


def add_quick_and_results_arguments(parser: argparse.ArgumentParser, results: Path, quick_help: str) -> None:
    """``--quick`` (a smoke run, never a measurement) and ``--json`` (where results go; by default
    ``results``, except in ``--quick``, so a smoke run cannot overwrite a committed measurement)."""
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", default=None, help=f"where to write the results (default: "
                        f"{results.relative_to(results.parents[2])}; nothing in --quick)")


def parse_quick_and_results(parser: argparse.ArgumentParser, results: Path, **quick_settings) -> argparse.Namespace:
    """Parse the command line; ``--quick`` applies ``quick_settings`` (option name -> value)."""
    args = parser.parse_args()
    if args.quick:
        for name, value in quick_settings.items():
            setattr(args, name, value)
    args.json = results_target(args.json, args.quick, results)
    return args


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
                process = subprocess.run(command, capture_output=True, text=True)
                if process.returncode:
                    sys.exit(f"worker {name} failed:\n{process.stderr[-4000:]}")
                results[name] = json.loads(process.stdout.strip().splitlines()[-1])
            rounds.append(results)
    return rounds


def round_ratios(rounds: list[dict], name: str, baseline: str, key: str | None = "median_s_per_step") -> list[float]:
    """``name``'s time over ``baseline``'s, one ratio per round (``key``: the time's field in a round's cell;
    None where cells are bare seconds). Cells of one round share the machine's state, so their ratio is
    steadier than a ratio of medians over rounds."""
    def seconds(cell):
        return cell[key] if key else cell

    return [seconds(r[name]) / seconds(r[baseline]) for r in rounds]


def ratio_text(ratios: list[float]) -> str:
    """Per-round ratios as every step benchmark prints them: median, then range in brackets."""
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


def add_compile_arguments(parser: argparse.ArgumentParser, probes: bool = True) -> None:
    """Options of the ``*-compile`` variants (workers read them with defaults, so other step
    benchmarks that reuse :func:`worker` need not define them); ``probes``: also ``--probe-lengths``,
    which only this script's workers run."""
    parser.add_argument("--compile-mode", default="default",
                        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    parser.add_argument("--compile-dynamic", default="none", choices=("none", "true", "false"),
                        help="torch.compile's dynamic= (none: static first, dynamic after a shape changes)")
    parser.add_argument("--compile-fallback-random", action="store_true",
                        help="inductor draws random numbers as eager does: compiled losses comparable to eager")
    parser.add_argument("--warm-compile-cache", action="store_true",
                        help="reuse inductor's on-disk cache (default: a fresh one per worker, so the first step "
                             "shows a cold compile)")
    if probes:
        parser.add_argument("--probe-lengths", default="",
                            help="after the timed steps, steps at these lengths (e.g. 50,37,21,8,3,1,44): recompiles, s/step")


def compile_forwarded(args) -> list[str]:
    """The ``--compile-*`` options as a worker subprocess's arguments."""
    return (["--compile-mode", args.compile_mode, "--compile-dynamic", args.compile_dynamic]
            + (["--compile-fallback-random"] if args.compile_fallback_random else [])
            + (["--warm-compile-cache"] if args.warm_compile_cache else []))


def base_variant(variant: str, variants: list[str]) -> str | None:
    """The variant ``variant`` is compared with, when it ran: a compiled one's eager variant; one
    ending in a switch suffix (``-pack``, ``-prune``) the variant without it."""
    setup_variant, compiled = parse_variant(variant)
    if not compiled:
        name, _, last = setup_variant.rpartition("-")
        setup_variant = name if last in SWITCH_SUFFIXES else None
    return setup_variant if setup_variant in variants and setup_variant != variant else None


def load_peaks(path: str) -> dict:
    """``matmul_peak.py``'s best GFLOP/s by dtype, or {} when it has not run."""
    try:
        return json.loads(Path(path).read_text())["peak_gflops"]
    except (OSError, KeyError, ValueError):
        return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_arguments(parser)
    add_compile_arguments(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"any of {', '.join(VARIANTS + COMPILE_VARIANTS)}, and ours-* variants with "
                             f"the switch suffixes {', '.join('-' + s for s in SWITCH_SUFFIXES)} (see the module docs)")
    parser.add_argument("--peak", default=str(Path(__file__).parent / "results" / "matmul_peak.json"),
                        help="matmul_peak.py's results, for the fraction of peak")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return

    variants = args.variants.split(",")
    forwarded = compile_forwarded(args) + ["--probe-lengths", args.probe_lengths]
    rounds = run_rounds(__file__, variants, args, forwarded)
    peaks = load_peaks(args.peak)
    import platform

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{rounds[0][variants[0]]['threads']}; batch {args.batch}, length {args.length}; {args.rounds} rounds of "
          f"{args.steps} timed steps after {args.warmup} warm-up; medians over rounds, ratio range in brackets")
    print(f"compile: mode {args.compile_mode}, dynamic {args.compile_dynamic}, warm cache {args.warm_compile_cache}, fallback_random "
          f"{args.compile_fallback_random}; peak GFLOP/s from {args.peak}: {peaks or 'not measured'}")
    print(f"{'variant':<24} {'s/step':>8} {'vs stock':>18} {'vs base':>18} {'1st step s':>10} {'GFLOP/s':>8} "
          f"{'of peak':>7} {'faults/step':>11}  anomaly  {'|Δloss| stock':>13} {'|Δloss| base':>13}  dynamo")

    def ratio(base: str, variant: str) -> str:
        return ratio_text(round_ratios(rounds, base, variant))  # speed-up: the base's time over the variant's

    def loss_gap(base: str, variant: str) -> float:
        return max(abs(a - b) for r in rounds for a, b in zip(r[variant]["losses"], r[base]["losses"]))

    for variant in variants:
        per_round = [r[variant] for r in rounds]
        seconds = statistics.median(r["median_s_per_step"] for r in per_round)
        base = base_variant(variant, variants)
        first = statistics.median(r["first_step_s"] for r in per_round)
        flops = per_round[0]["flops_per_step"]
        gflops = flops / seconds / 1e9
        peak = peaks.get("bf16" if is_bf16(parse_variant(variant)[0]) else "fp32")
        faults = statistics.median(r["minor_faults_per_step"] for r in per_round)
        dynamo = per_round[0].get("dynamo", "")
        print(f"{variant:<24} {seconds:>8.3f} {ratio('stock', variant) if 'stock' in variants else '-':>18} "
              f"{ratio(base, variant) if base else '-':>18} {first:>10.2f} {gflops:>8.1f} "
              f"{f'{gflops / peak:.1%}' if peak else '-':>7} {faults:>11.0f}  {str(per_round[0]['anomaly_mode']):<7}  "
              f"{loss_gap('stock', variant) if 'stock' in variants else float('nan'):>13.2e} "
              f"{loss_gap(base, variant) if base else float('nan'):>13.2e}  {dynamo}")
    print(f"GFLOP/s: analytic GEMM FLOPs of the step (sasrec_step_flops: {rounds[0][variants[0]]['flops_per_step'] / 1e9:.1f} "
          f"GFLOP for {variants[0]}; packed and pruned variants count the rows they run) / median s/step; of peak: against "
          "matmul_peak.py's best GEMM of the same dtype")
    if args.probe_lengths:
        print("length probe (median over rounds): s/step of the first step at each new length (includes any "
              "recompilation) / of the second; new graphs compiled")
        for variant in variants:
            probes = [r[variant]["length_probe"] for r in rounds]
            cells = []
            for index, entry in enumerate(probes[0]):
                first_s = statistics.median(p[index]["first_s"] for p in probes)
                second_s = statistics.median(p[index]["second_s"] for p in probes)
                graphs = f" +{entry['new_graphs']}g" if "new_graphs" in entry else ""
                cells.append(f"L{entry['length']}: {first_s:.2f}/{second_s:.2f}{graphs}")
            print(f"  {variant:<22} " + "  ".join(cells))
    if args.json:
        write_results(args.json, rounds)


if __name__ == "__main__":
    main()
