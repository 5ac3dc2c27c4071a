"""Train-step time and peak memory against sequence length: softmax SASRec vs LinRec-SASRec.

    python benchmarks/linrec_scaling.py                      # N = 50 ... 1600, the full run (minutes)
    python benchmarks/linrec_scaling.py --quick              # smoke: N = 16, 32, 64, tiny batch
    python benchmarks/linrec_scaling.py --device cuda        # the same on a GPU (CUDA peak-memory counter)
    python benchmarks/linrec_scaling.py --lengths 200 --rounds 5   # one N, 5 alternating rounds: ratio spread
    python benchmarks/linrec_scaling.py --lengths 200 --paired --steps 40   # one N, steps paired in one process

The paper's ML-1M setting (LinRec Table 4): 2 layers, d = 128, 8 heads, FFN 256, dropout 0.2, CE over
3,706 items, Adam; sequences filled to N (no padding, so every mask mode does the same work).
Variants: ``softmax`` (SASRec: RecBole's unfused attention, causal + padding mask), and LinRec
(norm ``code``) with each ``mask``: ``none`` (authors), ``padding``, ``causal`` (chunked prefix form).

Measured per (N, variant), variants alternating within each N so a busy machine slows all alike; with
``--rounds R`` every N runs R such alternating rounds (each cell a fresh process), the row reports the
median over rounds and the summary each round's own ratio to softmax (timings on a shared 2-vCPU VM move
±20% between runs, so only ratios paired within a round are comparable):

- ``s/step``: median wall time of forward + backward + Adam over ``--steps`` steps after ``--warmup``.
  With ``--paired`` all variants of an N share one process and step in turn (:func:`measure_paired`);
  each pass is a round, and the speed-ups are paired within it.
- ``peak MB`` (CPU): peak bytes of tensors allocated during one step, beyond what existed before it
  (weights, Adam state). Method: ``torch.profiler`` with ``profile_memory=True`` attributes every
  allocation and free to the op that made it; summing each op's own (self) net bytes in time order
  gives the live-tensor curve at op granularity, whose maximum is the peak. Temporaries created and
  freed inside one op are not seen, so this is a lower bound of the allocator's true peak; the
  allocator's cache and fragmentation are not included. On CUDA: ``torch.cuda.max_memory_allocated``
  minus the allocation before the step.
- ``saved MB``: bytes autograd keeps for backward (unique storages seen by a saved-tensors hook),
  the activation memory that the N×N attention tensors dominate.

From N = ``--plain-malloc-from`` (1600) on, every variant runs with glibc's default allocator
(``RECBOLE_EXT_MALLOC_TUNING=0``): with the tuned one softmax's 1.3 GB score tensors fragment the kept
buffers past this VM's 24 GB and the cell is killed.

Writes ``benchmarks/results/linrec_scaling.json`` and ``.png`` (time and peak memory against N,
log-log, with the ratios to softmax and where the curves cross); ``--out`` changes the stem; ``--quick``
writes nothing unless given ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)

RESULTS = Path(__file__).parent / "results"
VARIANTS = {
    "softmax": "attention=softmax",
    "linrec-none": "attention={type: linrec, norm: code, mask: none}",
    "linrec-padding": "attention={type: linrec, norm: code, mask: padding}",
    "linrec-causal": "attention={type: linrec, norm: code, mask: causal}",
    # optional: the causal form that recomputes its chunks in backward (memory for time)
    "linrec-causal-recompute": "attention={type: linrec, norm: code, mask: causal, recompute: true}",
    # optional (--variants): the paper's normalisation (prefix column norms when causal) and the Table 3 baselines
    "linrec-paper-causal": "attention={type: linrec, norm: paper, mask: causal}",
    "linear_transformer-causal": "attention={type: linear_transformer, mask: causal}",
    "efficient_attention-causal": "attention={type: efficient_attention, mask: causal}",
    # optional: the step without attention (each block's attention returns V): the shared floor under
    # both models, which bounds softmax / LinRec at (floor + softmax attention) / floor
    "no-attention": "attention={type: linrec, norm: code, mask: padding}",
}
DEFAULT_VARIANTS = ("softmax", "linrec-none", "linrec-padding", "linrec-causal")
N_ITEMS = 3706  # ML-1M items with interactions


class ItemCount:
    """All SeqTransformer reads from a dataset at construction: the item count."""

    def num(self, field):
        return N_ITEMS + 1


def build_model(variant: str, length: int, args):
    import torch

    from recbole_ext.config import resolve
    from recbole_ext.runner import recbole_config

    values = {"model": "LinRec", "dataset": "ml-100k", "MAX_ITEM_LIST_LENGTH": length, "hidden_size": args.hidden,
              "train_neg_sample_args": None, "use_gpu": args.device == "cuda", "state": "ERROR", "show_progress": False}
    resolved = resolve(None, [VARIANTS[variant]], values)
    config = recbole_config(resolved, checkpoint_dir=Path(tempfile.gettempdir()) / "linrec_scaling")
    torch.manual_seed(0)
    model = config.model_class(config, ItemCount()).to(args.device)
    if variant == "no-attention":
        from recbole_ext.nn.slots import AttentionPart

        for part in model.modules():
            if isinstance(part, AttentionPart):
                part.mix = lambda query, key, value, context: value
    return config, model


def synthetic_batch(model, length: int, args):
    import torch

    generator = torch.Generator().manual_seed(length)
    items = torch.randint(1, N_ITEMS + 1, (args.batch, length + 1), generator=generator)
    return {model.ITEM_SEQ: items[:, :-1].to(args.device),
            model.ITEM_SEQ_LEN: torch.full((args.batch,), length).to(args.device),
            model.POS_ITEM_ID: items[:, -1].to(args.device)}


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def train_step(model, optimizer, batch) -> None:
    optimizer.zero_grad(set_to_none=True)
    model.calculate_loss(batch).backward()
    optimizer.step()


def profiled_peak_bytes(model, optimizer, batch, device: str) -> int:
    import torch

    if device == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        train_step(model, optimizer, batch)
        synchronize(device)
        return torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        train_step(model, optimizer, batch)
    events = sorted((e for e in profiler.events() if e.self_cpu_memory_usage), key=lambda e: e.time_range.start)
    live = peak = 0
    for event in events:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def saved_bytes(model, batch) -> int:
    import torch

    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model.calculate_loss(batch)
    del loss
    return sum(size for pointer, size in storages.items() if pointer not in parameters)


def measure(variant: str, length: int, args, timed: bool = True) -> dict:
    """One cell: step time (median of ``--steps`` after ``--warmup``; NaN unless ``timed``), peak and saved bytes."""
    import torch

    config, model = build_model(variant, length, args)
    model.train()
    batch = synthetic_batch(model, length, args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = [] if timed else [math.nan]
    for step in range(args.warmup + (args.steps if timed else 0)):
        synchronize(args.device)
        started = time.perf_counter()
        train_step(model, optimizer, batch)
        synchronize(args.device)
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
    return {"variant": variant, "length": length, "s_per_step": statistics.median(times),
            "peak_bytes": profiled_peak_bytes(model, optimizer, batch, args.device),
            "saved_bytes": saved_bytes(model, batch)}


def measure_paired(variants: list[str], length: int, args) -> dict[str, list[float]]:
    """Step times of every variant at one N, interleaved in one process: after ``--warmup`` steps
    each, ``--steps`` passes of one step per variant (the order rotates every pass). A pass takes
    well under a second at N <= 800, so the VM's slow spells, which last seconds, hit all variants
    of a pass alike and the pass's own ratios stay comparable."""
    import torch

    built = {}
    for variant in variants:
        _, model = build_model(variant, length, args)
        model.train()
        built[variant] = (model, torch.optim.Adam(model.parameters(), lr=1e-3), synthetic_batch(model, length, args))
    for _ in range(args.warmup):
        for variant in variants:
            train_step(*built[variant])
    times = {variant: [] for variant in variants}
    for step in range(args.steps):
        shift = step % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            synchronize(args.device)
            started = time.perf_counter()
            train_step(*built[variant])
            synchronize(args.device)
            times[variant].append(time.perf_counter() - started)
    return times


def crossings(lengths: list[int], ours: list[float], baseline: list[float]) -> list[float]:
    """Lengths where ``ours`` and ``baseline`` cross (log-log linear interpolation between grid points)."""
    found = []
    for i in range(len(lengths) - 1):
        before = math.log(ours[i] / baseline[i])
        after = math.log(ours[i + 1] / baseline[i + 1])
        if before == 0:
            found.append(float(lengths[i]))
        elif before * after < 0:
            fraction = before / (before - after)
            found.append(math.exp(math.log(lengths[i]) + fraction * (math.log(lengths[i + 1]) - math.log(lengths[i]))))
    return found


def median_over_rounds(cells: list[dict]) -> dict:
    """One (variant, N) row from its rounds: medians of the measures, each round's time kept."""
    row = dict(cells[0])
    for metric in ("s_per_step", "peak_bytes", "saved_bytes"):
        values = [cell[metric] for cell in cells if not math.isnan(cell[metric])]
        row[metric] = statistics.median(values) if values else math.nan
    row["s_per_step_rounds"] = [cell["s_per_step"] for cell in cells]
    return row


def summarise(rows: list[dict], variants: list[str], lengths: list[int]) -> dict:
    table = {(row["variant"], row["length"]): row for row in rows}
    summary = {}
    for variant in variants:
        if variant == "softmax" or "softmax" not in variants:
            continue
        entry = {}
        for metric in ("s_per_step", "peak_bytes"):
            ours = [table[variant, n][metric] for n in lengths]
            base = [table["softmax", n][metric] for n in lengths]
            entry[metric] = {"ratio_to_softmax": [o / b for o, b in zip(ours, base)],
                             "crosses_softmax_at_N": crossings(lengths, ours, base)}
        per_round = [
            [o / b for o, b in zip(table[variant, n]["s_per_step_rounds"], table["softmax", n]["s_per_step_rounds"])]
            for n in lengths]
        entry["s_per_step"]["ratio_to_softmax_per_round"] = per_round
        # The speed-up each round (or pass, with --paired) measured against its own softmax time, and
        # its spread: what to quote where the machine's speed drifts between rounds.
        entry["s_per_step"]["speedup_per_round"] = [spread([1 / r for r in ratios if not math.isnan(r)])
                                                    for ratios in per_round]
        summary[variant] = entry
    return summary


def spread(values: list[float]) -> dict:
    """Median and range of paired speed-ups: min-max below 10 values, else the 10th-90th percentiles."""
    if not values:
        return {"median": math.nan, "low": math.nan, "high": math.nan, "range": "none", "count": 0}
    if len(values) < 10:
        low, high, label = min(values), max(values), "min-max"
    else:
        deciles = statistics.quantiles(values, n=10)
        low, high, label = deciles[0], deciles[-1], "p10-p90"
    return {"median": statistics.median(values), "low": low, "high": high, "range": label, "count": len(values)}


def print_table(rows: list[dict], variants: list[str], lengths: list[int], summary: dict) -> None:
    table = {(row["variant"], row["length"]): row for row in rows}
    width = max(len(v) for v in variants)
    print(f"{'N':>6} {'variant':<{width}} {'s/step':>9} {'peak MB':>10} {'saved MB':>10} {'softmax/this time':>24} "
          f"{'this/softmax peak':>18}")
    for n in lengths:
        for variant in variants:
            row = table[variant, n]
            ratio_time = ratio_memory = "-"
            if variant in summary:
                index = lengths.index(n)
                paired = summary[variant]["s_per_step"]["speedup_per_round"][index]
                if paired["count"] > 1:  # the median of the paired speed-ups and their range
                    ratio_time = f"{paired['median']:.2f}x [{paired['low']:.2f}-{paired['high']:.2f}]"
                else:
                    ratio_time = f"{1 / summary[variant]['s_per_step']['ratio_to_softmax'][index]:.2f}x"
                ratio_memory = f"{summary[variant]['peak_bytes']['ratio_to_softmax'][index]:.3f}"
            print(f"{n:>6} {variant:<{width}} {row['s_per_step']:>9.4f} {row['peak_bytes'] / 2**20:>10.1f} "
                  f"{row['saved_bytes'] / 2**20:>10.1f} {ratio_time:>24} {ratio_memory:>18}")
    for variant, entry in summary.items():
        for metric, label in (("s_per_step", "time"), ("peak_bytes", "peak memory")):
            points = entry[metric]["crosses_softmax_at_N"]
            where = ", ".join(f"N≈{p:.0f}" for p in points) if points else f"none in N={lengths[0]}..{lengths[-1]}"
            print(f"{variant}: {label} crosses softmax at {where}")


def plot(rows: list[dict], variants: list[str], lengths: list[int], summary: dict, path: Path, title: str) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = {(row["variant"], row["length"]): row for row in rows}
    figure, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    panels = (("s_per_step", 1.0, "s / train step"), ("peak_bytes", 2.0**-20, "peak tensor memory (MiB)"))
    for column, (metric, scale, label) in enumerate(panels):
        for index, variant in enumerate(variants):
            style = {"marker": "o", "label": variant, "color": f"C{index}"}
            axes[0, column].loglog(lengths, [table[variant, n][metric] * scale for n in lengths], **style)
            if variant in summary:
                axes[1, column].loglog(lengths, summary[variant][metric]["ratio_to_softmax"], **style)
                for point in summary[variant][metric]["crosses_softmax_at_N"]:
                    for row_axes in axes[:, column]:
                        row_axes.axvline(point, linestyle=":", linewidth=1, color="grey")
                    axes[1, column].annotate(f"N≈{point:.0f}", (point, 1.0), textcoords="offset points", xytext=(3, 5),
                                             fontsize=8)
        axes[0, column].set_ylabel(label)
        axes[1, column].axhline(1.0, color="black", linewidth=0.8)
        axes[1, column].set_ylabel(f"{label.split(' (')[0]}: variant / softmax")
        axes[1, column].set_xlabel("max sequence length N")
        axes[0, column].legend(fontsize=8)
        axes[1, column].set_xticks(lengths, [str(n) for n in lengths])
        axes[1, column].minorticks_off()
        axes[1, column].yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="50,100,200,400,800,1600")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of all variants per N")
    parser.add_argument("--plain-malloc-from", type=int, default=1600, metavar="N",
                        help="lengths from N on run with glibc's default allocator (RECBOLE_EXT_MALLOC_TUNING=0): "
                             "the tuned one keeps freed buffers, which fragment until softmax at N=1600 passes 24 GB "
                             "of resident memory and is killed")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"any of {', '.join(VARIANTS)}")
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 16, 32, 64, batch 2, 1 step")
    parser.add_argument("--paired", action="store_true",
                        help="time all variants of an N in one process, one step each in turn (--steps passes, each "
                             "pass a round of paired ratios); memory still per variant in its own process")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paired-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="output stem (default benchmarks/results/linrec_scaling; nothing in --quick)")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.batch, args.steps, args.warmup, args.hidden = "16,32,64", 2, 1, 1, 32

    import torch

    import recbole_ext  # noqa: F401  (compat before RecBole)

    def run_worker(n: int, *worker_args: str) -> tuple[object | None, str | None]:
        """This script in a fresh process for one measurement: (its JSON result, None) or (None, why it failed)."""
        forwarded = [a for a in sys.argv[1:] if a not in ("--quick", "--paired")] + (["--quick"] if args.quick else [])
        environment = dict(os.environ)
        if n >= args.plain_malloc_from:  # every variant of this N alike
            environment["RECBOLE_EXT_MALLOC_TUNING"] = "0"
        done = subprocess.run([sys.executable, __file__, *forwarded, *worker_args],
                              capture_output=True, text=True, env=environment)
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1]), None
        # e.g. killed by the kernel: softmax at N=1600 needs several GB per attention matrix
        return None, "out of memory (killed)" if done.returncode in (-9, 137) else done.stderr.strip().splitlines()[-1]

    def measure_in_subprocess(variant: str, n: int, timed: bool = True) -> dict:
        row, error = run_worker(n, "--worker", f"{variant}:{n}", *([] if timed else ["--memory-only"]))
        if error:
            row = {"variant": variant, "length": n, "s_per_step": math.nan, "peak_bytes": math.nan,
                   "saved_bytes": math.nan, "error": error}
        print(f"  measured N={n} {variant}{': ' + row['error'] if 'error' in row else ''}", file=sys.stderr)
        return row

    def paired_cells(n: int) -> list[list[dict]]:
        """Per pass, one cell per variant: that pass's step time with the variant's memory."""
        memory = [measure_in_subprocess(variant, n, timed=False) for variant in variants]
        passes: list[list[dict]] = []
        for _ in range(args.rounds):
            times, error = run_worker(n, "--paired-worker", str(n))
            print(f"  timed N={n} {','.join(variants)} paired{': ' + error if error else ''}", file=sys.stderr)
            times = times or {variant: [math.nan] for variant in variants}
            passes += [[dict(cell, s_per_step=times[variant][step]) for variant, cell in zip(variants, memory)]
                       for step in range(len(times[variants[0]]))]
        return passes

    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = [int(n) for n in args.lengths.split(",")]
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    if args.worker:  # one (variant, N) in this process, so an out-of-memory kill loses only that cell
        variant, _, n = args.worker.rpartition(":")
        print(json.dumps(measure(variant, int(n), args, timed=not args.memory_only)))
        return
    if args.paired_worker:
        print(json.dumps(measure_paired(variants, args.paired_worker, args)))
        return
    if args.rounds < 1:
        sys.exit(f"--rounds must be >= 1, got {args.rounds}")
    if args.paired:
        rounds = {n: paired_cells(n) for n in lengths}
    else:
        rounds = {n: [[measure_in_subprocess(variant, n) for variant in variants] for _ in range(args.rounds)]
                  for n in lengths}
    rows = [median_over_rounds([cells[i] for cells in rounds[n]]) for n in lengths for i in range(len(variants))]
    summary = summarise(rows, variants, lengths)
    hardware = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads" if args.device == "cpu" else torch.cuda.get_device_name())
    timing = (f"steps interleaved in one process: {args.warmup} warm-up, then {args.steps} passes of one step per "
              f"variant" + (f", {args.rounds} such processes" if args.rounds > 1 else "")
              + "; medians over passes, speed-ups paired within a pass" if args.paired else
              f"median of {args.steps} steps after {args.warmup} warm-up"
              + (f", median of {args.rounds} alternating rounds" if args.rounds > 1 else ""))
    settings = (f"batch {args.batch}, d {args.hidden}, 8 heads, 2 layers, {N_ITEMS} items; {timing}"
                + (f"; glibc's default allocator from N={args.plain_malloc_from}"
                   if args.device == "cpu" and args.plain_malloc_from <= max(lengths) else "") + f"; {args.device}")
    print(f"hardware: {hardware}\nsettings: {settings}")
    print_table(rows, variants, lengths, summary)

    stem = results_target(args.out, args.quick, RESULTS / "linrec_scaling")
    if stem is None:
        return
    command = "python benchmarks/linrec_scaling.py " + " ".join(sys.argv[1:])
    write_results(stem.with_suffix(".json"), {
        "command": command.strip(), "hardware": hardware, "settings": settings,
        "date": time.strftime("%Y-%m-%d"), "rows": rows, "summary": summary})
    plot(rows, variants, lengths, summary, stem.with_suffix(".png"),
         f"{command.strip()} — {hardware}, {time.strftime('%Y-%m-%d')}\n{settings}")
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.png')}")


if __name__ == "__main__":
    main()
