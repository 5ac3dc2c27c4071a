"""This machine's GEMM throughput (fp32 and bf16): the peak the training step is measured against.

    python benchmarks/matmul_peak.py [--threads N] [--min-time 1.0] [--quick] [--json PATH]

Large square GEMMs (the attainable peak) and the GEMMs of the SASRec-equivalent step itself
(``train_step.py``'s setting: batch B = 2048, length L = 50, hidden D = 64, inner I = 256, 2 heads,
N = 1683 item rows of ml-100k): the projections [B·L, D]×[D, D], the feed-forward [B·L, D]×[D, I] and
[B·L, I]×[I, D], a weight gradient [D, B·L]×[B·L, I], the per-head attention batches
[B·H, L, d]×[B·H, d, L] and [B·H, L, L]×[B·H, L, d], and the CE logits [B, D]×[D, N].

Every call allocates its output, as a training step does. ``recbole_ext`` is imported first: it
tunes glibc's allocator (``compat.tune_glibc_malloc``), without which each large fresh output is
page-faulted in again and these timings drop a lot; that is the allocator the step runs with.
bf16 inputs are bf16 tensors (what autocast hands to the GEMM). Per shape: the median and the best
of repeated calls (``--min-time`` seconds each after warm-up); ``peak_gflops`` per dtype is the largest
median GFLOP/s over all shapes. Results: ``benchmarks/results/matmul_peak.json`` (``--quick``: small
sizes, written only with ``--json``).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' shared helpers, however this file is loaded
from results_file import results_target, write_results  # noqa: E402  (one rule for where results go)
from typing import Callable

import recbole_ext  # noqa: F401  (allocator tuning, as in training: see the docstring)
import torch
import torch.nn.functional as F

RESULTS = Path(__file__).parent / "results" / "matmul_peak.json"


def gemm_cases(batch: int, length: int, hidden: int, inner: int, heads: int, items: int,
               squares: tuple[int, ...]) -> list[tuple[str, tuple, Callable[..., torch.Tensor], list[tuple[int, ...]], int]]:
    """(name, shape label, op, operand shapes, FLOPs) per GEMM; FLOPs = 2·m·n·k (times the batch count)."""
    tokens, head = batch * length, hidden // heads
    linear = F.linear  # x [m, k], weight [n, k] → [m, n], as nn.Linear
    cases = [(f"square {n}", (n, n, n), torch.mm, [(n, n), (n, n)], 2 * n ** 3) for n in squares]
    cases += [
        ("projection Q/K/V/out", (tokens, hidden, hidden), linear, [(tokens, hidden), (hidden, hidden)],
         2 * tokens * hidden * hidden),
        ("feed-forward W1", (tokens, inner, hidden), linear, [(tokens, hidden), (inner, hidden)],
         2 * tokens * hidden * inner),
        ("feed-forward W2", (tokens, hidden, inner), linear, [(tokens, inner), (hidden, inner)],
         2 * tokens * hidden * inner),
        ("weight grad W1", (hidden, inner, tokens), torch.mm, [(hidden, tokens), (tokens, inner)],
         2 * tokens * hidden * inner),
        ("scores Q·Kᵀ", (batch * heads, length, length, head), torch.bmm,
         [(batch * heads, length, head), (batch * heads, head, length)], 2 * batch * heads * length * length * head),
        ("mixing P·V", (batch * heads, length, head, length), torch.bmm,
         [(batch * heads, length, length), (batch * heads, length, head)], 2 * batch * heads * length * length * head),
        ("CE logits", (batch, items, hidden), linear, [(batch, hidden), (items, hidden)], 2 * batch * hidden * items),
    ]
    return cases


def time_calls(op: Callable[..., torch.Tensor], operands: list[torch.Tensor], min_time: float) -> list[float]:
    """Seconds per call: 3 warm-up calls, then calls until ``min_time`` has passed (at least 5)."""
    for _ in range(3):
        op(*operands)
    times: list[float] = []
    deadline = time.perf_counter() + min_time
    while len(times) < 5 or time.perf_counter() < deadline:
        started = time.perf_counter()
        op(*operands)  # a fresh output each call; dropped before the next
        times.append(time.perf_counter() - started)
    return times


def measure(cases, dtypes: list[torch.dtype], min_time: float) -> list[dict]:
    rows = []
    generator = torch.Generator().manual_seed(0)
    for dtype in dtypes:
        for name, shape, op, operand_shapes, flops in cases:
            operands = [torch.randn(s, generator=generator).to(dtype) for s in operand_shapes]
            times = time_calls(op, operands, min_time)
            rows.append({"name": name, "dtype": str(dtype).removeprefix("torch."), "shape": shape, "flops": flops,
                         "calls": len(times), "gflops_median": flops / statistics.median(times) / 1e9,
                         "gflops_best": flops / min(times) / 1e9})
            del operands
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per shape")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="small sizes, short timing (smoke run)")
    parser.add_argument("--json", help=f"write results here (default without --quick: {RESULTS})")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    squares = (256, 512) if args.quick else (1024, 2048, 4096)
    batch = 64 if args.quick else args.batch
    min_time = 0.05 if args.quick else args.min_time
    cases = gemm_cases(batch, args.length, hidden=64, inner=256, heads=2, items=1683, squares=squares)
    rows = measure(cases, [torch.float32, torch.bfloat16], min_time)

    peaks = {dtype: max(r["gflops_median"] for r in rows if r["dtype"] == dtype) for dtype in ("float32", "bfloat16")}
    peak_gflops = {"fp32": peaks["float32"], "bf16": peaks["bfloat16"]}
    malloc_tuned = os.environ.get("RECBOLE_EXT_MALLOC_TUNING", "1") != "0"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch threads "
          f"{torch.get_num_threads()}, torch {torch.__version__}; glibc malloc tuned: {malloc_tuned}; "
          f"median / best of calls over {min_time} s; model shapes at batch {batch}, length {args.length}")
    print(f"{'GEMM':<22} {'dtype':<9} {'m x n x k (bmm: count x)':<24} {'GFLOP/s median':>14} {'best':>8} {'of peak':>8}")
    for row in rows:
        peak = peaks[row["dtype"]]
        print(f"{row['name']:<22} {row['dtype']:<9} {'x'.join(map(str, row['shape'])):<24} "
              f"{row['gflops_median']:>14.1f} {row['gflops_best']:>8.1f} {row['gflops_median'] / peak:>8.1%}")
    print(f"peak (largest median): fp32 {peak_gflops['fp32']:.1f} GFLOP/s, bf16 {peak_gflops['bf16']:.1f} GFLOP/s")
    target = results_target(args.json, args.quick, RESULTS)
    if target:
        write_results(target, {
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "torch": torch.__version__, "malloc_tuned": malloc_tuned,
            "quick": args.quick, "peak_gflops": peak_gflops, "results": rows,
        })


if __name__ == "__main__":
    main()
